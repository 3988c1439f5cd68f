// CIFAR binary readers (see cifar.h for the format). Each record file is read whole after its size
// has been checked to be a whole number of records.
#include "nn/data/cifar.h"

#include <filesystem>
#include <fstream>

namespace vitrine::nn::data {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kCifar10Classes = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};

const std::vector<std::string> kCifar100Fine = {
    "apple",       "aquarium_fish", "baby",      "bear",       "beaver",       "bed",
    "bee",         "beetle",        "bicycle",   "bottle",     "bowl",         "boy",
    "bridge",      "bus",           "butterfly", "camel",      "can",          "castle",
    "caterpillar", "cattle",        "chair",     "chimpanzee", "clock",        "cloud",
    "cockroach",   "couch",         "crab",      "crocodile",  "cup",          "dinosaur",
    "dolphin",     "elephant",      "flatfish",  "forest",     "fox",          "girl",
    "hamster",     "house",         "kangaroo",  "keyboard",   "lamp",         "lawn_mower",
    "leopard",     "lion",          "lizard",    "lobster",    "man",          "maple_tree",
    "motorcycle",  "mountain",      "mouse",     "mushroom",   "oak_tree",     "orange",
    "orchid",      "otter",         "palm_tree", "pear",       "pickup_truck", "pine_tree",
    "plain",       "plate",         "poppy",     "porcupine",  "possum",       "rabbit",
    "raccoon",     "ray",           "road",      "rocket",     "rose",         "sea",
    "seal",        "shark",         "shrew",     "skunk",      "skyscraper",   "snail",
    "snake",       "spider",        "squirrel",  "streetcar",  "sunflower",    "sweet_pepper",
    "table",       "tank",          "telephone", "television", "tiger",        "tractor",
    "train",       "trout",         "tulip",     "turtle",     "wardrobe",     "whale",
    "willow_tree", "wolf",          "woman",     "worm"};

const std::vector<std::string> kCifar100Coarse = {"aquatic_mammals",
                                                  "fish",
                                                  "flowers",
                                                  "food_containers",
                                                  "fruit_and_vegetables",
                                                  "household_electrical_devices",
                                                  "household_furniture",
                                                  "insects",
                                                  "large_carnivores",
                                                  "large_man-made_outdoor_things",
                                                  "large_natural_outdoor_scenes",
                                                  "large_omnivores_and_herbivores",
                                                  "medium_mammals",
                                                  "non-insect_invertebrates",
                                                  "people",
                                                  "reptiles",
                                                  "small_mammals",
                                                  "trees",
                                                  "vehicles_1",
                                                  "vehicles_2"};

/// Class names from a names file (one a line, trailing blank lines dropped) when it exists, else
/// the standard ones; sets names_from to the file used, for messages.
std::vector<std::string> class_names(const fs::path& file, const std::vector<std::string>& standard,
                                     std::string& names_from) {
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    names_from = "standard";
    return standard;
  }
  std::ifstream in(file);
  VT_CHECK(in.good(), "CIFAR names file '{}' cannot be opened", file.string());
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    names.push_back(line);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  VT_CHECK(!names.empty(), "CIFAR names file '{}' holds no class names", file.string());
  names_from = "from '" + file.string() + "'";
  return names;
}

/// dir itself when it holds marker, else dir/sub when that holds it; an error naming both else.
fs::path find_folder(const std::string& dir, const std::string& sub, const std::string& marker,
                     const char* dataset) {
  std::error_code ec;
  VT_CHECK(fs::is_directory(dir, ec), "{}: folder '{}' does not exist", dataset, dir);
  if (fs::exists(fs::path(dir) / marker, ec)) return dir;
  if (fs::exists(fs::path(dir) / sub / marker, ec)) return fs::path(dir) / sub;
  fail("{}: '{}' is missing: neither '{}' nor '{}' exists", dataset, marker,
       (fs::path(dir) / marker).string(), (fs::path(dir) / sub / marker).string());
}

}  // namespace

