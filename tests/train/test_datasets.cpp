// train/datasets: the data sets a config names, for each image-folder layout (train/ and
// test/ sub-folders, val/ instead of test/, one folder split in two), the validation split, and
// the errors for a missing folder or a train/ folder without its test set; fashion-mnist-pasted's
// canvases and seeds when Fashion-MNIST is installed.
#include <fstream>

#include "test_util.h"
#include "train/config.h"
#include "train/datasets.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace fs = std::filesystem;
namespace tr = vitrine::train;

namespace {

/// root/<class>/<i>.png for classes a and b, n grey 4x4 images each.
void write_classes(const std::string& root, int n) {
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(root + "/" + cls);
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> px(16);
      for (int p = 0; p < 16; ++p) px[p] = static_cast<uint8_t>(i * 16 + p);
      write_png(fmt::format("{}/{}/{}.png", root, cls, i), 4, 4, 1, px);
    }
  }
}

json folder_config(const std::string& path, double validation_fraction) {
  json c = tr::default_config();
  c["model"] = {{"image_size", 4}, {"patch", 2}, {"channels", 1}, {"num_classes", 2},
                {"dim", 8},        {"depth", 1}, {"heads", 1},    {"mlp_dim", 8}};
  c["data"]["dataset"] = "imagefolder";
  c["data"]["path"] = path;
  c["data"]["validation_fraction"] = validation_fraction;
  c["data"]["transforms"] = {{"resize", {4, 4}}, {"mean", {0.5}}, {"std", {0.5}}};
  tr::validate_config(c);
  return c;
}

}  // namespace

TEST_CASE("datasets: train/ and test/ (or val/) sub-folders give the training and test sets") {
  TempDir dir;
  write_classes(dir / "train", 10);
  write_classes(dir / "test", 3);
  tr::Datasets s = tr::load_datasets(folder_config(dir.dir.string(), 0.2));
  CHECK(s.train->size() == 16);
  REQUIRE(s.validation);
  CHECK(s.validation->size() == 4);
  CHECK(s.test->size() == 6);
  CHECK(s.test->classes() == std::vector<std::string>{"a", "b"});
  CHECK(s.path == dir.dir.string());
  CHECK(tr::load_test_set(folder_config(dir.dir.string(), 0.2))->size() == 6);

  fs::rename(dir / "test", dir / "val");
  s = tr::load_datasets(folder_config(dir.dir.string(), 0));
  CHECK(s.train->size() == 20);
  CHECK(!s.validation);
  CHECK(s.test->size() == 6);

  fs::remove_all(dir / "val");
  CHECK_ERROR_CONTAINS(tr::load_datasets(folder_config(dir.dir.string(), 0)), dir.dir.string(),
                       "has a train/ folder but no test/ or val/ folder");
}

TEST_CASE("datasets: one folder of class folders is split into train, validation and test") {
  TempDir dir;
  write_classes(dir.dir.string(), 50);  // 100 images
  const json c = folder_config(dir.dir.string(), 0.1);
  tr::Datasets s = tr::load_datasets(c);
  CHECK(s.test->size() == 10);
  CHECK(s.validation->size() == 9);
  CHECK(s.train->size() == 81);
  // The same seed gives the same split: the test set's first image is the same one.
  tr::Datasets again = tr::load_datasets(c);
  CHECK(again.test->get(0).image.pixels == s.test->get(0).image.pixels);
  CHECK(again.test->get(0).label == s.test->get(0).label);
}

TEST_CASE("datasets: a missing folder is an error naming it and how to give another") {
  TempDir dir;
  json c = tr::default_config();
  c["data"]["path"] = dir / "nowhere";
  CHECK_ERROR_CONTAINS(tr::load_datasets(c), "fashion-mnist folder", dir / "nowhere",
                       "does not exist", "--data DIR");
  c["data"]["path"] = dir.dir.string();  // exists, but holds no IDX files
  CHECK_ERROR_CONTAINS(tr::load_datasets(c), "train-images-idx3-ubyte");
}

TEST_CASE(
    "datasets: the real Fashion-MNIST, when installed: 60000 / 10000, or 54000 / 6000 / 10000") {
  if (!fs::exists(nn::data::fashion_mnist_dir())) {
    skip("Fashion-MNIST is not installed");
    return;
  }
  json c = tr::default_config();  // validation_fraction 0: every training image trains
  tr::Datasets all = tr::load_datasets(c);
  CHECK(all.train->size() == 60000);
  CHECK(all.validation == nullptr);
  CHECK(all.test->size() == 10000);
  CHECK(all.test->classes().at(0) == "T-shirt/top");
  tr::apply_override(c, "data.validation_fraction=0.1");
  tr::Datasets s = tr::load_datasets(c);
  CHECK(s.train->size() == 54000);
  REQUIRE(s.validation != nullptr);
  CHECK(s.validation->size() == 6000);
  CHECK(s.test->size() == 10000);
}

TEST_CASE("datasets: fashion-mnist-pasted, when installed: canvases, split, the test set's seed") {
  if (!fs::exists(nn::data::fashion_mnist_dir())) {
    skip("Fashion-MNIST is not installed");
    return;
  }
  json c = tr::load_config(VITRINE_CONFIGS "/fashion_mnist_pasted.json");
  tr::apply_override(c, "data.pasted.seed=4");
  tr::Datasets s = tr::load_datasets(c);
  CHECK(s.train->size() == 54000);
  CHECK(s.validation->size() == 6000);
  CHECK(s.test->size() == 10000);
  CHECK(s.test->classes().at(0) == "T-shirt/top");
  const nn::data::Example e = s.test->get(3);
  CHECK(e.image.height == 64);
  CHECK(e.image.width == 64);
  // The test file's canvases are drawn with data.pasted.seed + 1, the training file's with seed.
  nn::data::PastedOptions o = tr::pasted_options(c);
  o.seed = 5;
  const nn::data::PastedObjects test(nn::data::fashion_mnist(nn::data::fashion_mnist_dir(), false),
                                     o);
  CHECK(e.image.pixels == test.get(3).image.pixels);
  CHECK(e.label == test.get(3).label);
  o.seed = 4;
  const nn::data::PastedObjects train(nn::data::fashion_mnist(nn::data::fashion_mnist_dir(), true),
                                      o);
  const auto* part = dynamic_cast<const nn::data::Subset*>(s.train.get());
  REQUIRE(part != nullptr);
  CHECK(s.train->get(0).image.pixels == train.get(part->indices().at(0)).image.pixels);
  CHECK(tr::load_test_set(c)->get(3).image.pixels == e.image.pixels);
}
