// Data sets by name: what a program needs to open Fashion-MNIST, MNIST, CIFAR-10/100, an image
// folder or the pasted-objects localisation set from a name and a folder, with no training config.
// vitrine-train's data section and vitrine-explain's --dataset are read through it.
//
//   auto files = nn::data::open_dataset({.name = "fashion-mnist"});  // the Debian package's folder
//   auto [train, validation] = nn::data::split(files.train, 0.1, /*seed=*/0);
//   nn::data::DataLoader loader(train, nn::data::from_config({{"mean", {0.286}}, {"std", {0.353}}},
//                                                             1, true), {.batch_size = 64});
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/data/dataset.h"
#include "nn/data/pasted.h"

namespace vitrine::nn::data {

/// What Vitrine knows of a named data set before reading it.
struct DatasetInfo {
  std::string name;
  int64_t channels = 0;             // 0: any (an image folder: 1 or 3, ImageFolderOptions)
  int64_t classes = 0;              // 0: the folder's
  int64_t height = 0, width = 0;    // 0: images of any size (pasted: its canvas)
  std::string holds;                // what its folder must hold, for messages
  bool has_default_folder = false;  // Fashion-MNIST's Debian package folder
};

/// fashion-mnist, mnist, cifar10, cifar100, imagefolder, fashion-mnist-pasted.
const std::vector<DatasetInfo>& datasets();
/// Their names, in that order.
std::vector<std::string> dataset_names();
/// The entry of `name`; an Error listing the known names for another.
const DatasetInfo& dataset_info(const std::string& name);

/// Which data set to open and how.
struct DatasetOptions {
  std::string name = "fashion-mnist";
  /// The folder; "" = the data set's default folder (Fashion-MNIST's: fashion_mnist_dir()).
  std::string path;
  /// imagefolder: the images decoded to 1 (grey) or 3 (RGB) channels.
  int64_t channels = 3;
  /// fashion-mnist-pasted: the training file's canvases with these options, the test file's
  /// with pasted.seed + 1 (other places, scales and fragments).
  PastedOptions pasted{};
  /// imagefolder with one folder per class and no train/ test/ split: the seed of the 10% of the
  /// images split off as the test set.
  uint64_t split_seed = 1;
};

/// A data set's two files.
struct DatasetFiles {
  std::shared_ptr<const Dataset> train;  // null when not asked for
  std::shared_ptr<const Dataset> test;
  std::string path;  // the folder they were read from
};

/// The folder of a data set: options.path, or its default folder; an Error naming what the folder
/// must hold when the path is empty and the data set has no default.
std::string dataset_folder(const DatasetOptions& options);

/// Opens a data set's training (when with_train) and test files (nothing is decoded yet for image
/// folders). Errors name the folder and what it should hold.
///   fashion-mnist, mnist:  the four IDX files
///   fashion-mnist-pasted:  Fashion-MNIST's items pasted on canvases (PastedObjects)
///   cifar10, cifar100:     the binary batches
///   imagefolder:           tiny-imagenet-200 when the folder holds wnids.txt (its val/ images are
///                          the test set); else folder/train/<class>/... and
///                          folder/test/<class>/... (or folder/val/<class>/...) when folder/train
///                          exists; else folder/<class>/..., whose test set is a seeded 10% of the
///                          images
DatasetFiles open_dataset(const DatasetOptions& options, bool with_train = true);

/// The fixed [height, width] of a data set's images, {0, 0} for images of any size.
std::pair<int64_t, int64_t> image_size(const DatasetOptions& options);

/// PastedOptions from a JSON object of its fields ({"canvas": 64, "distractors": "noise"}), absent
/// keys keeping their defaults: the one reader of data.pasted (vitrine-train's config reads it
/// here too). An Error names the dotted key ("data.pasted.count must be an integer in [0, 100],
/// got -1") for an unknown key (with the closest known one), a value of the wrong type or out of
/// range, min_scale over max_scale, or a canvas too small for Fashion-MNIST's items at max_scale.
PastedOptions pasted_options_from_json(const nlohmann::json& j);
/// The JSON object of all of o's fields (what pasted_options_from_json reads back).
nlohmann::json pasted_options_to_json(const PastedOptions& o);

/// DatasetOptions from a data section as vitrine-train writes it into its configs and checkpoints
/// ({"dataset": "cifar10", "path": "...", "pasted": {...}}; other keys ignored), with `channels`
/// for an image folder and `split_seed` for its test split.
DatasetOptions dataset_options_from_json(const nlohmann::json& data, int64_t channels,
                                         uint64_t split_seed);

}  // namespace vitrine::nn::data
