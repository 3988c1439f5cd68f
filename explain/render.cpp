// Colormaps, overlays, enlarging, tiling, captions and PNG encoding (see render.h).
#include "explain/render.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backends/error.h"
#include "common/files.h"
#include "explain/text.h"
#include "nn/data/png_encode.h"
#include "ops/ops.h"

namespace vitrine::explain {

namespace {

#include "explain/colormaps.inc"

constexpr std::pair<Colormap, const char*> kNames[] = {
    {Colormap::Inferno, "inferno"}, {Colormap::Jet, "jet"}, {Colormap::Viridis, "viridis"}};

/// A float tensor's values as a contiguous float32 CPU tensor, after checking its rank.
Tensor float_values(const Tensor& t, int rank, const char* fn, const char* what) {
  VT_CHECK(t.defined(), "{}: the {} is undefined", fn, what);
  VT_CHECK(is_floating_point(t.dtype()), "{}: the {} must be a float tensor, got {}", fn, what,
           dtype_name(t.dtype()));
  VT_CHECK(t.dim() == rank, "{}: the {} must have {} dims, got shape {}", fn, what, rank,
           t.shape());
  return t.detach().to(kCPU).to(kFloat32).contiguous();
}

/// The three channel values of pixel i (of hw) of an image [c, H, W] as 255 * v, v clamped to
/// [0, 1] and NaN as 0, not yet rounded; a grey image gives its value thrice.
std::array<double, 3> channels(const float* image, int64_t c, int64_t hw, int64_t i) {
  std::array<double, 3> out{};
  for (int64_t k = 0; k < 3; ++k) {
    const float v = image[(c == 1 ? 0 : k) * hw + i];
    out[k] = 255 * (std::isnan(v) ? 0.0 : std::clamp(static_cast<double>(v), 0.0, 1.0));
  }
  return out;
}

/// An image [C, H, W]'s values as float_values gives them, after checking that C is 1 or 3.
Tensor image_values(const Tensor& image, const char* fn) {
  Tensor v = float_values(image, 3, fn, "image [C, H, W]");
  VT_CHECK(v.shape()[0] == 1 || v.shape()[0] == 3,
           "{}: the image must have 1 (grey) or 3 (RGB) channels, got shape {}", fn, v.shape());
  return v;
}

/// Checks that an image's pixels are height x width x 3 bytes; fn names the caller.
void check_rgb8(const Rgb8& image, const char* fn) {
  VT_CHECK(image.height >= 0 && image.width >= 0 &&
               static_cast<int64_t>(image.pixels.size()) == image.height * image.width * 3,
           "{}: a {} x {} RGB image needs {} bytes, it has {}", fn, image.height, image.width,
           image.height * image.width * 3, image.pixels.size());
}

Rgb8 blank(int64_t height, int64_t width, uint8_t value = 0) {
  return {height, width, std::vector<uint8_t>(static_cast<size_t>(height * width * 3), value)};
}

}  // namespace

Colormap parse_colormap(const std::string& name) {
  for (const auto& [c, n] : kNames)
    if (name == n) return c;
  fail("unknown colormap '{}' (expected inferno, jet or viridis)", name);
}

std::string colormap_name(Colormap c) {
  for (const auto& [k, n] : kNames)
    if (k == c) return n;
  VT_ASSERT(false);
  return "";
}

std::array<uint8_t, 3> color(Colormap c, double v) {
  if (std::isnan(v)) return {0, 0, 0};
  const auto& lut = c == Colormap::Inferno ? kInferno : c == Colormap::Jet ? kJet : kViridis;
  const double x = std::clamp(v, 0.0, 1.0);
  return lut[std::min<size_t>(static_cast<size_t>(x * 256), 255)];
}

Rgb8 to_rgb8(const Tensor& image) {
  const Tensor v = image_values(image, "to_rgb8");
  const int64_t c = v.shape()[0], h = v.shape()[1], w = v.shape()[2];
  const float* p = v.data<float>();
  Rgb8 out = blank(h, w);
  for (int64_t i = 0; i < h * w; ++i) {
    const std::array<double, 3> rgb = channels(p, c, h * w, i);
    for (int64_t k = 0; k < 3; ++k)
      out.pixels[i * 3 + k] = static_cast<uint8_t>(std::lround(rgb[k]));
  }
  return out;
}

Rgb8 heatmap(const Tensor& map, Colormap c) {
  const Tensor v = float_values(map, 2, "heatmap", "map [H, W]");
  const int64_t h = v.shape()[0], w = v.shape()[1];
  const float* p = v.data<float>();
  Rgb8 out = blank(h, w);
  for (int64_t i = 0; i < h * w; ++i) {
    const std::array<uint8_t, 3> rgb = color(c, p[i]);
    std::copy(rgb.begin(), rgb.end(), out.pixels.begin() + i * 3);
  }
  return out;
}

namespace {

/// Each output pixel from the image's colour under it (0..255 per channel) and the map's value
/// there: pixel(under, value) -> the three channels. `what` names the caller in errors.
template <typename Pixel>
Rgb8 per_pixel(const Tensor& image, const Tensor& map, const char* what, Pixel pixel) {
  const Tensor img = image_values(image, what);
  const Tensor m = float_values(map, 2, what, "map [H, W]");
  const int64_t channels_in = img.shape()[0], h = img.shape()[1], w = img.shape()[2];
  VT_CHECK(m.shape()[0] == h && m.shape()[1] == w,
           "{}: the map {} must have the image's height and width ({} x {})", what, m.shape(), h,
           w);
  const float* pi = img.data<float>();
  const float* pm = m.data<float>();
  Rgb8 out = blank(h, w);
  for (int64_t i = 0; i < h * w; ++i) {
    const std::array<double, 3> v = pixel(channels(pi, channels_in, h * w, i), pm[i]);
    for (int64_t k = 0; k < 3; ++k)
      out.pixels[i * 3 + k] = static_cast<uint8_t>(std::lround(v[static_cast<size_t>(k)]));
  }
  return out;
}

}  // namespace

Rgb8 overlay(const Tensor& image, const Tensor& map, Colormap c, double alpha) {
  VT_CHECK(alpha >= 0 && alpha <= 1, "overlay: alpha must be in [0, 1], got {}", alpha);
  return per_pixel(image, map, "overlay", [&](const std::array<double, 3>& under, float value) {
    const std::array<uint8_t, 3> over = color(c, value);
    std::array<double, 3> out;
    for (size_t k = 0; k < 3; ++k) out[k] = (1 - alpha) * under[k] + alpha * over[k];
    return out;
  });
}

Rgb8 masked(const Tensor& image, const Tensor& map) {
  return per_pixel(image, map, "masked", [](const std::array<double, 3>& under, float value) {
    const double v = std::isnan(value) ? 0.0 : std::clamp(static_cast<double>(value), 0.0, 1.0);
    return std::array<double, 3>{under[0] * v, under[1] * v, under[2] * v};
  });
}

Style parse_style(const std::string& name) {
  if (name == "overlay") return Style::Overlay;
  if (name == "mask") return Style::Mask;
  fail("explain: unknown style '{}' (known: overlay, mask)", name);
}

Rgb8 draw_map(const Tensor& image, const Tensor& map, Style style, Colormap c, double alpha,
              int64_t factor) {
  return enlarge(style == Style::Mask ? masked(image, map) : overlay(image, map, c, alpha), factor);
}

Tensor unnormalised(const Tensor& x, const std::vector<float>& mean,
                    const std::vector<float>& std) {
  const int64_t C = x.size(0);
  const std::vector<double> m(mean.begin(), mean.begin() + C), s(std.begin(), std.begin() + C);
  return ops::clamp(
      x.to(kFloat32) * ops::from_vector(s, {C, 1, 1}) + ops::from_vector(m, {C, 1, 1}), 0.0, 1.0);
}

Rgb8 enlarge(const Rgb8& image, int64_t factor) {
  VT_CHECK(factor >= 1, "enlarge: the factor must be at least 1, got {}", factor);
  check_rgb8(image, "enlarge");
  Rgb8 out = blank(image.height * factor, image.width * factor);
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x) {
      const auto from = image.pixels.begin() + ((y / factor) * image.width + x / factor) * 3;
      std::copy(from, from + 3, out.pixels.begin() + (y * out.width + x) * 3);
    }
  return out;
}

