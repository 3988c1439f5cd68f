// Labels in the pictures with stb_truetype: see text.h.
#include "explain/text.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "backends/env_switch.h"
#include "backends/error.h"

// stb_truetype's implementation, private to this file (STBTT_STATIC), as render.cpp does with
// stb_image_write.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_TRUETYPE_IMPLEMENTATION
#define STBTT_STATIC
#include <stb/stb_truetype.h>
#pragma GCC diagnostic pop

namespace vitrine::explain {

struct Font::Impl {
  std::vector<unsigned char> data;  // the whole file; info points into it
  stbtt_fontinfo info{};
  int ascent = 0, descent = 0;  // font units
  int glyphs = 0;               // numGlyphs
  bool kern = false;            // the 'kern' table was checked and is used

  /// The glyph of a character; one past numGlyphs (a cmap may say so) is .notdef, whose metrics
  /// and outline were checked.
  int glyph(char32_t c) const {
    const int g = stbtt_FindGlyphIndex(&info, static_cast<int>(c));
    return g >= 0 && g < glyphs ? g : 0;
  }
  /// The kerning between two glyphs in font units, from the legacy 'kern' table only (GPOS is
  /// not read: its layout is not checked).
  int kerning(int a, int b) const { return kern ? stbtt__GetGlyphKernInfoAdvance(&info, a, b) : 0; }
};

namespace {

constexpr size_t kMaxFontBytes = size_t{128} << 20;
constexpr int kMaxComponentDepth = 16;
constexpr std::array<uint8_t, 3> kCaptionColor = {0x22, 0x22, 0x22};

/// One decoded character and the end of its bytes in the text.
struct Char {
  char32_t code;
  size_t end;
};

/// UTF-8 decoding: a byte that does not start a valid sequence (overlong, a surrogate, past
/// U+10FFFF, cut short) is U+FFFD and consumes itself alone. Control characters become spaces.
std::vector<Char> decode_utf8(const std::string& s) {
  std::vector<Char> out;
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    char32_t c = 0xFFFD;
    size_t len = 1;
    if (n == 1) {
      c = b;
    } else if (n > 1 && i + static_cast<size_t>(n) <= s.size()) {
      char32_t v = b & (0x7F >> n);
      bool ok = true;
      for (int k = 1; k < n && ok; ++k) {
        const auto t = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
        ok = (t >> 6) == 2;
        v = v << 6 | (t & 0x3F);
      }
      constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      if (ok && v >= kMin[n] && v <= 0x10FFFF && (v < 0xD800 || v > 0xDFFF)) {
        c = v;
        len = static_cast<size_t>(n);
      }
    }
    if (c < 0x20 || c == 0x7F) c = ' ';
    i += len;
    out.push_back({c, i});
  }
  return out;
}

// ---- checking a font before stb_truetype reads it --------------------------------------------
// stb_truetype reads a font through raw pointers, trusting every offset and count in it. These
// checks mirror what it reads for the calls made here (stbtt_InitFont, stbtt_FindGlyphIndex,
// stbtt_GetGlyphHMetrics, the glyph box and outline, the 'kern' lookup) and refuse a font where
// any of that would fall outside the file or its table: a truncated file, another format, a
// corrupted table. Each returns "" when the font passes, else the reason.

size_t be16(const std::vector<unsigned char>& d, size_t at) {
  return static_cast<size_t>(d[at]) << 8 | d[at + 1];
}
size_t be32(const std::vector<unsigned char>& d, size_t at) {
  return be16(d, at) << 16 | be16(d, at + 2);
}

struct Table {
  size_t offset = 0, length = 0;
  size_t end() const { return offset + length; }
};
using Tables = std::map<std::string, Table>;

/// The table directory of the font at start, every table inside the file, the first of a tag
/// kept (as stb_truetype's search finds it); then what stbtt_InitFont reads from the tables.
std::string check_before_init(const std::vector<unsigned char>& d, size_t start, Tables& tables) {
  const size_t size = d.size();
  if (start + 12 > size) return "too short for a table directory";
  const size_t count = be16(d, start + 4);
  if (start + 12 + 16 * count > size) return fmt::format("its {} table entries are cut off", count);
  for (size_t t = 0; t < count; ++t) {
    const size_t e = start + 12 + 16 * t;
    const std::string tag(reinterpret_cast<const char*>(&d[e]), 4);
    const Table table{be32(d, e + 8), be32(d, e + 12)};
    if (table.end() > size)
      return fmt::format("its '{}' table ({} bytes at {}) lies past the end of the file ({} bytes)",
                         tag, table.length, table.offset, size);
    tables.emplace(tag, table);
  }
  if (!tables.count("glyf"))
    return tables.count("CFF ") ? "PostScript (CFF) outlines are not supported: use a TrueType "
                                  "(.ttf) font"
                                : "it has no glyph outlines ('glyf' table)";
  for (const auto& [tag, length] : {std::pair<const char*, size_t>{"cmap", 4},
                                    {"head", 54},
                                    {"hhea", 36},
                                    {"hmtx", 4},
                                    {"loca", 2}}) {
    auto it = tables.find(tag);
    if (it == tables.end()) return fmt::format("it has no '{}' table", tag);
    if (it->second.length < length)
      return fmt::format("its '{}' table has {} bytes, fewer than {}", tag, it->second.length,
                         length);
  }
  if (auto it = tables.find("maxp"); it != tables.end() && it->second.length < 6)
    return "its 'maxp' table is cut off";
  const Table cmap = tables["cmap"];
  if (4 + 8 * be16(d, cmap.offset + 2) > cmap.length) return "its 'cmap' records are cut off";
  return "";
}

/// The character map stb_truetype chose (stbtt_FindGlyphIndex's reads, formats 0, 4, 6, 12, 13).
std::string check_cmap(const std::vector<unsigned char>& d, const stbtt_fontinfo& info,
                       const Table& cmap) {
  const size_t m = static_cast<uint32_t>(info.index_map), end = cmap.end();
  const std::string cut = "its character map is cut off";
  if (m < cmap.offset || m + 4 > end) return cut;
  const size_t format = be16(d, m);
  if (format == 0) return m + be16(d, m + 2) > end ? cut : "";
  if (format == 6) return m + 10 > end || m + 10 + 2 * be16(d, m + 8) > end ? cut : "";
  if (format == 12 || format == 13)
    return m + 16 > end || m + 16 + 12 * be32(d, m + 12) > end ? cut : "";
  if (format != 4)
    return fmt::format("its character map has format {}, not 0, 4, 6, 12 or 13", format);
  if (m + 14 > end) return cut;
  const size_t seg = be16(d, m + 6) / 2;
  if (seg == 0 || m + 16 + 8 * seg > end) return cut;
  // The binary search reads only segments 0..seg-1 when its parameters are the specification's.
  const size_t range = be16(d, m + 8) / 2, selector = be16(d, m + 10), shift = be16(d, m + 12) / 2;
  if (selector > 15 || range != size_t{1} << selector || range > seg || 2 * range <= seg ||
      shift != seg - range)
    return "its character map's search parameters are inconsistent";
  for (size_t k = 0; k < seg; ++k) {
    const size_t last = be16(d, m + 14 + 2 * k), first = be16(d, m + 16 + 2 * seg + 2 * k);
    const size_t at = m + 16 + 6 * seg + 2 * k, offset = be16(d, at);
    if (offset != 0 && first <= last && at + offset + 2 * (last - first) + 2 > end)
      return fmt::format("its character map's segment {} points past the table", k);
  }
  return "";
}

/// Glyph g's outline, bytes [b, e) of the file: a simple glyph's contours, flags and coordinates,
/// or a compound glyph's component records (their glyph indices appended to components).
std::string check_glyph(const std::vector<unsigned char>& d, size_t g, size_t b, size_t e,
                        size_t glyphs, std::vector<size_t>& components) {
  const auto contours = static_cast<int16_t>(be16(d, b));
  const std::string cut = fmt::format("glyph {} is cut off", g);
  if (contours > 0) {
    const auto nc = static_cast<size_t>(contours);
    if (b + 12 + 2 * nc > e) return cut;
    size_t last = 0;
    for (size_t k = 0; k < nc; ++k) {
      const size_t end_point = be16(d, b + 10 + 2 * k);
      if (k > 0 && end_point <= last) return fmt::format("glyph {}'s contours are not in order", g);
      last = end_point;
    }
    const size_t n = last + 1;
    size_t p = b + 12 + 2 * nc + be16(d, b + 10 + 2 * nc);  // past the instructions
    if (p > e) return cut;
    std::vector<uint8_t> flags(n);
    uint8_t f = 0;
    size_t repeat = 0;
    for (size_t i = 0; i < n; ++i) {
      if (repeat == 0) {
        if (p >= e) return cut;
        f = d[p++];
        if (f & 8) {
          if (p >= e) return cut;
          repeat = d[p++];
        }
      } else {
        --repeat;
      }
      flags[i] = f;
    }
    for (const auto& [short_bit, same_bit] : {std::pair<uint8_t, uint8_t>{2, 16}, {4, 32}})
      for (size_t i = 0; i < n; ++i)
        p += (flags[i] & short_bit) ? 1 : (flags[i] & same_bit) ? 0 : 2;
    if (p > e) return cut;
    // A last contour of one off-curve point makes stb_truetype read one point past its buffer.
    const size_t last_start = nc > 1 ? be16(d, b + 10 + 2 * (nc - 2)) + 1 : 0;
    if (last_start == n - 1 && !(flags[n - 1] & 1))
      return fmt::format("glyph {} ends with a contour of one off-curve point", g);
  } else if (contours < 0) {
    size_t p = b + 10, flags = 0;
    do {
      if (p + 4 > e) return cut;
      flags = be16(d, p);
      const size_t component = be16(d, p + 2);
      p += 4 + ((flags & 1) ? 4 : 2);
      p += (flags & 8) ? 2 : (flags & 64) ? 4 : (flags & 128) ? 8 : 0;
      if (p > e) return cut;
      if (!(flags & 2))
        return fmt::format("glyph {} places a component by matching points (unsupported)", g);
      if (component >= glyphs) return fmt::format("glyph {} names a glyph past the last", g);
      components.push_back(component);
    } while (flags & 32);
  }
  return "";
}

/// After stbtt_InitFont: the horizontal metrics, the character map, every glyph's place and
/// outline, compound glyphs free of cycles (stb_truetype recurses into components), and whether
/// the 'kern' table can be used.
std::string check_after_init(const std::vector<unsigned char>& d, Font::Impl& font,
                             Tables& tables) {
  const stbtt_fontinfo& info = font.info;
  const size_t glyphs = static_cast<size_t>(std::max(info.numGlyphs, 0));
  if (glyphs == 0) return "it has no glyphs";
  const size_t long_metrics = be16(d, tables["hhea"].offset + 34);
  if (long_metrics == 0) return "its 'hhea' table declares no horizontal metrics";
  const size_t hmtx = 4 * long_metrics + 2 * (glyphs > long_metrics ? glyphs - long_metrics : 0);
  if (tables["hmtx"].length < hmtx) return "its 'hmtx' table is cut off";
  if (std::string why = check_cmap(d, info, tables["cmap"]); !why.empty()) return why;

  const bool wide = info.indexToLocFormat == 1;
  if (info.indexToLocFormat > 1) return "its 'head' table names an unknown glyph index format";
  const Table loca = tables["loca"], glyf = tables["glyf"];
  if (loca.length < (glyphs + 1) * (wide ? 4 : 2)) return "its 'loca' table is cut off";
  std::vector<std::vector<size_t>> components(glyphs);
  size_t begin = wide ? be32(d, loca.offset) : 2 * be16(d, loca.offset);
  for (size_t g = 0; g < glyphs; ++g) {
    const size_t end =
        wide ? be32(d, loca.offset + 4 * (g + 1)) : 2 * be16(d, loca.offset + 2 * (g + 1));
    if (begin > end || end > glyf.length)
      return fmt::format("glyph {} lies outside the 'glyf' table", g);
    if (end > begin) {
      if (end - begin < 10) return fmt::format("glyph {} is shorter than a glyph header", g);
      if (std::string why =
              check_glyph(d, g, glyf.offset + begin, glyf.offset + end, glyphs, components[g]);
          !why.empty())
        return why;
    }
    begin = end;
  }
  // Compound glyphs: depth-first, iteratively, 0 = not seen, 1 = on the path, 2 = done.
  std::vector<uint8_t> state(glyphs, 0);
  for (size_t root = 0; root < glyphs; ++root) {
    if (state[root] != 0) continue;
    std::vector<std::pair<size_t, size_t>> path = {{root, 0}};  // (glyph, next component)
    state[root] = 1;
    while (!path.empty()) {
      auto& [g, next] = path.back();
      if (next == components[g].size()) {
        state[g] = 2;
        path.pop_back();
        continue;
      }
      const size_t c = components[g][next++];
      if (state[c] == 1) return fmt::format("glyph {} contains itself", c);
      if (state[c] == 2) continue;
      if (path.size() >= kMaxComponentDepth)
        return fmt::format("glyph {} nests components more than {} deep", root, kMaxComponentDepth);
      state[c] = 1;
      path.emplace_back(c, 0);
    }
  }

  if (auto it = tables.find("kern"); info.kern != 0 && it != tables.end()) {
    const Table k = it->second;
    font.kern = k.length >= 18 && be16(d, k.offset + 2) >= 1 && be16(d, k.offset + 8) == 1 &&
                18 + 6 * be16(d, k.offset + 10) <= k.length;
  }
  return "";
}

}  // namespace

