// PastedObjects: items pasted on larger canvases with distractors (the draw order is in pasted.h).
#include "nn/data/pasted.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/error.h"
#include "nn/data/transforms.h"

namespace vitrine::nn::data {

namespace {

constexpr int64_t kNoiseWords = 1024;  // words of one per-example Rng (transforms.h)

/// The item's scale and box on the canvas: draws 1 and 2 of the file comment.
struct Placement {
  double scale = 1;
  Box box;
};

Placement place(Rng& rng, const PastedOptions& o, int64_t height, int64_t width) {
  Placement p;
  p.scale = std::min(o.max_scale, o.min_scale + (o.max_scale - o.min_scale) * rng.uniform());
  p.box.height = scaled_size(height, p.scale);
  p.box.width = scaled_size(width, p.scale);
  p.box.top = rng.below(o.canvas - p.box.height + 1);
  p.box.left = rng.below(o.canvas - p.box.width + 1);
  return p;
}

/// The range [lo, hi] of a crop's start on one axis: a window of f inside [a, b) when b - a >= f,
/// around it when smaller, the whole image of size n when the content is empty; clamped to the
/// image.
std::pair<int64_t, int64_t> crop_range(int64_t a, int64_t b, bool empty, int64_t f, int64_t n) {
  const int64_t last = std::max<int64_t>(0, n - f);
  if (empty) return {0, last};
  const int64_t lo = std::clamp<int64_t>(std::min(a, b - f), 0, last);
  const int64_t hi = std::clamp<int64_t>(std::max(a, b - f), lo, last);
  return {lo, hi};
}

}  // namespace

Box nonzero_box(const Image& im) {
  int64_t y0 = im.height, y1 = -1, x0 = im.width, x1 = -1;
  for (int64_t c = 0; c < im.channels; ++c)
    for (int64_t y = 0; y < im.height; ++y)
      for (int64_t x = 0; x < im.width; ++x)
        if (im.at(c, y, x) > 0) {
          y0 = std::min(y0, y), y1 = std::max(y1, y);
          x0 = std::min(x0, x), x1 = std::max(x1, x);
        }
  if (y1 < 0) return {};
  return {y0, x0, y1 - y0 + 1, x1 - x0 + 1};
}

const std::vector<std::string>& distractor_names() {
  static const std::vector<std::string> names = {"none", "noise", "fragments"};
  return names;
}

int64_t scaled_size(int64_t n, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(n) * scale));
}

PastedObjects::PastedObjects(std::shared_ptr<const Dataset> items, PastedOptions options)
    : items_(std::move(items)), options_(std::move(options)) {
  const PastedOptions& o = options_;
  VT_CHECK(items_ != nullptr, "PastedObjects: the items data set is null");
  const auto& names = distractor_names();
  VT_CHECK(std::find(names.begin(), names.end(), o.distractors) != names.end(),
           "PastedObjects: unknown distractors \"{}\"; the names are: {}", o.distractors,
           fmt::join(names, ", "));
  VT_CHECK(std::isfinite(o.min_scale) && o.min_scale > 0,
           "PastedObjects: min_scale must be > 0, got {}", o.min_scale);
  VT_CHECK(std::isfinite(o.max_scale) && o.max_scale >= o.min_scale,
           "PastedObjects: min_scale ({}) must not exceed max_scale ({})", o.min_scale,
           o.max_scale);
  VT_CHECK(o.count >= 0 && o.count <= kMaxFragments,
           "PastedObjects: count (fragments per canvas) must be in [0, {}], got {}", kMaxFragments,
           o.count);
  VT_CHECK(std::isfinite(o.noise) && o.noise >= 0 && o.noise <= 1,
           "PastedObjects: noise (the noise's amplitude) must be in [0, 1], got {}", o.noise);
  VT_CHECK(o.canvas >= 1, "PastedObjects: canvas must be >= 1, got {}", o.canvas);
  VT_CHECK(items_->size() > 0, "PastedObjects: {} holds no items", items_->source());
  const Image first = items_->get(0).image;
  channels_ = first.channels, height_ = first.height, width_ = first.width;
  const int64_t h = scaled_size(height_, o.max_scale), w = scaled_size(width_, o.max_scale);
  VT_CHECK(o.canvas >= h && o.canvas >= w,
           "PastedObjects: canvas {} cannot hold the items of {} ({}x{}) at max_scale {} ({}x{})",
           o.canvas, items_->source(), height_, width_, o.max_scale, h, w);
  VT_CHECK(o.distractors != "fragments" || o.count == 0 || items_->size() >= 2,
           "PastedObjects: fragments come from other items, but {} holds one item (use "
           "distractors \"none\" or \"noise\", or count 0)",
           items_->source());
}

std::string PastedObjects::source() const {
  const PastedOptions& o = options_;
  const std::string what = o.distractors == "fragments" ? fmt::format("{} fragments", o.count)
                           : o.distractors == "noise"   ? fmt::format("noise {}", o.noise)
                                                        : std::string("no distractors");
  return fmt::format("pasted on {}x{} ({}) from {}", o.canvas, o.canvas, what, items_->source());
}

