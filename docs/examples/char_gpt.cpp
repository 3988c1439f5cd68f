// A complete Vitrine program: a character-level GPT trained on Vitrine's own documentation.
// models::GPT (GPT-2's layout, tied head, GPT-2's init) at a small size, AdamW with a warm-up +
// cosine schedule and gradient clipping; it prints the train and validation loss as it learns,
// samples text from a prompt with GPT::generate (key/value cache, temperature, top-k), and saves
// the model. docs/nn.md walks through it; the test suite builds it and runs a short training
// (ctest -R examples/char_gpt).
//   example_char_gpt [--steps 1500] [--seed 0] [--data docs/] [--prompt "..."] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

// ---- the model --------------------------------------------------------------------------------

// models::GPT is GPT-2 (models/gpt.h): token and position embeddings, pre-norm blocks of causal
// self-attention and an MLP with the tanh GELU, a final LayerNorm and a head tied to the token
// embedding, initialised as GPT-2. Here it is small: 4 blocks, width 128, 4 heads, a context of
// 64 characters, and a vocabulary of the text's distinct bytes.
using vt::models::GPT;
using vt::models::GPTConfig;

// ---- the data ---------------------------------------------------------------------------------

// The text of every docs/*.md, in name order. Characters are bytes: the docs are ASCII but for a
// dozen dashes and arrows, whose UTF-8 bytes become characters of their own.
std::string read_docs(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) vt::fail("char_gpt: no .md files in {}", folder.string());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  return text;
}

// The vocabulary: the distinct bytes of the text, sorted; a character's id is its rank.
struct Vocab {
  std::vector<unsigned char> chars;  // id -> byte
  std::array<int64_t, 256> ids{};    // byte -> id (-1: not in the text)

  explicit Vocab(const std::string& text) {
    std::array<bool, 256> seen{};
    for (unsigned char c : text) seen[c] = true;
    ids.fill(-1);
    for (int c = 0; c < 256; ++c)
      if (seen[c]) {
        ids[c] = static_cast<int64_t>(chars.size());
        chars.push_back(static_cast<unsigned char>(c));
      }
  }
  std::vector<int64_t> encode(const std::string& s) const {
    std::vector<int64_t> out;
    for (unsigned char c : s) {
      if (ids[c] < 0)
        vt::fail("char_gpt: the text has no character '{}' (byte {})", char(c), int(c));
      out.push_back(ids[c]);
    }
    return out;
  }
};

// A batch of random windows: x = data[i : i + T], y = data[i + 1 : i + T + 1] (the next
// characters), for batch starts i drawn from gen. x, y: int64 [batch, T].
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t batch, int64_t T,
                                    vt::Generator& gen) {
  const auto starts =
      ops::randint(0, static_cast<int64_t>(data.size()) - T, {batch}, gen).to_vector<int64_t>();
  std::vector<int64_t> x, y;
  for (int64_t i : starts) {
    x.insert(x.end(), data.begin() + i, data.begin() + i + T);
    y.insert(y.end(), data.begin() + i + 1, data.begin() + i + T + 1);
  }
  return {ops::from_vector(x, {batch, T}), ops::from_vector(y, {batch, T})};
}

Tensor loss_of(GPT& model, const Tensor& x, const Tensor& y) { return model.loss(x, y); }

// The mean loss over `batches` fixed windows (the same ones at every call: a fresh generator with
// the same seed), in eval mode and without a graph.
double estimate_loss(GPT& model, const std::vector<int64_t>& data, int64_t batches, int64_t batch,
                     uint64_t seed) {
  vt::NoGradGuard no_grad;
  model.eval();
  vt::Generator gen(seed);
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    auto [x, y] = get_batch(data, batch, model.config.block_size, gen);
    total += loss_of(model, x, y).item();
  }
  model.train();
  return total / static_cast<double>(batches);
}

// ---- sampling ---------------------------------------------------------------------------------

// Extends the prompt by n characters with GPT::generate: the logits of the last position divided
// by the temperature, restricted to the top_k largest (0: all), softmax, one draw; the key/value
// cache makes each character one position's work.
std::string sample(GPT& model, const Vocab& vocab, const std::string& prompt, int64_t n,
                   double temperature, int64_t top_k, uint64_t seed) {
  const std::vector<int64_t> ids = vocab.encode(prompt);
  vt::models::GenerateOptions options;
  options.max_new_tokens = n, options.temperature = temperature, options.top_k = top_k;
  options.seed = seed;
  const Tensor out =
      model.generate(ops::from_vector(ids, {1, static_cast<int64_t>(ids.size())}), options);
  std::string text = prompt;
  const std::vector<int64_t> all = out.to_vector<int64_t>();
  for (size_t i = ids.size(); i < all.size(); ++i)
    text += static_cast<char>(vocab.chars[static_cast<size_t>(all[i])]);
  return text;
}

// ---- training ---------------------------------------------------------------------------------

