// Labels in the pictures, with stb_easy_font: see text.h.
#include "tools/explain/text.h"

#include <algorithm>
#include <cstring>

#include <stb/stb_easy_font.h>  // every function static: one copy per file that includes it

#include "backends/error.h"

namespace vitrine::explain {

namespace {

/// stb_easy_font takes a mutable char*; printable ASCII only.
std::vector<char> printable(const std::string& text) {
  std::vector<char> s;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    s.push_back(u >= 32 && u < 127 ? c : '?');
  }
  s.push_back('\0');
  return s;
}

}  // namespace

int64_t text_width(const std::string& text, int64_t scale) {
  if (text.empty()) return 0;
  std::vector<char> s = printable(text);
  return static_cast<int64_t>(stb_easy_font_width(s.data())) * std::max<int64_t>(scale, 1);
}

void draw_text(Rgb8& image, int64_t x0, int64_t y0, const std::string& text,
               std::array<uint8_t, 3> color, int64_t scale) {
  VT_CHECK(static_cast<int64_t>(image.pixels.size()) == image.height * image.width * 3,
           "draw_text: the image holds {} bytes, not {} x {} x 3", image.pixels.size(),
           image.height, image.width);
  scale = std::max<int64_t>(scale, 1);
  std::vector<char> s = printable(text);
  // 4 vertices of 16 bytes (x, y, z as floats, then RGBA) per rectangle; a glyph has at most a
  // few dozen rectangles.
  std::vector<char> quads(s.size() * 64 * 70);
  const int n =
      stb_easy_font_print(0, 0, s.data(), nullptr, quads.data(), static_cast<int>(quads.size()));
  for (int q = 0; q < n; ++q) {
    float v[4][2];
    for (int k = 0; k < 4; ++k) std::memcpy(v[k], quads.data() + (q * 4 + k) * 16, 8);
    const float lo_x = std::min({v[0][0], v[1][0], v[2][0], v[3][0]});
    const float hi_x = std::max({v[0][0], v[1][0], v[2][0], v[3][0]});
    const float lo_y = std::min({v[0][1], v[1][1], v[2][1], v[3][1]});
    const float hi_y = std::max({v[0][1], v[1][1], v[2][1], v[3][1]});
    const int64_t ax = x0 + static_cast<int64_t>(lo_x) * scale;
    const int64_t bx = x0 + static_cast<int64_t>(hi_x) * scale;
    const int64_t ay = y0 + static_cast<int64_t>(lo_y) * scale;
    const int64_t by = y0 + static_cast<int64_t>(hi_y) * scale;
    for (int64_t y = std::max<int64_t>(ay, 0); y < std::min(by, image.height); ++y)
      for (int64_t x = std::max<int64_t>(ax, 0); x < std::min(bx, image.width); ++x)
        for (int c = 0; c < 3; ++c)
          image.pixels[static_cast<size_t>((y * image.width + x) * 3 + c)] = color[c];
  }
}

std::string fit_text(const std::string& text, int64_t width, int64_t scale) {
  if (text_width(text, scale) <= width) return text;
  for (size_t n = text.size(); n-- > 0;) {
    const std::string s = text.substr(0, n) + "..";
    if (text_width(s, scale) <= width) return s;
  }
  return "";
}

int64_t caption_scale(int64_t width) { return std::clamp<int64_t>(width / 160, 1, 4); }

Rgb8 caption_above(const Rgb8& image, const std::string& text, int64_t scale) {
  VT_CHECK(image.height > 0 && image.width > 0 &&
               static_cast<int64_t>(image.pixels.size()) == image.height * image.width * 3,
           "caption_above: expected a non-empty image of height x width x 3 bytes, got {} x {} "
           "with {} bytes",
           image.height, image.width, image.pixels.size());
  if (scale < 1) scale = caption_scale(image.width);
  const int64_t strip = 12 * scale + 4;
  Rgb8 out{image.height + strip, image.width, {}};
  out.pixels.assign(static_cast<size_t>(out.height * out.width * 3), 255);
  std::copy(image.pixels.begin(), image.pixels.end(),
            out.pixels.begin() + static_cast<std::ptrdiff_t>(strip * image.width * 3));
  const std::string shown = fit_text(text, image.width - 2, scale);
  const int64_t x = (image.width - text_width(shown, scale)) / 2;
  draw_text(out, std::max<int64_t>(x, 1), 2 + scale, shown, {34, 34, 34}, scale);
  return out;
}

Rgb8 labelled_grid(const std::vector<Rgb8>& tiles, const std::vector<std::string>& labels,
                   int64_t columns, int64_t gap) {
  VT_CHECK(labels.size() == tiles.size(), "labelled_grid: {} labels for {} tiles", labels.size(),
           tiles.size());
  VT_CHECK(!tiles.empty(), "labelled_grid: no tiles");
  // One scale for every caption, so that the strips (and the tiles) keep one size.
  const int64_t scale = caption_scale(tiles.front().width);
  std::vector<Rgb8> captioned;
  captioned.reserve(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i)
    captioned.push_back(caption_above(tiles[i], labels[i], scale));
  return tile(captioned, columns, gap);
}

}  // namespace vitrine::explain
