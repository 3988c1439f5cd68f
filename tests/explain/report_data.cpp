// Synthetic report data (see report_data.h).
#include "report_data.h"

#include "explain/render.h"

namespace vt_test {

using namespace vitrine::explain;

namespace {

/// A height x width PNG of one colour (k * 40 % 256, 255 - k, 128).
std::string solid_png(int64_t height, int64_t width, int k) {
  Rgb8 im{height, width, {}};
  const uint8_t rgb[3] = {static_cast<uint8_t>(k * 40 % 256), static_cast<uint8_t>(255 - k), 128};
  for (int64_t i = 0; i < height * width; ++i) im.pixels.insert(im.pixels.end(), rgb, rgb + 3);
  return encode_png(im);
}

}  // namespace

const std::vector<std::string>& sample_methods() {
  static const std::vector<std::string> methods = {"rollout", "chefer", "a<&>b"};
  return methods;
}

ReportData sample_report() {
  ReportData data;
  data.title = "Explanations of run <1>";
  data.checkpoint = "runs/a&b/model.safetensors";
  data.settings = {{"methods", "rollout,chefer"}, {"discard_ratio", "0.9"}};
  int k = 0;
  for (const char* name : {"shoe <&> 1", "bag"}) {
    ReportImage im;
    im.name = name;
    im.original_png = solid_png(8, 8, k++);
    im.predicted = "Sneaker";
    im.probability = 0.9731;
    im.target = "Sneaker";
    for (const std::string& m : sample_methods()) im.maps.emplace_back(m, solid_png(8, 8, k++));
    data.images.push_back(im);
  }
  data.images[0].label = "Ankle boot";
  data.images[0].head_grid_png = solid_png(8, 17, k++);
  data.images[0].notes = {"integrated-gradients completeness gap 0.0012", "x < y"};
  data.images[1].label = "Sneaker";
  data.attention_distance = {{3, 9.5, 12, 20}, {6, 14, 18.3, 22}, {10, 20.5, 24, 27}};
  data.patch = 4;
  return data;
}

}  // namespace vt_test
