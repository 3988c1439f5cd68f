// Pictures of explanations: maps through matplotlib's colormaps, overlays on the input image,
// enlargement, tiling, captions (text drawn with stb_truetype, text.h) and PNG encoding
// (stb_image_write). Pixels are 8-bit RGB in HWC order.
// Float inputs are in [0, 1] and clamped to it: an image's value v becomes the byte nearest to
// v * 255 (NaN: 0); a map's value picks a colour (NaN: black). An Rgb8 whose pixels are not
// height x width x 3 bytes is an Error wherever one is taken.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace vitrine::explain {

enum class Colormap { Inferno, Jet, Viridis };
/// "inferno", "jet" or "viridis"; another name is an Error listing these.
Colormap parse_colormap(const std::string& name);
std::string colormap_name(Colormap c);

/// An 8-bit RGB image, height x width x 3 bytes in row-major HWC order.
struct Rgb8 {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // HWC RGB
};

/// The colour of v under a colormap, as matplotlib's cmap(v, bytes=True) gives it: v clamped to
/// [0, 1] picks entry floor(v * 256), clamped to 255, of a 256-entry table (generated from
/// matplotlib by make_colormaps.py: its listed inferno and viridis, and jet sampled from its
/// segment data). NaN gives black (matplotlib's "bad" colour, transparent black, without alpha).
std::array<uint8_t, 3> color(Colormap c, double v);

/// An image [C, H, W] (C = 1 grey, drawn in all three channels, or C = 3 RGB) of any float
/// dtype with values in [0, 1] (clamped), each rounded to the nearest of 0..255.
Rgb8 to_rgb8(const Tensor& image);

/// A map [H, W] with values in [0, 1] drawn with a colormap.
Rgb8 heatmap(const Tensor& map, Colormap c);

/// A map [H, W] blended over an image [C, H, W] of the same height and width, per pixel and
/// channel in float, then rounded to the nearest byte:
///   out = (1 - alpha) * 255 * clamp(image) + alpha * color(map),     alpha in [0, 1].
Rgb8 overlay(const Tensor& image, const Tensor& map, Colormap c, double alpha);

/// The image [C, H, W] multiplied by a map [H, W] of its height and width (the picture of the
/// image masked by the map, as vit-pytorch's CIFAR recipe draws it), per pixel and channel:
///   out = round(255 * clamp(image) * clamp(map)),     clamp to [0, 1].
Rgb8 masked(const Tensor& image, const Tensor& map);

/// How an explanation map is drawn over its image: a colormap blended over it (overlay), or the
/// image multiplied by the map (mask).
enum class Style { Overlay, Mask };
/// "overlay" or "mask"; another name is an Error naming both.
Style parse_style(const std::string& name);

/// A map [H, W] in [0, 1] drawn on its image [C, H, W] as the style says (overlay: the colormap
/// blended with alpha; mask: masked), then enlarged factor times: the picture of one map.
Rgb8 draw_map(const Tensor& image, const Tensor& map, Style style, Colormap c, double alpha,
              int64_t factor);

/// A model input [C, H, W] as a person sees it: x * std[c] + mean[c] per channel (float32),
/// clamped to [0, 1] (activation-max's optimised inputs).
Tensor unnormalised(const Tensor& x, const std::vector<float>& mean, const std::vector<float>& std);

/// The image enlarged factor times in each direction (nearest neighbour: every pixel becomes a
/// factor x factor block), so that 28 x 28 images are visible. factor >= 1.
Rgb8 enlarge(const Rgb8& image, int64_t factor);

/// Tiles of one size laid out row by row in min(columns, n) columns (as many rows as needed),
/// separated by gap white pixels, the unused cells of the last row white. A tile of another size
/// than the first, no tiles, columns < 1 or gap < 0 is an Error.
Rgb8 tile(const std::vector<Rgb8>& tiles, int64_t columns, int64_t gap = 2);

/// The image with a white strip of text_px + 4 rows above it holding one line of text: dark
/// (#222), antialiased, horizontally centred and, when wider than the image less 2 px on each
/// side, shortened to its longest prefix that fits followed by "..." (UTF-8, whole characters).
/// text_px is the height of the font's line box in pixels; the font is DejaVu Sans
/// (/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf, Debian's fonts-dejavu-core) or the TrueType
/// file $VITRINE_FONT names, loaded on first use (text.h). Without a usable font the strip is
/// left blank (the layout is the same) and one warning line on stderr says how to fix it.
/// A text_px below 1 or an empty image (or one whose pixels are not height x width x 3) is an
/// Error.
Rgb8 caption_above(const Rgb8& image, const std::string& text, int64_t text_px = 12);

/// The caption size labelled_grid uses for tiles `width` pixels wide: width / 16, clamped to
/// [12, 40] (12 px up to 207 px wide, 40 px from 640).
int64_t caption_px(int64_t width);

/// Each tile captioned with its label (caption_above at caption_px of the first tile's width, so
/// that every captioned tile has one size), then laid out as tile() does: min(columns, n)
/// columns, gap white pixels between them. Labels not as many as the tiles, an empty tile, and
/// whatever tile() refuses are an Error.
Rgb8 labelled_grid(const std::vector<Rgb8>& tiles, const std::vector<std::string>& labels,
                   int64_t columns, int64_t gap = 2);

/// The PNG file's bytes of an image (8-bit RGB, stbi_write_png_to_func). An empty image or one
/// whose pixels are not height x width x 3 bytes is an Error.
std::string encode_png(const Rgb8& image);

/// Writes an image as a PNG file, atomically (temp file + rename). Errors name the file.
void write_png(const std::string& path, const Rgb8& image);

}  // namespace vitrine::explain
