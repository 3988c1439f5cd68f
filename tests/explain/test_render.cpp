// explain/render: colours recorded from matplotlib 3.6.3 (cmap(v, bytes=True)), the
// overlay arithmetic worked out by hand on a 2 x 2 case, enlarging, the tile layout, PNG bytes
// that decode back to the same pixels; captions (text.h): where the text goes, shortening, and
// no text but the same layout without a usable font (missing, garbage, cut short).
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "decode.h"
#include "explain/render.h"
#include "explain/text.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using namespace vitrine::explain;

namespace {

using Rgb = std::array<uint8_t, 3>;

Rgb pixel(const Rgb8& im, int64_t y, int64_t x) {
  const auto at = im.pixels.begin() + (y * im.width + x) * 3;
  return {at[0], at[1], at[2]};
}

/// A height x width image whose pixel (y, x) is (y, x, 7).
Rgb8 ramp(int64_t height, int64_t width) {
  Rgb8 im{height, width, {}};
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t v : {y, x, int64_t{7}}) im.pixels.push_back(static_cast<uint8_t>(v));
  return im;
}

/// The dark pixels (every channel below 128) of rows [y0, y1) as (y, x).
std::vector<std::pair<int64_t, int64_t>> dark(const Rgb8& im, int64_t y0, int64_t y1) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = 0; x < im.width; ++x) {
      const Rgb p = pixel(im, y, x);
      if (p[0] < 128 && p[1] < 128 && p[2] < 128) out.emplace_back(y, x);
    }
  return out;
}

/// Whether every pixel of rows [y0, y1) is white.
bool all_white(const Rgb8& im, int64_t y0, int64_t y1) {
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = 0; x < im.width; ++x)
      if (pixel(im, y, x) != Rgb{255, 255, 255}) return false;
  return true;
}

