// Trains a GPT-2 (models::GPT) on token files and samples from it: the shape of llm.c's
// train_gpt2 and nanoGPT's train.py, on Vitrine's library.
//   - data: llm.c's or nanoGPT's uint16 token files (nn/data/tokens.h), read through a memory
//     map; random [B, T] windows for training (nanoGPT's get_batch), fixed ones for validation.
//     Without token files, --text DIR tokenises the *.md and *.txt files of DIR as bytes
//     (vocabulary 256) and writes train.bin / val.bin (llm.c's format, 90% / 10%) beside --out:
//     GPT-2's BPE tokenizer is not installable here, so the bytes are the tokens.
//   - model: a preset (--preset gpt2, gpt-mini, ...) or the sizes given; the vocabulary is the
//     data's (256 for bytes) unless --vocab says more (50257 for GPT-2's tokens).
//   - training: AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices), lr warmed up then a cosine
//     to a tenth, gradients clipped to 1; the validation loss every --eval-every steps.
//   - then a sample (GPT::generate, key/value cache) and the model written by models::save_gpt
//     (models::load_gpt reads it back).
//   example_gpt2_train --text docs --steps 200 --out gpt.safetensors
//   example_gpt2_train --train fineweb_train_000001.bin --val fineweb_val_000000.bin
//                      --vocab 50257 --preset gpt2 --batch 4 --block 1024   (one line)
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace data = vitrine::nn::data;
namespace fs = std::filesystem;
using vt::Tensor;

// The bytes of every *.md / *.txt under dir (sorted by path), as tokens 0..255, split 90 / 10
// into llm.c token files in folder.
std::pair<std::string, std::string> tokenize_bytes(const std::string& dir, const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".md" || e.path().extension() == ".txt"))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) vt::fail("gpt2_train: --text {}: no .md or .txt files there", dir);
  std::vector<uint16_t> tokens;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    for (unsigned char c : s.str()) tokens.push_back(c);
  }
  const auto n_train = static_cast<std::ptrdiff_t>(0.9 * static_cast<double>(tokens.size()));
  fs::create_directories(folder);
  const std::string train = (folder / "train.bin").string(), val = (folder / "val.bin").string();
  data::write_token_file(train, {tokens.data(), static_cast<size_t>(n_train)});
  data::write_token_file(val, {tokens.data() + n_train, tokens.size() - n_train});
  std::printf("tokenised %zu files of %s as bytes: %td train, %td val tokens -> %s\n", files.size(),
              dir.c_str(), n_train, static_cast<std::ptrdiff_t>(tokens.size()) - n_train,
              folder.string().c_str());
  return {train, val};
}

