#include "nn/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "backends/env_switch.h"
#include "backends/generator.h"

namespace vitrine::nn::data {

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  VT_CHECK(base_ != nullptr, "Subset: the base dataset is null");
  for (int64_t i : indices_)
    VT_CHECK(i >= 0 && i < base_->size(), "Subset of {}: index {} is out of range (size {})",
             base_->source(), i, base_->size());
}

Example Subset::get(int64_t index) const {
  VT_CHECK(index >= 0 && index < size(), "Subset of {}: index {} is out of range (size {})",
           base_->source(), index, size());
  return base_->get(indices_[static_cast<size_t>(index)]);
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  // Fisher-Yates from the end; draw i uses Philox counter (stream << 32 | i) under key seed.
  for (int64_t i = n - 1; i > 0; --i) {
    auto w = philox4x32((stream << 32) | static_cast<uint64_t>(i), seed);
    uint64_t r = (static_cast<uint64_t>(w[0]) << 32 | w[1]) % static_cast<uint64_t>(i + 1);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(r)]);
  }
  return p;
}

std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> split(
    std::shared_ptr<const Dataset> dataset, double validation_fraction, uint64_t seed) {
  VT_CHECK(dataset != nullptr, "split: the dataset is null");
  VT_CHECK(validation_fraction >= 0 && validation_fraction < 1,
           "split: validation fraction must be in [0, 1), got {}", validation_fraction);
  const int64_t n = dataset->size();
  const int64_t nval =
      static_cast<int64_t>(std::llround(validation_fraction * static_cast<double>(n)));
  std::vector<int64_t> p = permutation(n, seed, /*stream=*/0xFFFFFFFFull);
  std::vector<int64_t> val(p.begin(), p.begin() + nval), train(p.begin() + nval, p.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  return {std::make_shared<Subset>(dataset, std::move(train)),
          std::make_shared<Subset>(dataset, std::move(val))};
}

std::string fashion_mnist_dir() {
  const std::string_view env = env_value("VITRINE_FASHION_MNIST");
  return env.empty() ? "/usr/share/datasets/fashion-mnist" : std::string(env);
}

}  // namespace vitrine::nn::data