Rgb8 tile(const std::vector<Rgb8>& tiles, int64_t columns, int64_t gap) {
  VT_CHECK(!tiles.empty(), "tile: no tiles were given");
  VT_CHECK(columns >= 1 && gap >= 0, "tile: columns must be >= 1 and gap >= 0, got {} and {}",
           columns, gap);
  const int64_t n = static_cast<int64_t>(tiles.size()), h = tiles[0].height, w = tiles[0].width;
  for (int64_t i = 0; i < n; ++i) {
    check_rgb8(tiles[i], "tile");
    VT_CHECK(tiles[i].height == h && tiles[i].width == w,
             "tile: every tile must be {} x {} (as the first), tile {} is {} x {}", h, w, i,
             tiles[i].height, tiles[i].width);
  }
  const int64_t cols = std::min(columns, n), rows = (n + cols - 1) / cols;
  Rgb8 out = blank(rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 255);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t top = i / cols * (h + gap), left = i % cols * (w + gap);
    for (int64_t y = 0; y < h; ++y) {
      const auto from = tiles[i].pixels.begin() + y * w * 3;
      std::copy(from, from + w * 3, out.pixels.begin() + ((top + y) * out.width + left) * 3);
    }
  }
  return out;
}

Rgb8 caption_above(const Rgb8& image, const std::string& text, int64_t text_px) {
  return caption_with_font(label_font(), image, text, text_px);
}

int64_t caption_px(int64_t width) { return std::clamp<int64_t>(width / 16, 12, 40); }

Rgb8 labelled_grid(const std::vector<Rgb8>& tiles, const std::vector<std::string>& labels,
                   int64_t columns, int64_t gap) {
  VT_CHECK(labels.size() == tiles.size(), "labelled_grid: {} labels for {} tiles (one each)",
           labels.size(), tiles.size());
  VT_CHECK(!tiles.empty(), "labelled_grid: no tiles were given");
  const int64_t text_px = caption_px(tiles.front().width);
  std::vector<Rgb8> captioned;
  captioned.reserve(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) {
    check_rgb8(tiles[i], "labelled_grid");
    captioned.push_back(caption_above(tiles[i], labels[i], text_px));
  }
  return tile(captioned, columns, gap);
}

std::string encode_png(const Rgb8& image) {
  VT_CHECK(image.height > 0 && image.width > 0, "encode_png: the image is empty ({} x {})",
           image.height, image.width);
  check_rgb8(image, "encode_png");
  return vitrine::encode_png(image.pixels.data(), image.width, image.height, 3, "encode_png");
}

void write_png(const std::string& path, const Rgb8& image) {
  std::string png;
  try {
    png = encode_png(image);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  tools::write_file_atomically(path, png);
}

}  // namespace vitrine::explain