/// The label font, or nullptr after marking the case skipped (fonts-dejavu-core is installed by
/// scripts/install-deps.sh).
const Font* font_or_skip() {
  const Font* f = label_font();
  if (f == nullptr)
    skip("no label font at " + label_font_path() +
         " (install fonts-dejavu-core or set VITRINE_FONT)");
  return f;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("render: colormap names") {
  for (Colormap c : {Colormap::Inferno, Colormap::Jet, Colormap::Viridis})
    CHECK(parse_colormap(colormap_name(c)) == c);
  CHECK(colormap_name(Colormap::Jet) == "jet");
  CHECK_ERROR_CONTAINS(parse_colormap("magma"), "'magma'", "inferno, jet or viridis");
}

TEST_CASE("render: colours are matplotlib's, entry floor(v * 256) clamped") {
  struct Case {
    Colormap map;
    double v;
    Rgb rgb;
  };
  // matplotlib.colormaps[name](v, bytes=True)[:3] in matplotlib 3.6.3.
  const Case cases[] = {
      {Colormap::Inferno, 0.0, {0, 0, 3}},      {Colormap::Inferno, 1 / 256.0, {0, 0, 4}},
      {Colormap::Inferno, 0.25, {87, 15, 109}}, {Colormap::Inferno, 0.5, {187, 55, 84}},
      {Colormap::Inferno, 0.7, {243, 119, 25}}, {Colormap::Inferno, 1.0, {252, 254, 164}},
      {Colormap::Jet, 0.0, {0, 0, 127}},        {Colormap::Jet, 1 / 256.0, {0, 0, 132}},
      {Colormap::Jet, 0.25, {0, 128, 255}},     {Colormap::Jet, 0.5, {124, 255, 121}},
      {Colormap::Jet, 0.7, {255, 196, 0}},      {Colormap::Jet, 1.0, {127, 0, 0}},
      {Colormap::Viridis, 0.0, {68, 1, 84}},    {Colormap::Viridis, 1 / 256.0, {68, 2, 85}},
      {Colormap::Viridis, 0.25, {58, 82, 139}}, {Colormap::Viridis, 0.5, {32, 144, 140}},
      {Colormap::Viridis, 0.7, {68, 190, 112}}, {Colormap::Viridis, 1.0, {253, 231, 36}},
  };
  for (const Case& c : cases) {
    INFO(colormap_name(c.map) << " at " << c.v);
    CHECK(color(c.map, c.v) == c.rgb);
  }
  // Just below 1/256 is still entry 0; out of range is clamped; NaN is black.
  CHECK(color(Colormap::Inferno, 1 / 256.0 - 1e-9) == Rgb{0, 0, 3});
  CHECK(color(Colormap::Jet, -0.5) == Rgb{0, 0, 127});
  CHECK(color(Colormap::Jet, 1.5) == Rgb{127, 0, 0});
  CHECK(color(Colormap::Viridis, NAN) == Rgb{0, 0, 0});
}

TEST_CASE("render: to_rgb8 rounds to the nearest byte, clamps, and greys all three channels") {
  // 0.5 * 255 = 127.5 -> 128; 0.1 * 255 = 25.5 (a hair more in float32) -> 26.
  const Rgb8 grey = to_rgb8(ops::from_vector(std::vector<float>{0.5f, 1.2f, -1, 0.1f}, {1, 2, 2}));
  CHECK(grey.height == 2);
  CHECK(grey.width == 2);
  CHECK(grey.pixels == std::vector<uint8_t>{128, 128, 128, 255, 255, 255, 0, 0, 0, 26, 26, 26});
  const Rgb8 rgb =
      to_rgb8(ops::from_vector(std::vector<double>{0, 1, 1, 0, 0.2, 0.4}, {3, 1, 2}, kFloat64));
  CHECK(rgb.pixels == std::vector<uint8_t>{0, 255, 51, 255, 0, 102});
  CHECK_ERROR_CONTAINS(to_rgb8(ops::zeros({2, 2, 2})), "to_rgb8", "1 (grey) or 3 (RGB)",
                       "[2, 2, 2]");
  CHECK_ERROR_CONTAINS(to_rgb8(ops::zeros({2, 2})), "to_rgb8", "3 dims", "[2, 2]");
  CHECK_ERROR_CONTAINS(to_rgb8(ops::from_vector(std::vector<int64_t>{1, 2}, {1, 1, 2})), "to_rgb8",
                       "float", "int64");
}

TEST_CASE("render: heatmap colours each value") {
  const Rgb8 h = heatmap(ops::from_vector(std::vector<float>{0, 0.5f, 1}, {1, 3}), Colormap::Jet);
  CHECK(h.height == 1);
  CHECK(h.width == 3);
  CHECK(h.pixels == std::vector<uint8_t>{0, 0, 127, 124, 255, 121, 127, 0, 0});
  CHECK_ERROR_CONTAINS(heatmap(ops::zeros({1, 2, 3}), Colormap::Jet), "heatmap", "2 dims");
}

TEST_CASE("render: overlay blends (1 - alpha) * image + alpha * colour, then rounds") {
  // Grey image [0, 1; 0.5, 0.4], map [0, 1; 0.5, 0.25], inferno, alpha 0.25:
  //   (0, 0):   0.75 * 0     + 0.25 * (0, 0, 3)        = (0, 0, 0.75)             -> (0, 0, 1)
  //   (0, 1):   0.75 * 255   + 0.25 * (252, 254, 164)  = (254.25, 254.75, 232.25) -> (254, 255,
  //   232) (1, 0):   0.75 * 127.5 + 0.25 * (187, 55, 84)    = (142.375, 109.375, 116.625)
  //                                                                   -> (142, 109, 117)
  //   (1, 1):   0.75 * 102   + 0.25 * (87, 15, 109)    = (98.25, 80.25, 103.75)   -> (98, 80, 104)
  const Tensor image = ops::from_vector(std::vector<float>{0, 1, 0.5f, 0.4f}, {1, 2, 2});
  const Tensor map = ops::from_vector(std::vector<float>{0, 1, 0.5f, 0.25f}, {2, 2});
  const Rgb8 o = overlay(image, map, Colormap::Inferno, 0.25);
  CHECK(o.pixels == std::vector<uint8_t>{0, 0, 1, 254, 255, 232, 142, 109, 117, 98, 80, 104});
  // alpha 0 is the image, alpha 1 the heatmap.
  CHECK(overlay(image, map, Colormap::Inferno, 0).pixels == to_rgb8(image).pixels);
  CHECK(overlay(image, map, Colormap::Inferno, 1).pixels == heatmap(map, Colormap::Inferno).pixels);
  // An RGB image blends per channel: (0.75 * (255, 0, 51) + 0.25 * viridis(1) (253, 231, 36)).
  const Tensor red = ops::from_vector(std::vector<float>{1, 0, 0.2f}, {3, 1, 1});
  CHECK(overlay(red, ops::ones({1, 1}), Colormap::Viridis, 0.25).pixels ==
        std::vector<uint8_t>{255, 58, 47});  // (254.5, 57.75, 47.25)
  CHECK_ERROR_CONTAINS(overlay(image, ops::zeros({2, 3}), Colormap::Jet, 0.5), "overlay", "[2, 3]",
                       "2 x 2");
  CHECK_ERROR_CONTAINS(overlay(image, map, Colormap::Jet, 1.5), "overlay", "alpha", "1.5");
}

TEST_CASE("render: enlarge repeats every pixel as a block") {
  const Rgb8 e = enlarge(ramp(1, 2), 3);
  CHECK(e.height == 3);
  CHECK(e.width == 6);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 6; ++x) CHECK(pixel(e, y, x) == Rgb{0, static_cast<uint8_t>(x / 3), 7});
  CHECK(enlarge(ramp(2, 2), 1).pixels == ramp(2, 2).pixels);
  CHECK_ERROR_CONTAINS(enlarge(ramp(1, 1), 0), "enlarge", "at least 1", "0");
  CHECK_ERROR_CONTAINS(enlarge(Rgb8{2, 2, std::vector<uint8_t>(5)}, 2), "enlarge", "12 bytes",
                       "has 5");
}

