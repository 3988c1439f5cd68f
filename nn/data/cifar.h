// CIFAR-10 and CIFAR-100 in their binary formats (https://www.cs.toronto.edu/~kriz/cifar.html).
//   CIFAR-10:  data_batch_1.bin .. data_batch_5.bin (train), test_batch.bin (test); records of
//              [1 label byte] [3072 pixel bytes], class names in batches.meta.txt (one a line).
//   CIFAR-100: train.bin, test.bin; records of [1 coarse label byte] [1 fine label byte] [3072];
//              names in fine_label_names.txt / coarse_label_names.txt.
// The 3072 pixel bytes are three 32 x 32 planes, red, green, blue, each row-major: exactly the
// CHW layout of Image, so get() is value / 255 in the same order. Pixels stay 8-bit in memory.
// When the names file is absent the standard names are used. Every file's size must be a whole
// number of records, and every label must name a class.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/data/dataset.h"

namespace vitrine::nn::data {

enum class CifarFormat {
  Cifar10,         // 1 label byte per record
  Cifar100Fine,    // 2 label bytes (coarse, fine); the fine label (100 classes)
  Cifar100Coarse,  // 2 label bytes (coarse, fine); the coarse label (20 super-classes)
};

class CifarDataset : public Dataset {
 public:
  /// Reads the record files in order (their records concatenated); classes name the labels.
  /// names_from says where the names came from, for the out-of-range label message.
  CifarDataset(const std::vector<std::string>& files, CifarFormat format,
               std::vector<std::string> classes, const std::string& names_from = "given");

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  std::vector<std::string> classes() const override { return classes_; }
  /// The folder of the record files.
  std::string source() const override { return source_; }

  /// All labels, without decoding any image.
  const std::vector<int64_t>& labels() const { return labels_; }

  static constexpr int64_t kSide = 32, kPixels = 3 * 32 * 32;

 private:
  std::string source_;
  std::vector<uint8_t> pixels_;  // size() * kPixels, CHW per record
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
};

/// CIFAR-10 from dir: the folder holding data_batch_*.bin, or its parent (which holds
/// cifar-10-batches-bin/, as the tarball unpacks). train: the five data batches, else test_batch.
std::shared_ptr<CifarDataset> cifar10(const std::string& dir, bool train = true);
/// CIFAR-100 from dir: the folder holding train.bin / test.bin, or its parent (which holds
/// cifar-100-binary/). Fine labels (100 classes) unless coarse (20 super-classes).
std::shared_ptr<CifarDataset> cifar100(const std::string& dir, bool train = true,
                                       bool coarse = false);

}  // namespace vitrine::nn::data
