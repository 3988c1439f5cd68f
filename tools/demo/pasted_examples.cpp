// vitrine-pasted-examples: a look at the localisation benchmark's data (nn::data::PastedObjects on
// Fashion-MNIST). Writes a PNG grid of test canvases, one row per distractor kind (fragments,
// noise, none), each canvas scaled 3x with its box in red and its tight box in green; then prints
// the pixel mean and std of the training canvases (default options), which
// configs/fashion_mnist_pasted.json normalises with.
//   vitrine-pasted-examples docs/images/pasted_examples.png [FASHION_MNIST_DIR]
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

#include "nn/data/idx.h"
#include "nn/data/pasted.h"

namespace data = vitrine::nn::data;

namespace {

constexpr int kZoom = 3, kGap = 4, kColumns = 8;

/// Draws one canvas (grey, zoomed) at (x0, y0) of an RGB image of width w, then its boxes.
void draw(std::vector<uint8_t>& rgb, int w, int x0, int y0, const data::Image& im,
          const data::Box& box, const data::Box& tight) {
  auto put = [&](int64_t y, int64_t x, uint8_t r, uint8_t g, uint8_t b) {
    uint8_t* p = &rgb[static_cast<size_t>(((y0 + y) * w + x0 + x) * 3)];
    p[0] = r, p[1] = g, p[2] = b;
  };
  const int64_t side = im.height * kZoom;
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x) {
      const auto v = static_cast<uint8_t>(std::lround(255.0f * im.at(0, y / kZoom, x / kZoom)));
      put(y, x, v, v, v);
    }
  auto outline = [&](const data::Box& b, uint8_t r, uint8_t g) {
    if (b.empty()) return;
    const int64_t t = b.top * kZoom, l = b.left * kZoom;
    const int64_t bottom = (b.top + b.height) * kZoom - 1, right = (b.left + b.width) * kZoom - 1;
    for (int64_t x = l; x <= right; ++x) put(t, x, r, g, 0), put(bottom, x, r, g, 0);
    for (int64_t y = t; y <= bottom; ++y) put(y, l, r, g, 0), put(y, right, r, g, 0);
  };
  outline(tight, 0, 200);
  outline(box, 230, 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s OUT.png [FASHION_MNIST_DIR]\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argc == 3 ? argv[2] : data::fashion_mnist_dir();
    auto test = data::fashion_mnist(dir, false);
    const std::vector<std::string> kinds = {"fragments", "noise", "none"};
    const int cell = 64 * kZoom;
    const int w = kColumns * cell + (kColumns + 1) * kGap;
    const int h =
        static_cast<int>(kinds.size()) * cell + (static_cast<int>(kinds.size()) + 1) * kGap;
    std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3), 255);
    for (size_t row = 0; row < kinds.size(); ++row) {
      data::PastedOptions o;
      o.distractors = kinds[row];
      o.seed = 1;  // the test canvases of vitrine-train (data.pasted.seed + 1)
      const data::PastedObjects ds(test, o);
      for (int col = 0; col < kColumns; ++col)
        draw(rgb, w, kGap + col * (cell + kGap), kGap + static_cast<int>(row) * (cell + kGap),
             ds.get(col).image, ds.box(col), ds.tight_box(col));
    }
    if (!stbi_write_png(argv[1], w, h, 3, rgb.data(), w * 3)) {
      std::fprintf(stderr, "error: cannot write %s\n", argv[1]);
      return 1;
    }
    fmt::print("wrote {} ({}x{}): rows fragments, noise, none; red: box, green: tight box\n",
               argv[1], w, h);

    const data::PastedObjects train(data::fashion_mnist(dir, true), {});
    double sum = 0, sum2 = 0;
    int64_t n = 0;
    for (int64_t i = 0; i < train.size(); ++i)
      for (float v : train.get(i).image.pixels) sum += v, sum2 += double(v) * v, ++n;
    const double mean = sum / static_cast<double>(n);
    fmt::print("{}: pixel mean {:.4f}, std {:.4f} over {} canvases\n", train.source(), mean,
               std::sqrt(sum2 / static_cast<double>(n) - mean * mean), train.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
