// make_grid and save_image (nn/data/image_grid.h) against torchvision 0.14
// (tests/fixtures/make_grid.json, made by make_make_grid_fixtures.py): every case's grid to 1e-6,
// the same grid from float64, int64, strided and CUDA inputs, save_image's PNG decoded back equal
// to torchvision's uint8 pixels byte for byte; bad inputs and paths, their messages, and no file
// left behind by a failed save.
#include <cmath>
#include <fstream>
#include <iterator>

#include "nn/data/image_decode.h"
#include "nn/data/image_grid.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;

namespace {

const char* kFile = "make_grid.json";

/// make_grid or save_image's keyword arguments, from a case's "options" (torchvision's defaults
/// where absent).
struct GridOptions {
  int64_t nrow = 8, padding = 2;
  bool normalize = false, scale_each = false;
  std::optional<std::pair<double, double>> value_range;
  double pad_value = 0.0;
};

GridOptions options_of(const json& o) {
  GridOptions g;
  g.nrow = o.value("nrow", g.nrow);
  g.padding = o.value("padding", g.padding);
  g.normalize = o.value("normalize", false);
  g.scale_each = o.value("scale_each", false);
  g.pad_value = o.value("pad_value", 0.0);
  if (o.contains("value_range"))
    g.value_range =
        std::make_pair(o["value_range"][0].get<double>(), o["value_range"][1].get<double>());
  return g;
}

Tensor grid_of(const Tensor& x, const GridOptions& g) {
  return make_grid(x, g.nrow, g.padding, g.normalize, g.value_range, g.scale_each, g.pad_value);
}

void check_grid(const Tensor& grid, const json& expected) {
  REQUIRE(grid.dtype() == kFloat32);
  REQUIRE(grid.device() == kCPU);
  REQUIRE(grid.shape() == Dims(expected["shape"].get<std::vector<int64_t>>()));
  check_close(grid, expected["values"].get<std::vector<double>>(), 1e-6, 0.0);
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& item : fixture_json(kFile)["cases"].items()) names.push_back(item.key());
  return names;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// A batch [2, 3, 4, 4] in [0, 1].
Tensor small_batch() { return ops::rand({2, 3, 4, 4}); }

}  // namespace

TEST_CASE("make_grid: torchvision's grids, float32 to 1e-6") {
  const std::vector<std::string> names = case_names();
  REQUIRE(names.size() == 21);
  for (const std::string& name : names) {
    CAPTURE(name);
    const json& c = fixture_case(kFile, name);
    const Tensor x = fixture_tensor(c["input"], kFloat32);
    check_grid(grid_of(x, options_of(c["options"])), c["grid"]);
  }
}

TEST_CASE("make_grid: float64, int64 and strided inputs give the float32 grid") {
  for (const std::string name : {"batch5_nrow3", "gray_batch", "normalize", "scale_each_range"}) {
    CAPTURE(name);
    const json& c = fixture_case(kFile, name);
    const GridOptions g = options_of(c["options"]);
    // The inputs are float32 values, so float64 holds them exactly: the same bits come out.
    const Tensor x32 = fixture_tensor(c["input"], kFloat32);
    const Tensor want = grid_of(x32, g);
    const Tensor from64 = grid_of(fixture_tensor(c["input"], kFloat64), g);
    CHECK(from64.dtype() == kFloat32);
    CHECK(from64.to_vector<float>() == want.to_vector<float>());
    // A transposed view (not contiguous) of the same values.
    const Tensor strided = x32.transpose(-1, -2).contiguous().transpose(-1, -2);
    REQUIRE_FALSE(strided.is_contiguous());
    CHECK(grid_of(strided, g).to_vector<float>() == want.to_vector<float>());
  }
  // Integers are read as their values (torchvision keeps uint8; the numbers are the same).
  const Tensor ints =
      ops::from_vector(std::vector<int64_t>{0, 255, 7, 100, 3, 9, 12, 40}, {2, 1, 2, 2});
  const Tensor grid = make_grid(ints, 8, 1, false, std::nullopt, false, 9.0);
  REQUIRE(grid.shape() == Dims({3, 4, 7}));
  check_close(grid.select(0, 0), {9, 9, 9,   9, 9,  9,  9, 9, 0, 255, 9, 3, 9, 9,
                                  9, 7, 100, 9, 12, 40, 9, 9, 9, 9,   9, 9, 9, 9},
              0, 0);
  // A tensor requiring grad: the grid is plain data, outside any graph.
  Tensor leaf = ops::rand({2, 3, 2, 2}).requires_grad_();
  const Tensor g = make_grid(leaf * 2.0);
  CHECK_FALSE(g.requires_grad());
  CHECK(g.grad_fn() == nullptr);
}

TEST_CASE("make_grid: a CUDA tensor in gives the CPU's grid") {
  if (!gpu_or_skip()) return;
  const Device cuda = Device::parse("cuda");
  for (const std::string name : {"padding3_pad_value", "gray_batch", "scale_each"}) {
    CAPTURE(name);
    const json& c = fixture_case(kFile, name);
    const Tensor x = fixture_tensor(c["input"], kFloat32).to(cuda);
    check_grid(grid_of(x, options_of(c["options"])), c["grid"]);
  }
}

