// The data sets a training config names: data.dataset read from data_path(config), its training
// file split into (train, validation) by data.validation_fraction with train.seed, and its test
// file. vitrine-train and the tests build their Trainer from these.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/data/dataset.h"
#include "train/options.h"

namespace vitrine::train {

struct Datasets {
  std::shared_ptr<const nn::data::Dataset> train;       // the training file minus validation
  std::shared_ptr<const nn::data::Dataset> validation;  // null when validation_fraction is 0
  std::shared_ptr<const nn::data::Dataset> test;
  std::string path;  // the folder they were read from
};

/// Opens the config's data set (nothing is decoded yet for image folders). Errors name the
/// folder or file and what it should hold ("data.path ... must be the folder holding ...").
///   fashion-mnist, mnist: the IDX files of data_path(config)
///   fashion-mnist-pasted: Fashion-MNIST's IDX files, each item pasted on a canvas
///                         (nn::data::PastedObjects with pasted_options(config)): the training
///                         file with data.pasted.seed, the test file with data.pasted.seed + 1
///   cifar10, cifar100:    the binary batches
///   imagefolder:          tiny-imagenet-200 when path holds wnids.txt (its val/ images are the
///                         test set); else path/train/<class>/... and path/test/<class>/...
///                         (or path/val/<class>/...) when path/train exists; else
///                         path/<class>/..., whose test set is a seeded 10% of the images
///                         (seed train.seed + 1), validation being split from the rest
/// Images are read with the model's channel count (model.channels). data.subset N > 0 keeps the
/// first N images of the training split (after validation is split off).
Datasets load_datasets(const nlohmann::json& config);
/// The same from typed options: data.dataset opened, its training file split by
/// data.validation_fraction with `seed` (train.seed), data.subset applied.
Datasets load_datasets(const DataOptions& data, uint64_t seed);

/// The test part of load_datasets alone (vitrine-train --eval).
std::shared_ptr<const nn::data::Dataset> load_test_set(const nlohmann::json& config);

}  // namespace vitrine::train