TEST_CASE("render: tile lays tiles out row by row with white gaps") {
  // Three 2 x 3 tiles in 2 columns, gap 1: 2 rows; 2 * 3 + 1 = 7 wide, 2 * 2 + 1 = 5 high.
  std::vector<Rgb8> tiles;
  for (uint8_t k = 0; k < 3; ++k) {
    Rgb8 t = ramp(2, 3);
    for (size_t i = 2; i < t.pixels.size(); i += 3) t.pixels[i] = k;  // blue = the tile's index
    tiles.push_back(t);
  }
  const Rgb8 grid = tile(tiles, 2, 1);
  CHECK(grid.height == 5);
  CHECK(grid.width == 7);
  const Rgb white = {255, 255, 255};
  for (int64_t y = 0; y < 5; ++y)
    for (int64_t x = 0; x < 7; ++x) {
      INFO("pixel " << y << ", " << x);
      const int64_t row = y / 3, col = x / 4, ty = y % 3, tx = x % 4, index = row * 2 + col;
      if (ty == 2 || tx == 3 || index == 3)  // a gap, or the empty cell of the last row
        CHECK(pixel(grid, y, x) == white);
      else
        CHECK(pixel(grid, y, x) ==
              Rgb{static_cast<uint8_t>(ty), static_cast<uint8_t>(tx), static_cast<uint8_t>(index)});
    }
  // More columns than tiles: one row, as wide as the tiles.
  CHECK(tile(tiles, 8, 2).width == 3 * 3 + 2 * 2);
  CHECK(tile(tiles, 8, 2).height == 2);
  CHECK_ERROR_CONTAINS(tile({ramp(2, 3), ramp(3, 2)}, 2), "tile", "2 x 3", "tile 1 is 3 x 2");
  CHECK_ERROR_CONTAINS(tile({}, 2), "tile", "no tiles");
  CHECK_ERROR_CONTAINS(tile(tiles, 0), "tile", "columns");
}

TEST_CASE("render: PNG bytes decode back to the same pixels") {
  Generator g(1);
  const Rgb8 im = tile({ramp(5, 7), heatmap(ops::rand({5, 7}, g), Colormap::Viridis)}, 2);
  const std::string png = encode_png(im);
  CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  const Rgb8 back = decode_png(png);
  CHECK(back.height == im.height);
  CHECK(back.width == im.width);
  CHECK(back.pixels == im.pixels);

  TempDir dir;
  write_png(dir / "a.png", im);
  CHECK(read_text(dir / "a.png") == png);
  CHECK(dir.files() == std::vector<std::string>{"a.png"});
  CHECK_ERROR_CONTAINS(write_png(dir / "b.png", Rgb8{}), dir / "b.png", "empty");
  CHECK_ERROR_CONTAINS(encode_png(Rgb8{2, 2, std::vector<uint8_t>(5)}), "encode_png", "12 bytes",
                       "has 5");
}

