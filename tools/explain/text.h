// Labels drawn into the explanation pictures (all.png's columns, heads.png's heads, a montage's
// images), with stb_easy_font: a small font built from rectangles inside the header, so a picture
// needs no font file on the machine that draws it. A font pixel is drawn as a scale x scale block
// of the image; the glyphs are 9 font pixels high (descenders included) on a 12-pixel line.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/explain/render.h"

namespace vitrine::explain {

/// The width in image pixels of one line of text at scale (ASCII; other bytes are drawn as '?').
int64_t text_width(const std::string& text, int64_t scale = 1);

/// Draws one line of text with its top-left corner at (x, y), clipped to the image.
void draw_text(Rgb8& image, int64_t x, int64_t y, const std::string& text,
               std::array<uint8_t, 3> color, int64_t scale = 1);

/// The text shortened with ".." at its end until it fits `width` pixels at scale ("" if even
/// ".." does not).
std::string fit_text(const std::string& text, int64_t width, int64_t scale = 1);

/// The image with a white strip of 12 * scale + 4 rows above it holding the text, dark and
/// centred, shortened to fit the width (fit_text). scale >= 1, or 0 for caption_scale(width).
Rgb8 caption_above(const Rgb8& image, const std::string& text, int64_t scale = 0);

/// The caption scale for an image `width` pixels wide: width / 160, clamped to [1, 4].
int64_t caption_scale(int64_t width);

/// Each tile captioned with its label (caption_above), then laid out as tile() does. The labels
/// must be as many as the tiles (an Error otherwise).
Rgb8 labelled_grid(const std::vector<Rgb8>& tiles, const std::vector<std::string>& labels,
                   int64_t columns, int64_t gap = 2);

}  // namespace vitrine::explain
