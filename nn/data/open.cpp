// Data sets by name: see open.h.
#include "nn/data/open.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/error.h"
#include "nn/data/cifar.h"
#include "nn/data/idx.h"
#include "nn/data/image_folder.h"
#include "nn/json_section.h"

namespace vitrine::nn::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
const char* const kIdxFiles =
    "the folder holding train-images-idx3-ubyte(.gz) and the other three IDX files";
}

const std::vector<DatasetInfo>& datasets() {
  static const std::vector<DatasetInfo> all = {
      {"fashion-mnist", 1, 10, 28, 28, kIdxFiles, true},
      {"mnist", 1, 10, 28, 28, kIdxFiles, false},
      {"cifar10", 3, 10, 32, 32,
       "the folder holding data_batch_1.bin ... test_batch.bin, or its parent", false},
      {"cifar100", 3, 100, 32, 32, "the folder holding train.bin and test.bin, or its parent",
       false},
      {"imagefolder", 0, 0, 0, 0, "a folder with one sub-folder of images per class", false},
      {"fashion-mnist-pasted", 1, 10, 64, 64, kIdxFiles, true},
  };
  return all;
}

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : datasets()) names.push_back(d.name);
  return names;
}

const DatasetInfo& dataset_info(const std::string& name) {
  for (const DatasetInfo& d : datasets())
    if (d.name == name) return d;
  fail("data: unknown data set \"{}\" (known: {})", name, fmt::join(dataset_names(), ", "));
}

std::string dataset_folder(const DatasetOptions& o) {
  if (!o.path.empty()) return o.path;
  const DatasetInfo& d = dataset_info(o.name);
  VT_CHECK(d.has_default_folder,
           "data: data.path is empty, and {} has no default folder; give --data DIR with DIR {}",
           d.name, d.holds);
  return fashion_mnist_dir();
}

std::pair<int64_t, int64_t> image_size(const DatasetOptions& o) {
  const DatasetInfo& d = dataset_info(o.name);
  if (d.name == "fashion-mnist-pasted") return {o.pasted.canvas, o.pasted.canvas};
  return {d.height, d.width};
}

namespace {

/// The files of a data set that is files (every one but imagefolder) into p.
void read_files(const std::string& name, const std::string& path, const DatasetOptions& o,
                bool with_train, DatasetFiles& p) {
  if (name == "fashion-mnist") {
    if (with_train) p.train = fashion_mnist(path, true);
    p.test = fashion_mnist(path, false);
  } else if (name == "fashion-mnist-pasted") {
    PastedOptions po = o.pasted;
    if (with_train) p.train = std::make_shared<PastedObjects>(fashion_mnist(path, true), po);
    po.seed += 1;  // the test canvases draw other places, scales and fragments
    p.test = std::make_shared<PastedObjects>(fashion_mnist(path, false), po);
  } else if (name == "mnist") {
    if (with_train) p.train = mnist(path, true);
    p.test = mnist(path, false);
  } else if (name == "cifar10") {
    if (with_train) p.train = cifar10(path, true);
    p.test = cifar10(path, false);
  } else if (name == "cifar100") {
    if (with_train) p.train = cifar100(path, true);
    p.test = cifar100(path, false);
  }
}

/// Whether a folder holds a sub-folder (an image folder's class folders, say).
bool holds_folders(const std::string& path) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_directory(ec)) return true;
  return false;
}

}  // namespace