Font::Font(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Font::~Font() = default;

std::unique_ptr<const Font> Font::load(const std::string& path, std::string* problem) {
  auto refuse = [&](const std::string& why) -> std::unique_ptr<const Font> {
    if (problem) *problem = fmt::format("{}: {}", path, why);
    return nullptr;
  };
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return refuse(fmt::format("cannot open it ({})", std::strerror(errno)));
  auto impl = std::make_unique<Impl>();
  std::vector<unsigned char>& d = impl->data;
  unsigned char chunk[65536];
  size_t got = 0;
  while (d.size() <= kMaxFontBytes && (got = std::fread(chunk, 1, sizeof chunk, file)) > 0)
    d.insert(d.end(), chunk, chunk + got);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return refuse("cannot read it");
  if (d.size() > kMaxFontBytes)
    return refuse(fmt::format("larger than {} MiB, not a font", kMaxFontBytes >> 20));
  if (d.size() < 16) return refuse(fmt::format("not a font ({} bytes)", d.size()));

  // A collection (ttcf) names its first font's offset; stbtt_GetFontOffsetForIndex reads it
  // from the first 16 bytes.
  const int offset = stbtt_GetFontOffsetForIndex(d.data(), 0);
  if (offset < 0) return refuse("not a TrueType font (no font header)");
  Tables tables;
  if (std::string why = check_before_init(d, static_cast<size_t>(offset), tables); !why.empty())
    return refuse("not a usable font: " + why);
  if (stbtt_InitFont(&impl->info, d.data(), offset) == 0)
    return refuse("not a TrueType font that stb_truetype can read");
  impl->glyphs = impl->info.numGlyphs;
  if (std::string why = check_after_init(d, *impl, tables); !why.empty())
    return refuse("not a usable font: " + why);
  int line_gap = 0;
  stbtt_GetFontVMetrics(&impl->info, &impl->ascent, &impl->descent, &line_gap);
  if (impl->ascent - impl->descent <= 0) return refuse("not a usable font: its line height is 0");
  return std::unique_ptr<const Font>(new Font(std::move(impl)));
}

double Font::width(const std::string& text, double text_px) const {
  const stbtt_fontinfo* info = &impl_->info;
  const float scale = stbtt_ScaleForPixelHeight(info, static_cast<float>(text_px));
  double pen = 0;
  int previous = 0;
  for (const Char& c : decode_utf8(text)) {
    const int glyph = impl_->glyph(c.code);
    if (previous != 0) pen += scale * impl_->kerning(previous, glyph);
    int advance = 0, bearing = 0;
    stbtt_GetGlyphHMetrics(info, glyph, &advance, &bearing);
    pen += scale * advance;
    previous = glyph;
  }
  return pen;
}

void Font::draw(Rgb8& image, double x, double y, const std::string& text, double text_px,
                std::array<uint8_t, 3> color) const {
  VT_CHECK(image.height >= 0 && image.width >= 0 &&
               static_cast<int64_t>(image.pixels.size()) == image.height * image.width * 3,
           "draw text: a {} x {} RGB image needs {} bytes, it has {}", image.height, image.width,
           image.height * image.width * 3, image.pixels.size());
  const stbtt_fontinfo* info = &impl_->info;
  const float scale = stbtt_ScaleForPixelHeight(info, static_cast<float>(text_px));
  const int64_t baseline = std::lround(y + scale * impl_->ascent);
  double pen = x;
  int previous = 0;
  std::vector<unsigned char> coverage;
  for (const Char& c : decode_utf8(text)) {
    const int glyph = impl_->glyph(c.code);
    if (previous != 0) pen += scale * impl_->kerning(previous, glyph);
    previous = glyph;
    int advance = 0, bearing = 0;
    stbtt_GetGlyphHMetrics(info, glyph, &advance, &bearing);
    const double left = std::floor(pen);
    const auto shift = static_cast<float>(pen - left);  // sub-pixel placement
    pen += scale * advance;
    int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    stbtt_GetGlyphBitmapBoxSubpixel(info, glyph, scale, scale, shift, 0, &x0, &y0, &x1, &y1);
    const int w = x1 - x0, h = y1 - y0;
    if (w <= 0 || h <= 0) continue;  // a space
    // A glyph box far larger than the line (a corrupt bounding box) is not drawn.
    if (w > 16 * text_px + 16 || h > 8 * text_px + 16) continue;
    coverage.assign(static_cast<size_t>(w) * static_cast<size_t>(h), 0);
    stbtt_MakeGlyphBitmapSubpixel(info, coverage.data(), w, h, w, scale, scale, shift, 0, glyph);
    const int64_t ox = static_cast<int64_t>(left) + x0, oy = baseline + y0;
    for (int64_t gy = std::max<int64_t>(0, -oy); gy < h && oy + gy < image.height; ++gy)
      for (int64_t gx = std::max<int64_t>(0, -ox); gx < w && ox + gx < image.width; ++gx) {
        const int a = coverage[static_cast<size_t>(gy * w + gx)];
        if (a == 0) continue;
        uint8_t* p = &image.pixels[static_cast<size_t>(((oy + gy) * image.width + ox + gx) * 3)];
        for (int k = 0; k < 3; ++k)
          p[k] = static_cast<uint8_t>((p[k] * (255 - a) + color[k] * a + 127) / 255);
      }
  }
}

std::string label_font_path() {
  const std::string_view env = env_value("VITRINE_FONT");  // unset or empty: the default
  return env.empty() ? std::string(kDefaultFontPath) : std::string(env);
}

const Font* label_font() {
  static const std::unique_ptr<const Font> font = [] {
    std::string problem;
    std::unique_ptr<const Font> f = Font::load(label_font_path(), &problem);
    if (!f)
      fmt::print(stderr,
                 "warning: the pictures are drawn without labels: no font at {}; install "
                 "fonts-dejavu-core (apt-get install fonts-dejavu-core) or set VITRINE_FONT to a "
                 "TrueType font file\n",
                 problem);
    return f;
  }();
  return font.get();
}

std::string fit_text(const Font& font, const std::string& text, double width, double text_px) {
  if (font.width(text, text_px) <= width) return text;
  const std::vector<Char> chars = decode_utf8(text);
  for (size_t n = chars.size(); n-- > 0;) {
    std::string prefix = text.substr(0, n == 0 ? 0 : chars[n - 1].end);
    while (!prefix.empty() && prefix.back() == ' ') prefix.pop_back();
    const std::string s = prefix + "...";
    if (font.width(s, text_px) <= width) return s;
  }
  return "";
}

Rgb8 caption_with_font(const Font* font, const Rgb8& image, const std::string& text,
                       int64_t text_px) {
  VT_CHECK(text_px >= 1, "caption_above: text_px must be at least 1, got {}", text_px);
  VT_CHECK(image.height > 0 && image.width > 0 &&
               static_cast<int64_t>(image.pixels.size()) == image.height * image.width * 3,
           "caption_above: expected a non-empty image of height x width x 3 bytes, got {} x {} "
           "with {} bytes",
           image.height, image.width, image.pixels.size());
  const int64_t strip = text_px + 4;
  Rgb8 out{image.height + strip, image.width, {}};
  out.pixels.assign(static_cast<size_t>(out.height * out.width * 3), 255);
  std::copy(image.pixels.begin(), image.pixels.end(),
            out.pixels.begin() + static_cast<std::ptrdiff_t>(strip * image.width * 3));
  if (font == nullptr) return out;
  const auto px = static_cast<double>(text_px);
  const std::string shown = fit_text(*font, text, static_cast<double>(image.width - 4), px);
  const double x = std::max(2.0, (static_cast<double>(image.width) - font->width(shown, px)) / 2);
  // Only the strip is drawn on: a glyph reaching past the line box (rare accents) is cut there.
  Rgb8 band{strip, image.width,
            std::vector<uint8_t>(
                out.pixels.begin(),
                out.pixels.begin() + static_cast<std::ptrdiff_t>(strip * image.width * 3))};
  font->draw(band, std::round(x), 2, shown, px, kCaptionColor);
  std::copy(band.pixels.begin(), band.pixels.end(), out.pixels.begin());
  return out;
}

}  // namespace vitrine::explain
