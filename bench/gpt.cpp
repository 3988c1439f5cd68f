// GPT-2's speed and memory in Vitrine, the twin of bench/gpt_torch.py (same model, sizes, steps
// and measurement): models::GPT at 6 layers, 6 heads, width 384, GPT-2's vocabulary 50257, on
// random tokens. Training: AdamW (lr 6e-4, weight decay 0.1), clip 1.0, one step per batch [B,
// T]. Generation: GPT::generate with its key/value cache, temperature 1, top-k 200. Prints one
// JSON line with tokens_per_s and peak_rss_mib (ru_maxrss: the process's peak). bench/gpt.py
// runs both side by side.
//   gpt_bench --what train --T 64 --steps 5 --threads 2
#include <sys/resource.h>
#include <vitrine.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;

int main(int argc, char** argv) {
  std::string what = "train";
  int64_t T = 64, B = 4, steps = 5;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--what")
      what = v;
    else if (k == "--T")
      T = std::stoll(v);
    else if (k == "--B")
      B = std::stoll(v);
    else if (k == "--steps")
      steps = std::stoll(v);
    else if (k == "--threads")
      threads = std::stoi(v);
    else {
      std::fprintf(stderr, "error: unknown option %s\n", k.c_str());
      return 1;
    }
  }
  try {
    vt::set_num_threads(threads);
    vt::models::GPTConfig c;
    c.vocab_size = 50257, c.n_layer = 6, c.n_head = 6, c.n_embd = 384;
    vt::Generator gen(0);
    vt::models::GPT model(c, gen);
    using clock = std::chrono::steady_clock;
    double seconds = 0;
    int64_t tokens = 0;
    if (what == "train") {
      nn::optim::AdamW opt(model.parameters(), {.lr = 6e-4, .weight_decay = 0.1});
      const vt::Tensor x = ops::randint(0, c.vocab_size, {B, T}, gen);
      const vt::Tensor y = ops::randint(0, c.vocab_size, {B, T}, gen);
      auto step = [&] {
        vt::Tensor loss = model.loss(x, y);
        opt.zero_grad();
        loss.backward();
        nn::optim::clip_grad_norm_(model.parameters(), 1.0);
        opt.step();
      };
      step();  // warm-up
      const auto t0 = clock::now();
      for (int64_t s = 0; s < steps; ++s) step();
      seconds = std::chrono::duration<double>(clock::now() - t0).count();
      tokens = steps * B * T;
    } else {
      const vt::Tensor idx = ops::randint(0, c.vocab_size, {1, T}, gen);
      vt::models::GenerateOptions o;
      o.top_k = 200, o.max_new_tokens = 2;
      model.generate(idx, o);  // warm-up
      o.max_new_tokens = steps;
      const auto t0 = clock::now();
      model.generate(idx, o);
      seconds = std::chrono::duration<double>(clock::now() - t0).count();
      tokens = steps;
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf(
        "{\"side\": \"vitrine\", \"what\": \"%s\", \"T\": %ld, \"tokens_per_s\": %.3f, "
        "\"peak_rss_mib\": %.1f}\n",
        what.c_str(), static_cast<long>(T), static_cast<double>(tokens) / seconds,
        static_cast<double>(ru.ru_maxrss) / 1024.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
