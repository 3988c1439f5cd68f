// A complete Vitrine program: a character-level GPT trained on Vitrine's own documentation.
// Token and position embeddings, pre-norm transformer blocks with causal self-attention, a head
// tied to the token embedding, AdamW with a warm-up + cosine schedule and gradient clipping; it
// prints the train and validation loss as it learns, samples text from a prompt, and saves the
// model. docs/nn.md walks through it; the test suite builds it and runs a short training
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

struct GPTConfig {
  int64_t vocab_size = 0;   // set from the data
  int64_t block_size = 64;  // the longest context the model sees
  int64_t dim = 128, layers = 4, heads = 4;
  double dropout = 0;
};

// One transformer block, pre-norm as GPT-2: each branch reads a normalised copy of the residual
// stream and adds its result back to it. x: [B, T, dim] -> [B, T, dim].
class Block : public nn::Module {
 public:
  Block(const GPTConfig& c, vt::Generator& gen) {
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(c.dim));
    attn =
        register_module("attn", std::make_shared<nn::MultiheadSelfAttention>(
                                    c.dim, c.heads, /*qkv_bias=*/true, c.dropout, c.dropout, gen));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(c.dim));
    mlp =
        register_module("mlp", std::make_shared<nn::MLP>(c.dim, 4 * c.dim, c.dim, c.dropout, gen));
  }
  Tensor forward(const Tensor& x) override {
    // is_causal: position t attends to positions 0..t only, so the prediction of the character
    // after t cannot look at it.
    Tensor h = x + attn->forward((*ln1)(x), /*attn_mask=*/Tensor(), /*is_causal=*/true);
    return h + (*mlp)((*ln2)(h));
  }
  std::string type_name() const override { return "Block"; }

  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadSelfAttention> attn;
  std::shared_ptr<nn::MLP> mlp;
};

// idx int64 [B, T] (T <= block_size) -> logits [B, T, vocab_size]: row t scores every character
// as the one that follows idx[:, t].
class GPT : public nn::Module {
 public:
  GPT(const GPTConfig& c, vt::Generator& gen) : config(c) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.dim, gen));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.dim, gen));
    blocks = register_module("blocks", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<Block>(c, gen));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.dim));
    // Weight tying (GPT-2): the output head is the token embedding read backwards, logits = h
    // wte^T. Registering the same tensor as lm_head.weight keeps GPT-2's names in the state dict;
    // named_parameters() lists a shared tensor once, so the optimizer updates it once.
    lm_head = register_module("lm_head", std::make_shared<nn::Module>());
    lm_head->register_parameter("weight", wte->weight);
    // Embeddings start at N(0, 1) as PyTorch's; a GPT starts them small (GPT-2: N(0, 0.02)), so
    // the tied head's first logits are near 0 and the first loss near ln(vocab_size).
    nn::init::normal_(wte->weight, 0, 0.02, gen);
    nn::init::normal_(wpe->weight, 0, 0.02, gen);
  }
  Tensor forward(const Tensor& idx) override {
    const int64_t T = idx.size(1);
    Tensor x = (*wte)(idx) + (*wpe)(ops::arange(T));  // [B, T, dim] + [T, dim]
    x = (*ln_f)((*blocks)(x));
    return ops::linear(x, wte->weight);  // x wte^T: [B, T, vocab_size]
  }
  std::string type_name() const override { return "GPT"; }

  GPTConfig config;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Module> lm_head;
};

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

Tensor loss_of(GPT& model, const Tensor& x, const Tensor& y) {
  Tensor logits = model(x);
  return ops::cross_entropy(logits.reshape({-1, model.config.vocab_size}), y.reshape({-1}));
}

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

// Extends the prompt by n characters, one at a time: the logits of the last position, divided by
// the temperature, restricted to the top_k largest (0: all), softmax, then a draw from gen.
std::string sample(GPT& model, const Vocab& vocab, const std::string& prompt, int64_t n,
                   double temperature, int64_t top_k, vt::Generator& gen) {
  vt::NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> ids = vocab.encode(prompt);
  std::string out = prompt;
  for (int64_t i = 0; i < n; ++i) {
    // The last block_size characters are the context (the model knows no later positions).
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.config.block_size);
    std::vector<int64_t> context(ids.end() - T, ids.end());
    Tensor logits = model(ops::from_vector(context, {1, T})).select(0, 0).select(0, T - 1);
    std::vector<double> p = (logits * (1.0 / temperature)).to_vector<double>();  // [vocab_size]
    if (top_k > 0 && top_k < static_cast<int64_t>(p.size())) {
      std::vector<double> sorted = p;
      std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                       std::greater<>());
      for (double& v : p)
        if (v < sorted[top_k - 1]) v = -INFINITY;
    }
    const double max = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - max));
    // Inverse-CDF draw: the first id whose cumulative probability passes u.
    const double u = ops::rand({1}, gen, vt::kFloat64).item() * sum;
    int64_t next = static_cast<int64_t>(p.size()) - 1;
    double cumulative = 0;
    for (size_t c = 0; c < p.size(); ++c)
      if ((cumulative += p[c]) > u) {
        next = static_cast<int64_t>(c);
        break;
      }
    ids.push_back(next);
    out += static_cast<char>(vocab.chars[next]);
  }
  model.train();
  return out;
}

// ---- training ---------------------------------------------------------------------------------

int main(int argc, char** argv) {
  GPTConfig config;
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
  app.add_option("--dim", config.dim, "embedding width")->capture_default_str();
  app.add_option("--layers", config.layers, "transformer blocks")->capture_default_str();
  app.add_option("--heads", config.heads, "attention heads")->capture_default_str();
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
                static_cast<long>(config.layers), static_cast<long>(config.dim),
                static_cast<long>(config.heads), static_cast<long>(config.block_size),
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

    vt::Generator sample_gen(seed + 3);
    std::printf("\nsample (temperature %.2f%s):\n%s\n", temperature,
                top_k > 0 ? fmt::format(", top-k {}", top_k).c_str() : "",
                sample(model, vocab, prompt, sample_chars, temperature, top_k, sample_gen).c_str());

    // The checkpoint keeps the config and the vocabulary (as byte values), so that the file alone
    // rebuilds the model and decodes its output.
    if (!out_path.empty()) {
      nn::Metadata meta;
      nn::set_metadata_json(meta, nn::kConfigKey,
                            {{"vocab", std::vector<int>(vocab.chars.begin(), vocab.chars.end())},
                             {"block_size", config.block_size},
                             {"dim", config.dim},
                             {"layers", config.layers},
                             {"heads", config.heads}});
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
