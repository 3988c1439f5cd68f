// The train tests' tiny runs: a synthetic data set (three classes of 8x8 grey images, a bright
// shape whose form gives the class, on noise), the default config made tiny, one OpenMP thread.
#pragma once
#include <omp.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "train/config.h"

namespace vt_test {

/// Example i: label i % 3; pixels U(0, 0.3) noise from Philox(seed), and a shape of 0.9: a 3x3
/// square (class 0), a 2x6 horizontal bar (class 1) or a 6x2 vertical bar (class 2).
class Squares : public vitrine::nn::data::Dataset {
 public:
  Squares(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  int64_t size() const override { return n_; }
  vitrine::nn::data::Example get(int64_t index) const override {
    vitrine::nn::data::Example e;
    e.label = index % 3;
    e.image.channels = 1;
    e.image.height = e.image.width = 8;
    e.image.pixels.resize(64);
    for (int64_t p = 0; p < 64; ++p) {
      uint32_t r = philox4x32(static_cast<uint64_t>(index * 64 + p), seed_)[0];
      e.image.pixels[static_cast<size_t>(p)] = 0.3f * static_cast<float>(r >> 8) / 16777216.0f;
    }
    const int64_t y0[] = {2, 3, 1}, x0[] = {2, 1, 3}, h[] = {3, 2, 6}, w[] = {3, 6, 2};
    for (int64_t y = 0; y < h[e.label]; ++y)
      for (int64_t x = 0; x < w[e.label]; ++x)
        e.image.at(0, y0[e.label] + y, x0[e.label] + x) = 0.9f;
    return e;
  }
  std::vector<std::string> classes() const override { return {"square", "horizontal", "vertical"}; }
  std::string source() const override { return "squares"; }

 private:
  int64_t n_;
  uint64_t seed_;
};

struct Sets {
  std::shared_ptr<const vitrine::nn::data::Dataset> train = std::make_shared<Squares>(480, 1);
  std::shared_ptr<const vitrine::nn::data::Dataset> val = std::make_shared<Squares>(48, 2);
  std::shared_ptr<const vitrine::nn::data::Dataset> test = std::make_shared<Squares>(60, 3);
};

/// The default config made tiny, then the "--set" assignments.
inline nlohmann::json tiny_config(const std::vector<std::string>& sets = {}) {
  nlohmann::json c = vitrine::train::default_config();
  c["model"] = {{"image_size", 8}, {"patch", 4}, {"channels", 1}, {"num_classes", 3},
                {"dim", 16},       {"depth", 1}, {"heads", 2},    {"mlp_dim", 32}};
  c["data"]["dataset"] = "imagefolder";
  c["data"]["workers"] = 0;
  c["data"]["batch_size"] = 16;
  c["data"]["validation_fraction"] = 0.1;  // the tests hand the trainer a validation split
  c["data"]["transforms"] = {{"resize", {8, 8}}, {"mean", {0.3}}, {"std", {0.3}}};
  c["optim"]["lr"] = 5e-3;
  c["schedule"]["warmup_epochs"] = 0.5;
  c["train"]["epochs"] = 3;
  c["train"]["log_every"] = 4;
  c["train"]["tta_hflip"] = false;  // the default's (it has its own test)
  for (const auto& s : sets) vitrine::train::apply_override(c, s);
  vitrine::train::validate_config(c);
  return c;
}

/// One OpenMP thread for a scope (bitwise comparisons of runs).
struct SingleThread {
  int before = omp_get_max_threads();
  SingleThread() { omp_set_num_threads(1); }
  ~SingleThread() { omp_set_num_threads(before); }
};

}  // namespace vt_test