Box PastedObjects::box(int64_t index) const {
  VT_CHECK(index >= 0 && index < size(), "{}: index {} is out of range (size {})", source(), index,
           size());
  Rng rng(options_.seed, 0, index);
  return place(rng, options_, height_, width_).box;
}

Box PastedObjects::tight_box(int64_t index) const {
  const Box b = box(index);
  const Image item = items_->get(index).image;
  VT_CHECK(item.channels == channels_ && item.height == height_ && item.width == width_,
           "{}: item {} is {}x{}x{}, expected {}x{}x{} as item 0", source(), index, item.channels,
           item.height, item.width, channels_, height_, width_);
  const Box t = nonzero_box(resize(item, b.height, b.width, Interpolation::Bilinear, false));
  if (t.empty()) return {};
  return {b.top + t.top, b.left + t.left, t.height, t.width};
}

Example PastedObjects::get(int64_t index) const {
  VT_CHECK(index >= 0 && index < size(), "{}: index {} is out of range (size {})", source(), index,
           size());
  const PastedOptions& o = options_;
  const int64_t n = o.canvas;
  auto read = [&](int64_t i) {
    Example e = items_->get(i);
    VT_CHECK(e.image.channels == channels_ && e.image.height == height_ && e.image.width == width_,
             "{}: item {} is {}x{}x{}, expected {}x{}x{} as item 0", source(), i, e.image.channels,
             e.image.height, e.image.width, channels_, height_, width_);
    return e;
  };

  Rng rng(o.seed, 0, index);
  Example item = read(index);
  const Placement p = place(rng, o, height_, width_);
  const Box& b = p.box;
  Example out;
  out.label = item.label;
  Image& canvas = out.image;
  canvas.channels = channels_, canvas.height = n, canvas.width = n;
  canvas.pixels.assign(static_cast<size_t>(channels_ * n * n), 0.0f);
  const Image scaled = resize(item.image, b.height, b.width, Interpolation::Bilinear, false);
  for (int64_t c = 0; c < channels_; ++c)
    for (int64_t y = 0; y < b.height; ++y)
      for (int64_t x = 0; x < b.width; ++x)
        canvas.at(c, b.top + y, b.left + x) = scaled.at(c, y, x);

  if (o.distractors == "fragments") {
    const int64_t f = std::max<int64_t>(1, std::llround(std::min(b.height, b.width) / 3.0));
    const int64_t positions = n - f + 1;  // per axis; >= 1 as f <= the item's side <= n
    // The starts whose f x f square overlaps the box, per axis: [ylo, yhi], [xlo, xhi].
    const int64_t ylo = std::max<int64_t>(0, b.top - f + 1);
    const int64_t yhi = std::min(positions - 1, b.top + b.height - 1);
    const int64_t xlo = std::max<int64_t>(0, b.left - f + 1);
    const int64_t xhi = std::min(positions - 1, b.left + b.width - 1);
    const int64_t oy = std::max<int64_t>(0, yhi - ylo + 1),
                  ox = std::max<int64_t>(0, xhi - xlo + 1);
    const int64_t allowed = positions * positions - oy * ox;
    for (int64_t k = 0; k < o.count; ++k) {
      int64_t j = rng.below(size() - 1);
      if (j >= index) ++j;
      const Image other = resize(read(j).image, b.height, b.width, Interpolation::Bilinear, false);
      const Box t = nonzero_box(other);
      const auto [cy_lo, cy_hi] = crop_range(t.top, t.top + t.height, t.empty(), f, other.height);
      const auto [cx_lo, cx_hi] = crop_range(t.left, t.left + t.width, t.empty(), f, other.width);
      const int64_t cy = cy_lo + rng.below(cy_hi - cy_lo + 1);
      const int64_t cx = cx_lo + rng.below(cx_hi - cx_lo + 1);
      int64_t r = rng.below(std::max<int64_t>(allowed, 1));
      if (allowed == 0) continue;  // the item leaves no room
      int64_t py = 0, px = 0;
      for (;; ++py) {  // the r-th allowed start in row-major order
        const bool hole = py >= ylo && py <= yhi;
        const int64_t in_row = positions - (hole ? ox : 0);
        if (r < in_row) {
          px = hole && r >= xlo ? r + ox : r;
          break;
        }
        r -= in_row;
      }
      const Image piece = crop(other, cy, cx, f, f);
      for (int64_t c = 0; c < channels_; ++c)
        for (int64_t y = 0; y < f; ++y)
          for (int64_t x = 0; x < f; ++x) {
            float& v = canvas.at(c, py + y, px + x);
            v = std::max(v, piece.at(c, y, x));
          }
    }
  } else if (o.distractors == "noise") {
    const double unit = o.noise * 0x1.0p-32;
    std::optional<Rng> stream;
    for (size_t q = 0; q < canvas.pixels.size(); ++q) {
      if (q % kNoiseWords == 0)
        stream.emplace(o.seed, 1 + static_cast<int64_t>(q / kNoiseWords), index);
      const double v = canvas.pixels[q] + unit * stream->next_u32();
      canvas.pixels[q] = static_cast<float>(std::min(1.0, v));
    }
  }
  return out;
}

}  // namespace vitrine::nn::data