TEST_CASE("render: caption_above puts a strip of text_px + 4 rows with dark centred text") {
  const Font* font = font_or_skip();
  if (font == nullptr) return;
  const Rgb8 image = ramp(20, 120);
  const Rgb8 c = caption_above(image, "rollout", 12);
  CHECK(c.height == 20 + 16);
  CHECK(c.width == 120);
  // The image below the strip, unchanged.
  CHECK(std::vector<uint8_t>(c.pixels.begin() + 16 * 120 * 3, c.pixels.end()) == image.pixels);
  // Dark text in the strip, inside its 2-row margins, centred within a few pixels.
  const auto ink = dark(c, 0, 16);
  REQUIRE(ink.size() > 20);
  double mean_x = 0;
  for (const auto& [y, x] : ink) {
    CHECK(y >= 2);
    CHECK(y < 14);
    mean_x += static_cast<double>(x);
  }
  mean_x /= static_cast<double>(ink.size());
  CHECK(std::abs(mean_x - 60) < 6);
  // A bigger text_px, a taller strip.
  CHECK(caption_above(image, "rollout", 30).height == 20 + 34);
  // Nothing to say: a blank strip.
  CHECK(all_white(caption_above(image, "", 12), 0, 16));
  CHECK_ERROR_CONTAINS(caption_above(image, "x", 0), "caption_above", "text_px", "0");
  CHECK_ERROR_CONTAINS(caption_above(Rgb8{}, "x"), "caption_above", "non-empty");
}

TEST_CASE("render: a caption too wide is shortened with ... to the width") {
  const Font* font = font_or_skip();
  if (font == nullptr) return;
  const std::string long_text = "integrated-gradients completeness gap";
  // Widths add up, kerning included ("AV" tighter than "A" then "V", from the 'kern' table).
  CHECK(font->width("", 12) == 0);
  CHECK(font->width("ab", 12) == doctest::Approx(font->width("a", 12) + font->width("b", 12)));
  CHECK(font->width("AV", 12) < font->width("A", 12) + font->width("V", 12));
  CHECK(font->width("rollout", 24) == doctest::Approx(2 * font->width("rollout", 12)));
  CHECK(fit_text(*font, "rollout", 200, 12) == "rollout");
  const std::string fitted = fit_text(*font, long_text, 80, 12);
  INFO(fitted);
  REQUIRE(fitted.size() > 3);
  CHECK(fitted.substr(fitted.size() - 3) == "...");
  CHECK(long_text.rfind(fitted.substr(0, fitted.size() - 3), 0) == 0);  // a prefix
  CHECK(font->width(fitted, 12) <= 80);
  // One character more would not fit.
  const std::string more = long_text.substr(0, fitted.size() - 2) + "...";
  CHECK(font->width(more, 12) > 80);
  // Whole UTF-8 characters: "é" (2 bytes) is kept or dropped, never cut.
  for (double w = 10; w < 80; w += 1) {
    const std::string f = fit_text(*font, "caf\xc3\xa9\xc3\xa9\xc3\xa9 au lait", w, 12);
    const std::string body = f.size() >= 3 ? f.substr(0, f.size() - 3) : f;
    CHECK((body.empty() || static_cast<unsigned char>(body.back()) < 0x80 ||
           static_cast<unsigned char>(body.back()) == 0xa9));
  }
  CHECK(fit_text(*font, long_text, 2, 12).empty());  // not even "..."
  // The caption's text ends inside the image: no dark pixel in the 2-pixel margins.
  const Rgb8 c = caption_above(ramp(10, 60), long_text, 12);
  for (const auto& [y, x] : dark(c, 0, 16)) CHECK((x >= 2 && x < 58));
}