int main(int argc, char** argv) {
  std::string train_path, val_path, text_dir, preset, out_path = "gpt2_train.safetensors";
  vt::models::GPTConfig config;
  config.block_size = 128, config.n_layer = 4, config.n_head = 4, config.n_embd = 128;
  int64_t vocab = 0, steps = 200, batch = 8, eval_every = 50, val_batches = 8, sample_tokens = 200,
          top_k = 40;
  double lr = 1e-3, temperature = 0.8;
  uint64_t seed = 0;
  bool check = false;
  CLI::App app{"Train a GPT-2 on token files (or a folder of text, as bytes), then sample."};
  app.add_option("--train", train_path, "training tokens (llm.c's or nanoGPT's uint16 file)");
  app.add_option("--val", val_path, "validation tokens (same formats)");
  app.add_option("--text", text_dir, "tokenise this folder's *.md / *.txt as bytes instead");
  app.add_option("--preset", preset, "a models::GPTConfig preset (gpt2, gpt-mini, ...)");
  app.add_option("--layers", config.n_layer, "blocks")->capture_default_str();
  app.add_option("--heads", config.n_head, "attention heads")->capture_default_str();
  app.add_option("--dim", config.n_embd, "width")->capture_default_str();
  app.add_option("--block", config.block_size, "context length T")->capture_default_str();
  app.add_option("--vocab", vocab,
                 "vocabulary size (0: 256 for bytes, else the data's largest "
                 "token + 1)");
  app.add_option("--dropout", config.dropout, "dropout")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str();
  app.add_option("--batch", batch, "windows per step (B)")->capture_default_str();
  app.add_option("--lr", lr, "peak learning rate")->capture_default_str();
  app.add_option("--eval-every", eval_every, "steps between validation losses")
      ->capture_default_str();
  app.add_option("--val-batches", val_batches, "batches in a validation loss")
      ->capture_default_str();
  app.add_option("--sample", sample_tokens, "tokens to sample at the end")->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k likeliest (0: all)")->capture_default_str();
  app.add_option("--seed", seed, "init, batches and sampling")->capture_default_str();
  app.add_option("--out", out_path, "model file to write (\"\": none)")->capture_default_str();
  app.add_flag("--check", check, "exit 1 unless the validation loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (text_dir.empty() == train_path.empty())
      vt::fail("gpt2_train: give either --text DIR or --train FILE (with --val FILE)");
    const bool bytes = !text_dir.empty();
    if (bytes) {
      const fs::path folder =
          fs::absolute(out_path.empty() ? fs::path("gpt2_train.safetensors") : fs::path(out_path))
              .parent_path() /
          "gpt2_train_tokens";
      std::tie(train_path, val_path) = tokenize_bytes(text_dir, folder);
    } else if (val_path.empty()) {
      vt::fail("gpt2_train: --train needs --val (a validation token file)");
    }
    auto train = std::make_shared<const data::TokenFile>(train_path);
    auto val = std::make_shared<const data::TokenFile>(val_path);
    if (!preset.empty()) {
      const vt::models::GPTConfig p = vt::models::GPTConfig::preset(preset);
      config.n_layer = p.n_layer, config.n_head = p.n_head, config.n_embd = p.n_embd;
    }
    // Without --vocab, the data's largest token + 1 (a pass over both files); with it, a token
    // beyond is the embedding's error when a batch reads it.
    config.vocab_size = vocab > 0 ? vocab : 256;
    if (vocab == 0 && !bytes) {
      uint16_t largest = 0;
      for (const auto* f : {train.get(), val.get()})
        for (uint16_t t : f->tokens()) largest = std::max(largest, t);
      config.vocab_size = largest + 1;
    }
    std::printf("data: %ld train and %ld val tokens (%s), vocabulary %ld\n",
                static_cast<long>(train->size()), static_cast<long>(val->size()),
                train->format() == data::TokenFormat::LlmC ? "llm.c's format" : "raw uint16",
                static_cast<long>(config.vocab_size));

    vt::Generator gen(seed);
    vt::models::GPT model(config, gen);
    std::printf("model: %s, %ld parameters\n", model.extra_repr().c_str(),
                static_cast<long>(model.num_parameters()));
    data::TokenWindows windows(train, {.batch_size = batch,
                                       .block_size = config.block_size,
                                       .order = data::WindowOrder::Random,
                                       .seed = seed});
    data::TokenWindows val_windows(val, {.batch_size = batch,
                                         .block_size = config.block_size,
                                         .order = data::WindowOrder::Sequential});
    // The validation loss over the first val_batches sequential batches (the same every time).
    auto val_loss = [&] {
      vt::NoGradGuard no_grad;
      model.eval();
      val_windows.set_position(0);
      const int64_t n = std::min(val_batches, val_windows.batches_per_epoch());
      double total = 0;
      for (int64_t b = 0; b < n; ++b) {
        const data::TokenBatch vb = val_windows.next();
        total += model.loss(vb.x, vb.y).item();
      }
      model.train();
      return total / static_cast<double>(n);
    };

    nn::optim::AdamW opt(nn::optim::param_groups_with_decay(model, lr, 0.1),
                         {.beta1 = 0.9, .beta2 = 0.95});
    nn::optim::WarmupCosineSchedule schedule(std::max<int64_t>(1, steps / 10), steps, 0.1);
    const double first = val_loss();
    double last = first;
    std::printf("%6s %10s %10s %8s\n", "step", "train", "val", "time");
    std::printf("%6d %10s %10.4f %7.0fs\n", 0, "", first, seconds());
    for (int64_t step = 1; step <= steps; ++step) {
      schedule.apply(opt, step - 1);
      const data::TokenBatch b = windows.next();
      opt.zero_grad();
      Tensor loss = model.loss(b.x, b.y);
      loss.backward();
      nn::optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      if (step % eval_every == 0 || step == steps) {
        last = val_loss();
        std::printf("%6ld %10.4f %10.4f %7.0fs\n", static_cast<long>(step), loss.item(), last,
                    seconds());
        std::fflush(stdout);
      }
    }

    if (sample_tokens > 0) {
      // The prompt: the first 16 validation tokens.
      const int64_t n = std::min<int64_t>(16, val->size());
      std::vector<int64_t> prompt(val->tokens(0, n).begin(), val->tokens(0, n).end());
      vt::models::GenerateOptions o;
      o.max_new_tokens = sample_tokens, o.temperature = temperature, o.top_k = top_k;
      o.seed = seed + 1;
      const std::vector<int64_t> out =
          model.generate(vt::ops::from_vector(prompt, {1, n}), o).to_vector<int64_t>();
      std::printf("\nsample (temperature %.2f, top-k %ld):\n", temperature,
                  static_cast<long>(top_k));
      if (bytes) {
        std::string text;
        for (int64_t t : out) text += static_cast<char>(t);
        std::printf("%s\n", text.c_str());
      } else {
        for (int64_t t : out) std::printf("%ld ", static_cast<long>(t));
        std::printf("\n");
      }
    }
    if (!out_path.empty()) {
      vt::models::save_gpt(out_path, model);
      std::printf("saved %s\n", out_path.c_str());
    }
    if (check && !(last < first)) {
      std::fprintf(stderr, "error: the validation loss did not fall (%.4f -> %.4f)\n", first, last);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