DatasetFiles open_dataset(const DatasetOptions& o, bool with_train) {
  const std::string& name = dataset_info(o.name).name;
  const std::string path = dataset_folder(o);
  VT_CHECK(fs::is_directory(path),
           "data: {} folder \"{}\" does not exist (give the data set's folder with --data DIR)",
           name, path);
  DatasetFiles p;
  p.path = path;
  if (name != "imagefolder") {
    // A data set of files (IDX, CIFAR's batches); where they are missing from a folder of class
    // folders, the user most likely meant an image folder: say how to read it as one.
    try {
      read_files(name, path, o, with_train, p);
    } catch (const Error& e) {
      if (!holds_folders(path)) throw;
      fail(
          "{} (\"{}\" holds folders: to read class folders of images, give --set "
          "data.dataset=imagefolder, or start from --config configs/imagefolder.json)",
          e.what(), path);
    }
  } else {  // imagefolder
    VT_CHECK(o.channels == 1 || o.channels == 3,
             "data: an image folder is read as 1 (grey) or 3 (RGB) channels, not {}", o.channels);
    ImageFolderOptions io;
    io.channels = static_cast<int>(o.channels);
    if (fs::exists(fs::path(path) / "wnids.txt")) {
      if (with_train) p.train = tiny_imagenet(path, true, io);
      p.test = tiny_imagenet(path, false, io);
    } else if (fs::is_directory(fs::path(path) / "train")) {
      const fs::path test_dir = fs::is_directory(fs::path(path) / "test") ? fs::path(path) / "test"
                                                                          : fs::path(path) / "val";
      VT_CHECK(fs::is_directory(test_dir),
               "data: {} has a train/ folder but no test/ or val/ folder beside it", path);
      if (with_train) p.train = std::make_shared<ImageFolder>(path + "/train", io);
      p.test = std::make_shared<ImageFolder>(test_dir.string(), io);
    } else {
      auto all = std::make_shared<ImageFolder>(path, io);
      auto [rest, test] = split(all, 0.1, o.split_seed);
      VT_CHECK(test->size() > 0, "data: {} holds {} images: too few to split off a test set (10%)",
               path, all->size());
      p.train = rest;
      p.test = test;
    }
  }
  return p;
}

json pasted_options_to_json(const PastedOptions& o) {
  return {{"canvas", o.canvas},
          {"min_scale", o.min_scale},
          {"max_scale", o.max_scale},
          {"distractors", o.distractors},
          {"count", o.count},
          {"noise", o.noise},
          {"seed", o.seed}};
}

PastedOptions pasted_options_from_json(const json& j) {
  VT_CHECK(j.is_object(),
           "data.pasted must be an object (as {{\"canvas\": 64, \"distractors\": "
           "\"fragments\"}}; {{}} for the defaults), got {}",
           json_a_type(j));
  const JsonSection s(j, "data.pasted");
  s.check_keys({}, {"canvas", "min_scale", "max_scale", "distractors", "count", "noise", "seed"});
  PastedOptions o;
  if (s.has("canvas")) o.canvas = s.integer("canvas", 1);
  if (s.has("min_scale")) o.min_scale = s.number("min_scale", 0, true);
  if (s.has("max_scale")) o.max_scale = s.number("max_scale", 0, true);
  VT_CHECK(o.min_scale <= o.max_scale,
           "data.pasted.min_scale ({}) must not exceed data.pasted.max_scale ({})", o.min_scale,
           o.max_scale);
  if (s.has("distractors")) o.distractors = s.choice("distractors", distractor_names());
  if (s.has("count")) o.count = s.integer("count", 0, kMaxFragments);
  if (s.has("noise")) o.noise = s.number("noise", 0, false, 1, false);
  if (s.has("seed")) o.seed = static_cast<uint64_t>(s.integer("seed", 0));
  const DatasetInfo& items = dataset_info("fashion-mnist");
  const int64_t h = scaled_size(items.height, o.max_scale);
  const int64_t w = scaled_size(items.width, o.max_scale);
  VT_CHECK(o.canvas >= h && o.canvas >= w,
           "data.pasted.canvas {} cannot hold {}'s {}x{} items at data.pasted.max_scale {} "
           "({}x{})",
           o.canvas, items.name, items.height, items.width, o.max_scale, h, w);
  return o;
}

DatasetOptions dataset_options_from_json(const json& data, int64_t channels, uint64_t split_seed) {
  VT_CHECK(data.is_object() && data.contains("dataset") && data["dataset"].is_string(),
           "data: expected a data section with a \"dataset\" name, got {}", data.dump());
  DatasetOptions o;
  o.name = data["dataset"].get<std::string>();
  dataset_info(o.name);  // known
  if (data.contains("path")) {
    VT_CHECK(data["path"].is_string(), "data.path must be a string, got {}", data["path"].dump());
    o.path = data["path"].get<std::string>();
  }
  if (data.contains("pasted")) o.pasted = pasted_options_from_json(data["pasted"]);
  o.channels = channels;
  o.split_seed = split_seed;
  return o;
}

}  // namespace vitrine::nn::data