CifarDataset::CifarDataset(const std::vector<std::string>& files, CifarFormat format,
                           std::vector<std::string> classes, const std::string& names_from)
    : classes_(std::move(classes)) {
  VT_CHECK(!files.empty(), "CIFAR: no record files given");
  VT_CHECK(!classes_.empty(), "CIFAR: no class names given");
  source_ = fs::path(files[0]).parent_path().string();
  const uint64_t label_bytes = format == CifarFormat::Cifar10 ? 1 : 2;
  const uint64_t record = label_bytes + kPixels;
  const size_t label_at = format == CifarFormat::Cifar100Fine ? 1 : 0;

  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const std::string& path : files) {
    std::error_code ec;
    VT_CHECK(fs::is_regular_file(path, ec), "CIFAR file '{}' is missing", path);
    const uint64_t size = fs::file_size(path, ec);
    VT_CHECK(!ec, "CIFAR file '{}': cannot read its size ({})", path, ec.message());
    VT_CHECK(size > 0, "CIFAR file '{}' is empty", path);
    VT_CHECK(size % record == 0,
             "CIFAR file '{}' is truncated: {} bytes is not a whole number of {}-byte records "
             "({} label byte{} + {} pixel bytes); the last record has {} bytes",
             path, size, record, label_bytes, label_bytes == 1 ? "" : "s", kPixels, size % record);
    sizes.push_back(size);
    total += size / record;
  }
  pixels_.reserve(total * kPixels);
  labels_.reserve(total);

  std::vector<uint8_t> buffer;
  const int64_t nclasses = static_cast<int64_t>(classes_.size());
  for (size_t f = 0; f < files.size(); ++f) {
    buffer.resize(sizes[f]);
    std::ifstream in(files[f], std::ios::binary);
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(sizes[f]));
    VT_CHECK(static_cast<uint64_t>(in.gcount()) == sizes[f], "CIFAR file '{}': read {} bytes of {}",
             files[f], in.gcount(), sizes[f]);
    for (uint64_t r = 0; r < sizes[f] / record; ++r) {
      const uint8_t* rec = buffer.data() + r * record;
      const int64_t label = rec[label_at];
      VT_CHECK(label < nclasses,
               "CIFAR file '{}': record {} has label {}; expected 0 to {} ({} classes, names {})",
               files[f], r, label, nclasses - 1, nclasses, names_from);
      labels_.push_back(label);
      pixels_.insert(pixels_.end(), rec + label_bytes, rec + record);
    }
  }
}

Example CifarDataset::get(int64_t index) const {
  VT_CHECK(index >= 0 && index < size(), "CIFAR dataset '{}': index {} is out of range (size {})",
           source_, index, size());
  Example ex;
  ex.label = labels_[static_cast<size_t>(index)];
  ex.image.channels = 3;
  ex.image.height = ex.image.width = kSide;
  ex.image.pixels.resize(kPixels);
  const uint8_t* src = pixels_.data() + static_cast<size_t>(index) * kPixels;
  for (int64_t i = 0; i < kPixels; ++i) ex.image.pixels[static_cast<size_t>(i)] = src[i] / 255.0f;
  return ex;
}

std::shared_ptr<CifarDataset> cifar10(const std::string& dir, bool train) {
  const std::string marker = train ? "data_batch_1.bin" : "test_batch.bin";
  const fs::path folder = find_folder(dir, "cifar-10-batches-bin", marker, "cifar10");
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i)
      files.push_back((folder / ("data_batch_" + std::to_string(i) + ".bin")).string());
  } else {
    files.push_back((folder / "test_batch.bin").string());
  }
  std::string names_from;
  auto classes = class_names(folder / "batches.meta.txt", kCifar10Classes, names_from);
  return std::make_shared<CifarDataset>(files, CifarFormat::Cifar10, std::move(classes),
                                        names_from);
}

std::shared_ptr<CifarDataset> cifar100(const std::string& dir, bool train, bool coarse) {
  const std::string name = train ? "train.bin" : "test.bin";
  const fs::path folder = find_folder(dir, "cifar-100-binary", name, "cifar100");
  std::string names_from;
  auto classes = coarse
                     ? class_names(folder / "coarse_label_names.txt", kCifar100Coarse, names_from)
                     : class_names(folder / "fine_label_names.txt", kCifar100Fine, names_from);
  return std::make_shared<CifarDataset>(
      std::vector<std::string>{(folder / name).string()},
      coarse ? CifarFormat::Cifar100Coarse : CifarFormat::Cifar100Fine, std::move(classes),
      names_from);
}

}  // namespace vitrine::nn::data
