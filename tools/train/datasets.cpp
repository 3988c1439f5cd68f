// load_datasets: see datasets.h.
#include "tools/train/datasets.h"

#include <filesystem>

#include "backends/error.h"
#include "nn/data/cifar.h"
#include "nn/data/idx.h"
#include "nn/data/image_folder.h"
#include "nn/data/pasted.h"
#include "tools/train/config.h"

namespace vitrine::train {

using nlohmann::json;
namespace fs = std::filesystem;
namespace data = nn::data;

namespace {

struct Parts {
  std::shared_ptr<const data::Dataset> train_file, test;
  std::string path;
};

/// The data set's training and test files, unsplit.
Parts open_parts(const json& config, bool need_train) {
  const json& d = config.at("data");
  const std::string name = d.at("dataset").get<std::string>();
  const std::string path = data_path(config);
  VT_CHECK(fs::is_directory(path),
           "data: {} folder \"{}\" does not exist (give the data set's folder with --data DIR)",
           name, path);
  Parts p;
  p.path = path;
  if (name == "fashion-mnist") {
    if (need_train) p.train_file = data::fashion_mnist(path, true);
    p.test = data::fashion_mnist(path, false);
  } else if (name == "fashion-mnist-pasted") {
    data::PastedOptions o = pasted_options(config);
    if (need_train)
      p.train_file = std::make_shared<data::PastedObjects>(data::fashion_mnist(path, true), o);
    o.seed += 1;  // the test canvases draw other places, scales and fragments
    p.test = std::make_shared<data::PastedObjects>(data::fashion_mnist(path, false), o);
  } else if (name == "mnist") {
    if (need_train) p.train_file = data::mnist(path, true);
    p.test = data::mnist(path, false);
  } else if (name == "cifar10") {
    if (need_train) p.train_file = data::cifar10(path, true);
    p.test = data::cifar10(path, false);
  } else if (name == "cifar100") {
    if (need_train) p.train_file = data::cifar100(path, true);
    p.test = data::cifar100(path, false);
  } else {
    VT_CHECK(name == "imagefolder", "data: unknown data set \"{}\"", name);
    data::ImageFolderOptions o;
    o.channels = static_cast<int>(model_spec(config).channels);
    if (fs::exists(fs::path(path) / "wnids.txt")) {
      if (need_train) p.train_file = data::tiny_imagenet(path, true, o);
      p.test = data::tiny_imagenet(path, false, o);
    } else if (fs::is_directory(fs::path(path) / "train")) {
      const fs::path test_dir = fs::is_directory(fs::path(path) / "test") ? fs::path(path) / "test"
                                                                          : fs::path(path) / "val";
      VT_CHECK(fs::is_directory(test_dir),
               "data: {} has a train/ folder but no test/ or val/ folder beside it", path);
      if (need_train) p.train_file = std::make_shared<data::ImageFolder>(path + "/train", o);
      p.test = std::make_shared<data::ImageFolder>(test_dir.string(), o);
    } else {
      const uint64_t seed = config.at("train").at("seed").get<uint64_t>();
      auto all = std::make_shared<data::ImageFolder>(path, o);
      auto [rest, test] = data::split(all, 0.1, seed + 1);
      VT_CHECK(test->size() > 0, "data: {} holds {} images: too few to split off a test set (10%)",
               path, all->size());
      p.train_file = rest;
      p.test = test;
    }
  }
  return p;
}

}  // namespace

Datasets load_datasets(const json& config) {
  Parts p = open_parts(config, true);
  Datasets s;
  s.path = p.path;
  s.test = p.test;
  const double fraction = config.at("data").at("validation_fraction").get<double>();
  if (fraction > 0) {
    const uint64_t seed = config.at("train").at("seed").get<uint64_t>();
    auto [train, validation] = data::split(p.train_file, fraction, seed);
    s.train = train;
    s.validation = validation;
  } else {
    s.train = p.train_file;
  }
  const int64_t subset = config.at("data").value("subset", int64_t{0});
  if (subset > 0 && subset < s.train->size()) {  // the first N training images (a smoke run)
    std::vector<int64_t> first(static_cast<size_t>(subset));
    for (int64_t i = 0; i < subset; ++i) first[static_cast<size_t>(i)] = i;
    s.train = std::make_shared<data::Subset>(s.train, std::move(first));
  }
  return s;
}

std::shared_ptr<const data::Dataset> load_test_set(const json& config) {
  return open_parts(config, false).test;
}

}  // namespace vitrine::train