TEST_CASE("save_image: the PNG holds torchvision's uint8 pixels exactly") {
  TempDir dir;
  int saved = 0;
  for (const std::string& name : case_names()) {
    const json& c = fixture_case(kFile, name);
    if (!c.contains("bytes")) continue;
    CAPTURE(name);
    const GridOptions g = options_of(c["options"]);
    const std::string path = dir / (name + ".png");
    save_image(fixture_tensor(c["input"], kFloat32), path, g.nrow, g.padding, g.normalize,
               g.value_range, g.scale_each, g.pad_value);
    const nn::data::DecodedImage png = nn::data::decode_image(read_bytes(path), path);
    const std::vector<int64_t> shape = c["bytes"]["shape"].get<std::vector<int64_t>>();
    CHECK(std::string(png.format) == "PNG");
    CHECK(png.height == shape[0]);
    CHECK(png.width == shape[1]);
    CHECK(png.channels == shape[2]);
    CHECK(png.pixels == c["bytes"]["values"].get<std::vector<uint8_t>>());
    ++saved;
  }
  CHECK(saved == 4);
  // Only the PNG files: no temporary file is left beside them.
  CHECK(dir.files() == std::vector<std::string>{"save_four_channels.png", "save_gray_normalize.png",
                                                "save_rgb.png", "save_two_channels.png"});
  // A second save replaces the file; the name's case does not matter (.PNG).
  const std::string path = dir / "save_rgb.png";
  save_image(ops::full({1, 4, 3}, 0.5), path);
  const nn::data::DecodedImage grey = nn::data::decode_image(read_bytes(path), path);
  CHECK(grey.height == 4);
  CHECK(grey.width == 3);
  CHECK(grey.pixels == std::vector<uint8_t>(4 * 3 * 3, 128));
  save_image(ops::full({3, 2, 2}, 2.0), dir / "upper.PNG");
  CHECK(nn::data::decode_image(read_bytes(dir / "upper.PNG"), "upper.PNG").pixels ==
        std::vector<uint8_t>(2 * 2 * 3, 255));
}

TEST_CASE("make_grid: errors name make_grid, what was given and what was expected") {
  CHECK_ERROR_CONTAINS(make_grid(Tensor()), "make_grid", "undefined");
  CHECK_ERROR_CONTAINS(make_grid(ops::zeros({2, 2, 3, 4, 4})), "make_grid", "[2, 2, 3, 4, 4]",
                       "[B, C, H, W], [C, H, W] or [H, W]");
  CHECK_ERROR_CONTAINS(make_grid(ops::zeros({5})), "make_grid", "1 dims");
  CHECK_ERROR_CONTAINS(make_grid(ops::zeros({0, 3, 4, 4})), "make_grid", "[0, 3, 4, 4]",
                       "no values");
  CHECK_ERROR_CONTAINS(make_grid(ops::zeros({2, 3, 0, 4})), "make_grid", "no values");
  CHECK_ERROR_CONTAINS(make_grid(small_batch(), 0), "make_grid", "nrow", "at least 1", "got 0");
  CHECK_ERROR_CONTAINS(make_grid(small_batch(), 2, -1), "make_grid", "padding", "got -1");
  CHECK_ERROR_CONTAINS(make_grid(small_batch(), 8, 2, true, std::make_pair(1.0, 1.0)), "make_grid",
                       "value_range (1, 1)", "min < max");
  CHECK_ERROR_CONTAINS(make_grid(small_batch(), 8, 2, true, std::make_pair(2.0, -1.0)), "make_grid",
                       "value_range (2, -1)");
  CHECK_ERROR_CONTAINS(make_grid(small_batch(), 8, 2, true, std::make_pair(0.0, NAN)), "make_grid",
                       "finite");
  CHECK_ERROR_CONTAINS(make_grid(small_batch(), int64_t{1} << 62, int64_t{1} << 62), "make_grid",
                       "out of range");
}

TEST_CASE("save_image: errors name save_image and the file, and leave no file") {
  TempDir dir;
  const std::string path = dir / "grid.png";
  CHECK_ERROR_CONTAINS(save_image(ops::rand({2, 5, 3, 3}), path), "save_image", path, "5 channels",
                       "cannot be written as PNG", "4 as RGBA");
  CHECK_ERROR_CONTAINS(save_image(ops::rand({5, 3, 3}), path), "save_image", "5 channels");
  CHECK_ERROR_CONTAINS(save_image(small_batch(), dir / "grid.jpg"), "save_image", "grid.jpg",
                       "only PNG", "\".jpg\"");
  CHECK_ERROR_CONTAINS(save_image(small_batch(), dir / "grid"), "save_image", "only PNG");
  const std::string nowhere = dir / "missing/grid.png";
  CHECK_ERROR_CONTAINS(save_image(small_batch(), nowhere), "save_image", nowhere, "does not exist");
  // make_grid's checks, named for save_image.
  CHECK_ERROR_CONTAINS(save_image(ops::zeros({0, 3, 2, 2}), path), "save_image", "no values");
  CHECK_ERROR_CONTAINS(save_image(small_batch(), path, 0), "save_image", "nrow");
  CHECK_ERROR_CONTAINS(save_image(ops::zeros({1, 1, 1, 2, 2}), path), "save_image", "5 dims");
  // A folder in the file's place: the rename fails, the temporary file is removed.
  std::filesystem::create_directory(path);
  CHECK_ERROR_CONTAINS(save_image(small_batch(), path), "save_image", "cannot write", path);
  std::filesystem::remove(path);
  CHECK(dir.files().empty());
}
