// IDX image data sets (MNIST, Fashion-MNIST, KMNIST, EMNIST): one file of images and one of
// labels, each gzipped or raw (told apart by the gzip magic bytes 1f 8b, not by the file name).
//   images: [magic 0x00000803: u8 data, 3 dims] [count] [rows] [cols]  then count*rows*cols bytes
//   labels: [magic 0x00000801: u8 data, 1 dim]  [count]                then count bytes
// Header integers are big-endian u32. Images are rows x cols, row-major, 0 = background.
// Pixels stay 8-bit in memory (60000 x 784 bytes for Fashion-MNIST's training set); get() makes
// a 1 x rows x cols float image of value / 255. Every header value is checked against the real
// (decompressed) size of its file before anything is allocated from it; trailing bytes beyond
// what the header describes are an error too (a wrong header, as torchvision's strict reader).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/data/dataset.h"

namespace vitrine::nn::data {

struct IdxOptions {
  /// Class names indexed by label; every label must be below their count. Empty: "0", "1", ...
  /// up to the largest label in the file.
  std::vector<std::string> classes;
  /// Transpose every image: EMNIST stores its images transposed (column-major) compared with
  /// MNIST; set this for EMNIST so that its letters come out upright. A rows x cols file image
  /// then becomes cols x rows.
  bool transpose = false;
};

class IdxDataset : public Dataset {
 public:
  /// Reads both files (gzipped or raw); throws Error naming the file on any inconsistency.
  IdxDataset(const std::string& images_path, const std::string& labels_path,
             IdxOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  std::vector<std::string> classes() const override { return classes_; }
  std::string source() const override { return images_path_; }

  /// All labels, without decoding any image (for histograms and stratified splits).
  const std::vector<int64_t>& labels() const { return labels_; }
  /// The size of the images get() returns (after the transpose when that option is set).
  int64_t height() const { return transpose_ ? cols_ : rows_; }
  int64_t width() const { return transpose_ ? rows_ : cols_; }

 private:
  std::string images_path_;
  int64_t rows_ = 0, cols_ = 0;
  bool transpose_ = false;
  std::vector<uint8_t> pixels_;  // size() * rows_ * cols_, as stored in the file
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
};

/// Fashion-MNIST in dir ({train,t10k}-{images-idx3,labels-idx1}-ubyte, each with or without
/// .gz), with its ten class names (T-shirt/top, Trouser, ..., Ankle boot).
std::shared_ptr<IdxDataset> fashion_mnist(const std::string& dir = fashion_mnist_dir(),
                                          bool train = true);
/// MNIST in dir (the same file names), classes "0" to "9".
std::shared_ptr<IdxDataset> mnist(const std::string& dir, bool train = true);
/// Kuzushiji-MNIST in dir (the same file names), classes as torchvision's KMNIST ("o", "ki", ...).
std::shared_ptr<IdxDataset> kmnist(const std::string& dir, bool train = true);
/// EMNIST split ("byclass", "bymerge", "balanced", "letters", "digits" or "mnist") in dir
/// (emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte, with or without .gz), transposed
/// upright, with torchvision's class names ("letters": "N/A", "a", ..., "z"; label 0 is unused).
std::shared_ptr<IdxDataset> emnist(const std::string& dir, const std::string& split,
                                   bool train = true);

/// The ten Fashion-MNIST class names, indexed by label.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace vitrine::nn::data
