// nn/data's resize and the "resize" transform against torchvision's Resize
// (tests/fixtures/resize_parity.json, made by make_resize_fixtures.py with torchvision 0.14):
// on the float tensor (to float rounding) and on a PIL image (8-bit, what an ImageFolder pipeline
// computes: within 1/255 for bilinear; bicubic within 2/255, PIL rounding and clipping between
// its two passes), for the shorter side, an exact size and a factor, up and down, with and without
// antialias; then the transform's config forms and their errors.
#include <algorithm>
#include <cmath>

#include "nn/data/transforms.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace data = vitrine::nn::data;
using nlohmann::json;

namespace {

data::Image fixture_image(const json& j, float scale) {
  data::Image im;
  im.channels = j.at("shape")[0].get<int64_t>();
  im.height = j.at("shape")[1].get<int64_t>();
  im.width = j.at("shape")[2].get<int64_t>();
  for (const json& v : j.at("values")) im.pixels.push_back(v.get<float>() * scale);
  return im;
}

/// The largest |a - b| over the pixels, a clipped to [0, 1] first when clip.
double max_difference(const data::Image& a, const data::Image& b, bool clip) {
  REQUIRE(a.channels == b.channels);
  REQUIRE(a.height == b.height);
  REQUIRE(a.width == b.width);
  double worst = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const double x = clip ? std::clamp(a.pixels[i], 0.0f, 1.0f) : a.pixels[i];
    worst = std::max(worst, std::abs(x - static_cast<double>(b.pixels[i])));
  }
  return worst;
}

}  // namespace

TEST_CASE("resize parity: the resize transform matches torchvision's Resize, tensor and PIL") {
  const json& cases = fixture_json("resize_parity.json").at("cases");
  REQUIRE(cases.size() == 11);
  for (const auto& item : cases.items()) {
    const std::string name = item.key();
    const json& c = item.value();
    INFO("case " << name << ", resize " << c.at("resize").dump());
    const data::Image input = fixture_image(c.at("input"), 1.0f / 255);
    const data::Compose pipeline =
        data::from_config(json{{"resize", c.at("resize")}}, input.channels, false);
    const data::Image out = pipeline(input);
    const data::Image tensor = fixture_image(c.at("tensor"), 1);
    CHECK(max_difference(out, tensor, false) < 1e-5);
    if (c.contains("pil")) {
      const bool bicubic = c.at("resize").is_object() &&
                           c.at("resize").value("interpolation", "bilinear") == "bicubic";
      CHECK(max_difference(out, fixture_image(c.at("pil"), 1.0f / 255), true) <=
            (bicubic ? 2.0 : 1.0) / 255 + 1e-6);
    }
  }
}

TEST_CASE("resize parity: antialiasing keeps what plain bilinear loses") {
  // A one-pixel line (column 7) in a 16x16 image, downsampled by 4: plain bilinear reads columns
  // 1-2, 5-6, 9-10 and 13-14 and loses it; antialiased, every input pixel counts, and each row of
  // the output keeps the line's share, 1/4 (its weight in the tent over 4 pixels per output).
  data::Image line;
  line.channels = 1, line.height = 16, line.width = 16;
  for (int64_t y = 0; y < 16; ++y)
    for (int64_t x = 0; x < 16; ++x) line.pixels.push_back(x == 7 ? 1.0f : 0.0f);
  const data::Image aliased = data::resize(line, 4, 4, data::Interpolation::Bilinear, false);
  for (float p : aliased.pixels) CHECK(p == 0.0f);
  const data::Image smooth = data::resize(line, 4, 4);
  for (int64_t y = 0; y < 4; ++y) {
    double row = 0;
    for (int64_t x = 0; x < 4; ++x) row += smooth.at(0, y, x);
    CHECK(row == doctest::Approx(0.25).epsilon(1e-5));
  }
  // Output 1 (centre 6, 4 input pixels per output): the tent's weight of column 7,
  // (1 - 1.5 / 4) / 4, as its eight taps sum to 4 before normalising.
  CHECK(smooth.at(0, 0, 1) == doctest::Approx((1 - 1.5 / 4) / 4).epsilon(1e-5));
}

TEST_CASE("resize parity: torchvision's shorter-side rule and the config forms") {
  // Resize(16) on 37x53: (16, int(16 * 53 / 37)) = (16, 22); on 61x29: (int(24 * 61 / 29), 24).
  CHECK((data::shorter_side_size(37, 53, 16) == std::pair<int64_t, int64_t>{16, 22}));
  CHECK((data::shorter_side_size(61, 29, 24) == std::pair<int64_t, int64_t>{50, 24}));
  CHECK((data::shorter_side_size(20, 20, 7) == std::pair<int64_t, int64_t>{7, 7}));
  const auto describe = [](const char* text) {
    return data::from_config(json::parse(text), 3, false).describe();
  };
  CHECK(describe(R"({"resize": 32})") == "resize(shorter side 32)");
  CHECK(describe(R"({"resize": [32, 40]})") == "resize(32, 40)");
  CHECK(describe(R"({"resize": {"factor": 0.5}})") == "resize(factor 0.5)");
  CHECK(describe(R"({"resize": {"size": 8, "interpolation": "bicubic"}})") ==
        "resize(shorter side 8, bicubic)");
  CHECK(describe(R"({"resize": {"size": [8, 9], "antialias": false}})") ==
        "resize(8, 9, no antialias)");
  // Output shapes follow the input's aspect for a shorter side and a factor.
  const data::Compose shorter = data::from_config(json::parse(R"({"resize": 32})"), 3, false);
  CHECK((shorter.output_shape({3, 100, 50}) == data::ImageShape{3, 64, 32}));
  const data::Compose half =
      data::from_config(json::parse(R"({"resize": {"factor": 0.5}})"), 3, false);
  CHECK((half.output_shape({3, 45, 38}) == data::ImageShape{3, 23, 19}));
  // The evaluation pipeline of a photo recipe: shorter side, then a centre crop.
  const data::Compose eval =
      data::from_config(json::parse(R"({"resize": 36, "center_crop": 32})"), 3, false);
  CHECK((eval.output_shape({3, 480, 640}) == data::ImageShape{3, 32, 32}));
}

TEST_CASE("resize parity: null removes a transform, and bad resize values are named") {
  const json j = json::parse(R"({"resize": null, "random_crop": null, "hflip": 0.5})");
  CHECK(data::from_config(j, 1, true).describe() == "hflip(p 0.5)");
  const auto build = [](const char* text) { return data::from_config(json::parse(text), 3, true); };
  CHECK_ERROR_CONTAINS(build(R"({"resize": {"size": 8, "mode": "bilinear"}})"),
                       "unknown key \"resize.mode\"", "interpolation");
  CHECK_ERROR_CONTAINS(build(R"({"resize": {"size": 8, "interpolation": "lanczos"}})"),
                       "\"resize.interpolation\"", "\"lanczos\"");
  CHECK_ERROR_CONTAINS(build(R"({"resize": {"size": 8, "factor": 2}})"),
                       "exactly one of \"size\" and \"factor\"");
  CHECK_ERROR_CONTAINS(build(R"({"resize": {"factor": 0}})"), "\"resize.factor\"", "(0, 16]");
  CHECK_ERROR_CONTAINS(build(R"({"resize": {"size": 8, "antialias": 1}})"),
                       "\"resize.antialias\" must be true or false");
  CHECK_ERROR_CONTAINS(build(R"({"resize": 0})"), "\"resize\"", "positive");
}