TEST_CASE("render: without a usable font the strip stays, blank, and loading says why") {
  TempDir dir;
  std::string problem;
  const std::string missing = dir / "no-such-font.ttf";
  CHECK(Font::load(missing, &problem) == nullptr);
  CHECK(problem.find(missing) != std::string::npos);
  CHECK(problem.find("cannot open") != std::string::npos);
  // Garbage, an empty file, a directory table that points past the end: refused, no crash.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"empty.ttf", ""},
      {"text.ttf", "this is not a font, just some text in a file named .ttf\n"},
      {"png.ttf", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16)},
      {"tables.ttf", std::string("\0\1\0\0\xff\xff\0\0\0\0\0\0\0\0\0\0", 16)},
  };
  for (const auto& item : bad) {
    const auto& name = item.first;
    const auto& bytes = item.second;
    INFO(name);
    write_bytes(dir / name, bytes);
    problem.clear();
    CHECK(Font::load(dir / name, &problem) == nullptr);
    CHECK(problem.find(dir / name) != std::string::npos);
  }
  // The real font cut short at several places: refused, no crash.
  const std::string real = read_text(kDefaultFontPath);
  if (!real.empty()) {
    REQUIRE(Font::load(kDefaultFontPath) != nullptr);
    for (size_t keep : {size_t{12}, size_t{200}, size_t{4096}, real.size() / 2, real.size() - 1}) {
      INFO("first " << keep << " bytes");
      write_bytes(dir / "cut.ttf", real.substr(0, keep));
      problem.clear();
      CHECK(Font::load(dir / "cut.ttf", &problem) == nullptr);
      CHECK(problem.find("cut.ttf") != std::string::npos);
    }
  }
  // A glyph whose place in 'loca' lies past 'glyf' (stb_truetype would read past the file).
  if (!real.empty()) {
    auto be32 = [&](size_t at) {
      uint32_t v = 0;
      for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(real[at + i]);
      return v;
    };
    std::string corrupt = real;
    for (size_t t = 0; t < (be32(4) >> 16); ++t)
      if (real.compare(12 + 16 * t, 4, "loca") == 0) {
        const size_t loca = be32(12 + 16 * t + 8);
        corrupt.replace(loca + 4 * 100, 4, "\xff\xff\xff\xf0");  // glyph 99's end (long offsets)
      }
    write_bytes(dir / "loca.ttf", corrupt);
    problem.clear();
    CHECK(Font::load(dir / "loca.ttf", &problem) == nullptr);
    CHECK(problem.find("glyph 99 lies outside the 'glyf' table") != std::string::npos);
  }
  // No font: the same layout as with one, the strip all white.
  const Rgb8 image = ramp(20, 40);
  const Rgb8 c = caption_with_font(nullptr, image, "rollout", 12);
  CHECK(c.height == 36);
  CHECK(c.width == 40);
  CHECK(all_white(c, 0, 16));
  CHECK(std::vector<uint8_t>(c.pixels.begin() + 16 * 40 * 3, c.pixels.end()) == image.pixels);
}

TEST_CASE("render: the label font's path is $VITRINE_FONT, else DejaVu Sans") {
  const char* before = std::getenv("VITRINE_FONT");
  const std::string saved = before ? before : "";
  setenv("VITRINE_FONT", "/somewhere/else.ttf", 1);
  CHECK(label_font_path() == "/somewhere/else.ttf");
  setenv("VITRINE_FONT", "", 1);
  CHECK(label_font_path() == kDefaultFontPath);
  unsetenv("VITRINE_FONT");
  CHECK(label_font_path() == "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
  if (before) setenv("VITRINE_FONT", saved.c_str(), 1);
}

TEST_CASE("render: labelled_grid captions every tile, then tiles them") {
  // Three 20 x 30 tiles in 2 columns, gap 1; 30 px wide: captions of 12 px, strips of 16 rows.
  const std::vector<Rgb8> tiles = {ramp(20, 30), ramp(20, 30), ramp(20, 30)};
  const Rgb8 g = labelled_grid(tiles, {"a", "b", "c"}, 2, 1);
  CHECK(g.height == 2 * (20 + 16) + 1);
  CHECK(g.width == 2 * 30 + 1);
  // The third tile, at row 1, column 0, below its strip: the image's pixels.
  for (int64_t y = 0; y < 20; ++y)
    for (int64_t x = 0; x < 30; ++x) CHECK(pixel(g, 37 + 16 + y, x) == pixel(tiles[2], y, x));
  if (label_font() != nullptr) {
    CHECK(!dark(g, 0, 16).empty());        // "a" and "b" over the first row
    CHECK(!dark(g, 37, 37 + 16).empty());  // "c" over the second
  }
  // The caption grows with wide tiles: 640 px wide, 40 px text, 44 rows of strip.
  CHECK(caption_px(112) == 12);
  CHECK(caption_px(320) == 20);
  CHECK(caption_px(2000) == 40);
  CHECK(labelled_grid({ramp(2, 640)}, {"wide"}, 1).height == 2 + 44);
  CHECK_ERROR_CONTAINS(labelled_grid(tiles, {"a", "b"}, 2), "labelled_grid", "2 labels", "3 tiles");
  CHECK_ERROR_CONTAINS(labelled_grid({}, {}, 2), "labelled_grid", "no tiles");
  CHECK_ERROR_CONTAINS(labelled_grid({ramp(20, 30), ramp(20, 31)}, {"a", "b"}, 2), "tile",
                       "tile 1 is");
}