int main(int argc, char** argv) {
  GPTConfig config;
  config.block_size = 64, config.n_layer = 4, config.n_head = 4, config.n_embd = 128;
  int64_t steps = 1500, batch = 32, eval_every = 100, eval_batches = 8, sample_chars = 400,
          top_k = 0;
  uint64_t seed = 0;
  double lr = 2e-3, weight_decay = 0.1, temperature = 0.8;
  bool check = false;
  // The docs folder beside this file's folder (docs/examples/..), unless --data says otherwise.
  std::string data_dir = std::filesystem::path(__FILE__).parent_path().parent_path().string();
  std::string prompt = "The ", out_path = "char_gpt.safetensors";

  CLI::App app{"Train a character-level GPT on Vitrine's docs, then sample from it."};
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str();
  app.add_option("--seed", seed, "seed of the init, the batches and the sampling")
      ->capture_default_str();
  app.add_option("--data", data_dir, "folder whose *.md files are the text")->capture_default_str();
  app.add_option("--batch", batch, "windows per step")->capture_default_str();
  app.add_option("--block", config.block_size, "window length (context)")->capture_default_str();
  app.add_option("--dim", config.n_embd, "embedding width")->capture_default_str();
  app.add_option("--layers", config.n_layer, "transformer blocks")->capture_default_str();
  app.add_option("--heads", config.n_head, "attention heads")->capture_default_str();
  app.add_option("--dropout", config.dropout, "dropout in attention and MLP")
      ->capture_default_str();
  app.add_option("--lr", lr, "peak learning rate (AdamW)")->capture_default_str();
  app.add_option("--eval-every", eval_every, "steps between loss reports")->capture_default_str();
  app.add_option("--sample", sample_chars, "characters to sample at the end")
      ->capture_default_str();
  app.add_option("--prompt", prompt, "text the sample starts from")->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k likeliest characters (0: all)")
      ->capture_default_str();
  app.add_option("--out", out_path, "checkpoint to write (\"\": none)")->capture_default_str();
  app.add_flag("--check", check, "exit 1 unless the train loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };

    // Data: the text as character ids, the first 90% to train on, the rest to validate.
    const std::string text = read_docs(data_dir);
    const Vocab vocab(text);
    const std::vector<int64_t> ids = vocab.encode(text);
    const auto n_train = static_cast<std::ptrdiff_t>(0.9 * static_cast<double>(ids.size()));
    const std::vector<int64_t> train(ids.begin(), ids.begin() + n_train);
    const std::vector<int64_t> val(ids.begin() + n_train, ids.end());
    config.vocab_size = static_cast<int64_t>(vocab.chars.size());
    std::printf("data: %zu characters from %s (%ld distinct), %zu to train, %zu to validate\n",
                text.size(), data_dir.c_str(), static_cast<long>(config.vocab_size), train.size(),
                val.size());

    vt::Generator gen(seed);
    GPT model(config, gen);
    // The tied weight is one parameter: the total counts wte.weight once, not again as lm_head.
    int64_t counted = 0;
    for (const auto& [name, p] : model.named_parameters()) counted += p.same(model.wte->weight);
    if (counted != 1) vt::fail("char_gpt: the tied weight is listed {} times, not once", counted);
    std::printf("model: %ld blocks, dim %ld, %ld heads, context %ld: %ld parameters\n",
                static_cast<long>(config.n_layer), static_cast<long>(config.n_embd),
                static_cast<long>(config.n_head), static_cast<long>(config.block_size),
                static_cast<long>(model.num_parameters()));

    // AdamW, weight decay on the matrices only; lr warms up over 5% of the steps, then a cosine
    // takes it down to a tenth.
    nn::optim::AdamW opt(nn::optim::param_groups_with_decay(model, lr, weight_decay),
                         {.beta1 = 0.9, .beta2 = 0.99});
    nn::optim::WarmupCosineSchedule schedule(/*warmup_steps=*/std::max<int64_t>(1, steps / 20),
                                             steps, /*min_factor=*/0.1);

    const uint64_t train_eval_seed = seed + 1, val_eval_seed = seed + 2;
    double first_train_loss = 0, last_train_loss = 0;
    std::printf("%6s %10s %10s %8s\n", "step", "train", "val", "time");
    for (int64_t step = 0; step <= steps; ++step) {
      if (step % eval_every == 0 || step == steps) {
        last_train_loss = estimate_loss(model, train, eval_batches, batch, train_eval_seed);
        const double val_loss = estimate_loss(model, val, eval_batches, batch, val_eval_seed);
        if (step == 0) first_train_loss = last_train_loss;
        std::printf("%6ld %10.4f %10.4f %7.0fs\n", static_cast<long>(step), last_train_loss,
                    val_loss, seconds());
        std::fflush(stdout);
      }
      if (step == steps) break;
      schedule.apply(opt, step);
      auto [x, y] = get_batch(train, batch, config.block_size, gen);
      opt.zero_grad();
      Tensor loss = loss_of(model, x, y);
      loss.backward();
      nn::optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
    }

    std::printf("\nsample (temperature %.2f%s):\n%s\n", temperature,
                top_k > 0 ? fmt::format(", top-k {}", top_k).c_str() : "",
                sample(model, vocab, prompt, sample_chars, temperature, top_k, seed + 3).c_str());

    // The checkpoint keeps the config (models::load_gpt rebuilds the model from the file alone)
    // and the vocabulary as byte values (vitrine.vocab), to decode its output.
    if (!out_path.empty()) {
      nn::Metadata meta;
      nn::set_metadata_json(meta, nn::kConfigKey, model.config.to_json());
      meta["vitrine.model"] = "gpt";
      nn::set_metadata_json(meta, "vitrine.vocab",
                            std::vector<int>(vocab.chars.begin(), vocab.chars.end()));
      nn::save_checkpoint(out_path, model, meta);
      std::printf("saved %s\n", out_path.c_str());
    }
    std::printf("%.0f s\n", seconds());
    if (check && !(last_train_loss < first_train_loss)) {
      std::fprintf(stderr, "error: the train loss did not fall (%.4f -> %.4f)\n", first_train_loss,
                   last_train_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
