// vitrine-train's TensorBoard content: metrics lines as scalars, the confusion matrix as a PNG
// (see tensorboard.h).
#include "train/tensorboard.h"

#include <algorithm>
#include <cmath>

#include "backends/error.h"
#include "nn/data/png_encode.h"

namespace vitrine::train {

using nlohmann::json;

std::string tensorboard_group(const std::string& type) { return type == "eval" ? "val" : type; }

std::vector<Scalar> metrics_scalars(const json& line) {
  VT_CHECK(line.is_object() && line.contains("type") && line.at("type").is_string(),
           "tensorboard: a metrics line needs a \"type\", got {}", line.dump());
  const std::string group = tensorboard_group(line.at("type").get<std::string>());
  std::vector<Scalar> out;
  for (const auto& [key, value] : line.items()) {
    if (!value.is_number() || key == "epoch" || key == "step" || key == "global_step") continue;
    const double x = value.get<double>();
    if (std::isfinite(x)) out.emplace_back(group + "/" + key, x);
  }
  return out;
}

EncodedImage confusion_matrix_png(const std::vector<std::vector<int64_t>>& confusion) {
  const auto classes = static_cast<int64_t>(confusion.size());
  VT_CHECK(classes > 0 && classes <= kConfusionImageClasses,
           "tensorboard: a confusion matrix image has 1 to {} classes, got {}",
           kConfusionImageClasses, classes);
  for (const auto& row : confusion)
    VT_CHECK(static_cast<int64_t>(row.size()) == classes,
             "tensorboard: the confusion matrix must be square, got a row of {} in {} rows",
             row.size(), classes);
  const int64_t cell = std::clamp<int64_t>(256 / classes, 1, 32);
  const int64_t grid = cell >= 4 ? 1 : 0;
  const int64_t side = classes * cell + (classes + 1) * grid;
  // Grey grid lines everywhere first; the squares are painted over them.
  std::vector<uint8_t> rgb(static_cast<size_t>(side * side * 3), 200);
  for (int64_t t = 0; t < classes; ++t) {
    const auto& row = confusion[static_cast<size_t>(t)];
    int64_t total = 0;
    for (const int64_t n : row) total += n;
    for (int64_t p = 0; p < classes; ++p) {
      const double f =
          total > 0 ? static_cast<double>(row[static_cast<size_t>(p)]) / static_cast<double>(total)
                    : 0.0;
      // White to dark blue (matplotlib's "Blues" ends: #ffffff, #08306b).
      const uint8_t colour[3] = {static_cast<uint8_t>(std::lround(255 + f * (8 - 255))),
                                 static_cast<uint8_t>(std::lround(255 + f * (48 - 255))),
                                 static_cast<uint8_t>(std::lround(255 + f * (107 - 255)))};
      const int64_t y0 = grid + t * (cell + grid), x0 = grid + p * (cell + grid);
      for (int64_t y = y0; y < y0 + cell; ++y)
        for (int64_t x = x0; x < x0 + cell; ++x)
          std::copy(colour, colour + 3, rgb.begin() + (y * side + x) * 3);
    }
  }
  EncodedImage out;
  out.height = out.width = side;
  out.png = encode_png(rgb.data(), side, side, 3, "tensorboard: the confusion matrix");
  return out;
}

}  // namespace vitrine::train
