// Labels in the explanation pictures (all.png's columns, heads.png's heads, a montage's images),
// drawn with stb_truetype from a TrueType font file: DejaVu Sans from Debian's fonts-dejavu-core,
// or the file $VITRINE_FONT names. Text is one line of UTF-8 (a byte that is not part of a valid
// UTF-8 sequence is drawn as U+FFFD); text_px is the height in pixels of the font's line box
// (ascent - descent), the size stbtt_ScaleForPixelHeight takes. Glyphs are antialiased: a pixel is
// blended towards the text colour by the glyph's coverage of it. The public captions are in
// render.h (caption_above, labelled_grid); this file is the font underneath them.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "explain/render.h"

namespace vitrine::explain {

/// The label font's file when $VITRINE_FONT is unset or empty (Debian's fonts-dejavu-core).
inline constexpr const char* kDefaultFontPath = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// A TrueType font (glyf outlines; a .ttc collection's first font) held in memory. Immutable
/// once loaded, so measuring and drawing from several threads at once is safe.
class Font {
 public:
  /// The font in the file at path, or nullptr when the file cannot be read or is not a font this
  /// can use; then *problem (when given) says why, naming the path. stb_truetype trusts every
  /// offset in a font, so before it parses one this checks what it will read: the table
  /// directory, the tables read at load, the character map, the horizontal metrics, every
  /// glyph's outline records, compound glyphs free of cycles; a truncated, corrupted or
  /// mislabelled file, or a PostScript-outline (CFF) font, is refused rather than read out of
  /// bounds. Kerning comes from the 'kern' table when it is well formed (GPOS is not read).
  static std::unique_ptr<const Font> load(const std::string& path, std::string* problem = nullptr);

  ~Font();
  Font(const Font&) = delete;
  Font& operator=(const Font&) = delete;

  /// The width in pixels of one line of text at text_px: the sum of the glyphs' advances and
  /// kerning, as draw() places them.
  double width(const std::string& text, double text_px) const;

  /// Draws one line of text, its line box's top-left corner at (x, y) (the baseline at y + the
  /// ascent), clipped to the image. An image whose pixels are not height x width x 3 is an Error.
  void draw(Rgb8& image, double x, double y, const std::string& text, double text_px,
            std::array<uint8_t, 3> color) const;

  struct Impl;

 private:
  explicit Font(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The path the label font is read from: $VITRINE_FONT when set and not empty, else
/// kDefaultFontPath.
std::string label_font_path();

/// The labels' font, Font::load(label_font_path()) on the first call and the same on every later
/// one (a function-local static: loaded once per process, thread-safe). nullptr when it cannot be
/// loaded; then that first call has printed one warning line to stderr naming the path tried and
/// the fix (install fonts-dejavu-core, or set VITRINE_FONT to a .ttf file).
const Font* label_font();

/// The text if it fits in width pixels at text_px; otherwise its longest prefix of whole
/// characters (trailing spaces dropped) followed by "..." that fits; "" when not even "..." fits.
std::string fit_text(const Font& font, const std::string& text, double width, double text_px);

/// caption_above (render.h) drawn with a given font: a white strip of text_px + 4 rows above the
/// image, with the text dark (#222), centred and shortened by fit_text to the width less 2 px of
/// margin on each side. A null font draws no text: the strip stays, blank. A text_px below 1 or
/// an empty image, or one whose pixels are not height x width x 3, is an Error.
Rgb8 caption_with_font(const Font* font, const Rgb8& image, const std::string& text,
                       int64_t text_px);

}  // namespace vitrine::explain
