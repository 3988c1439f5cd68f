// Folders of image files, decoded (image_decode.h: PNG, JPEG, BMP) when an example is asked for.
//   ImageFolder (as torchvision's): root/<class>/<image>; classes are the sorted names of root's
//     sub-folders (hidden ones, starting with '.', skipped), label = index in that list; a class
//     folder's images are found at any depth below it, sorted by path. Files ending in .png,
//     .jpg, .jpeg or .bmp (any case) are images; other files are ignored.
//   tiny_imagenet: the tiny-imagenet-200 layout, train/<wnid>/images/*.JPEG and val/images/*.JPEG
//     labelled by val/val_annotations.txt (file \t wnid \t x0 \t y0 \t x1 \t y1).
// Pixels: channels 3 gives RGB (grey images replicated into the three channels), channels 1 gives
// grey (colour images converted with ITU-R 601 luma, 0.299 R + 0.587 G + 0.114 B, in float);
// an alpha channel is dropped, not composited. Values are 8-bit value / 255 (luma of them for
// channels 1). Images may differ in size; transforms resize them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/data/dataset.h"
#include "nn/data/image_decode.h"

namespace vitrine::nn::data {

struct ImageFolderOptions {
  /// 3 (RGB) or 1 (grey), whatever the files hold.
  int channels = 3;
  /// Size limits on each image file, checked before it is decoded.
  ImageLimits limits;
};

class ImageFolder : public Dataset {
 public:
  /// Scans root/<class>/...; throws Error for a missing root, no class folders or a class folder
  /// without images. Images are not opened until get().
  explicit ImageFolder(const std::string& root, ImageFolderOptions options = {});
  /// An explicit list of image files and their labels (the tiny-imagenet layout uses this).
  ImageFolder(std::string source, std::vector<std::string> files, std::vector<int64_t> labels,
              std::vector<std::string> classes, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  /// Reads and decodes image index; throws Error naming the file when it cannot. Thread-safe.
  Example get(int64_t index) const override;
  std::vector<std::string> classes() const override { return classes_; }
  std::string source() const override { return source_; }

  const std::vector<std::string>& files() const { return files_; }
  /// All labels, without decoding any image.
  const std::vector<int64_t>& labels() const { return labels_; }

 private:
  std::string source_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
  int channels_ = 3;
  ImageLimits limits_;
};

/// tiny-imagenet-200 at root (the folder holding wnids.txt, train/ and val/): the training images
/// when train, else the validation images. Classes are the sorted WordNet ids of wnids.txt (the
/// order ImageFolder would give train/), named by the first synonym in words.txt when present
/// ("n01443537" -> "goldfish"; a name two classes share gets its id appended), else by their ids.
/// Errors name the file: missing wnids.txt or folders, an empty class folder, an annotation line
/// without a file and a WordNet id, naming an unknown class or a missing file.
std::shared_ptr<ImageFolder> tiny_imagenet(const std::string& root, bool train = true,
                                           ImageFolderOptions options = {});

}  // namespace vitrine::nn::data
