// Datasets: indexed collections of labelled images. A reader (idx.h, cifar.h, image_folder.h)
// keeps the raw 8-bit pixels and decodes one example on request; transforms (transforms.h) turn
// it into normalised float pixels; the loader (loader.h) batches examples on background threads
// into tensors. Bad data is a vitrine::Error naming the file and the problem.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace vitrine::nn::data {

/// One image, float pixels in channel-major order (CHW). Readers give values in [0, 1] (8-bit
/// value / 255, as torchvision's ToTensor); transforms may change size and range.
struct Image {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<float> pixels;  // channels * height * width
  float& at(int64_t c, int64_t y, int64_t x) { return pixels[(c * height + y) * width + x]; }
  float at(int64_t c, int64_t y, int64_t x) const { return pixels[(c * height + y) * width + x]; }
};

struct Example {
  Image image;
  int64_t label = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// Example i (0 <= i < size()), decoded; must be safe to call from several threads at once.
  virtual Example get(int64_t index) const = 0;
  /// Class names, indexed by label.
  virtual std::vector<std::string> classes() const = 0;
  /// What this dataset was read from (a file or folder), for messages and reports.
  virtual std::string source() const = 0;
};

/// A view of some examples of another dataset (a train/validation split, a subset for tests).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  std::vector<std::string> classes() const override { return base_->classes(); }
  std::string source() const override { return base_->source(); }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

/// A seeded split into (train, validation): the validation part takes round(fraction * size)
/// examples chosen by a Philox permutation of seed, so the split is the same on every run.
std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> split(
    std::shared_ptr<const Dataset> dataset, double validation_fraction, uint64_t seed);

/// A random permutation of [0, n) that depends only on (seed, stream): Fisher-Yates driven by
/// Philox (the loader shuffles each epoch with stream = epoch).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream);

/// The folder of Fashion-MNIST: $VITRINE_FASHION_MNIST when set, else
/// /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
std::string fashion_mnist_dir();

}  // namespace vitrine::nn::data
