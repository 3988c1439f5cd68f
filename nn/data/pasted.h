// PastedObjects: a localisation data set made from a classification one. Example i is a blank
// canvas x canvas image with item i of a base data set (Fashion-MNIST, say) pasted at a random
// place and scale, with distractors around it; the label is item i's, and box(i) says where the
// item is, so an explanation map can be scored (the pointing game: is the map's maximum inside
// the box?).
//
// Items are expected as the readers give them: values in [0, 1], background 0. Example i is a
// pure function of (options, i): every random number comes from Rng(seed, 0, i) (transforms.h),
// in this order, a fixed number of draws each:
//   1. scale  = min_scale + (max_scale - min_scale) * uniform()
//      the item (H x W) becomes h x w = scaled_size(H, scale) x scaled_size(W, scale)
//   2. top    = below(canvas - h + 1), left = below(canvas - w + 1): box(i) = (top, left, h, w)
//   3. "fragments" only, for each of the `count` fragments, side f = max(1, round(min(h, w) / 3)):
//      the source item  j = below(size - 1), skipping i (j >= i becomes j + 1), resized by the
//                           same scale;
//      the crop          cy = lo_y + below(hi_y - lo_y + 1), cx likewise: an f x f window that
//                           lies inside the source's non-zero bounding box when that box is at
//                           least f on the side, and covers it when it is smaller (so fragments
//                           show texture, not background); [lo, hi] clamped to the image;
//      the place         below(max(n, 1)) picks one of the n positions (row-major) where the
//                           f x f square does not overlap box(i); n = 0 (the item fills the
//                           canvas) skips the fragment. Exactly uniform over the allowed places,
//                           no retries.
//      Fragments are combined with max(), so they never erase each other (nor the item, which
//      they never touch).
// "noise" adds noise * w / 2^32 to canvas value p (CHW order, p = 0, 1, ...), clamped to 1, where
// w is the 32-bit word (p mod 1024) of Rng(seed, 1 + p / 1024, i): a 64x64 canvas needs 4096
// words, more than one per-example Rng holds (1024), so the noise has streams of its own.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/data/dataset.h"

namespace vitrine::nn::data {

/// A rectangle of canvas pixels: rows [top, top + height), columns [left, left + width).
struct Box {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool contains(int64_t y, int64_t x) const {
    return y >= top && y < top + height && x >= left && x < left + width;
  }
  bool empty() const { return height <= 0 || width <= 0; }
  bool operator==(const Box&) const = default;
};

struct PastedOptions {
  /// The side of the square canvas; it must hold an item at max_scale.
  int64_t canvas = 64;
  /// The item is resized (bilinear, transforms' resize) by a factor drawn uniformly in
  /// [min_scale, max_scale]; 0 < min_scale <= max_scale.
  double min_scale = 1.0, max_scale = 1.5;
  /// "none" (the item on black), "noise" (uniform noise in [0, noise] over the whole canvas) or
  /// "fragments" (`count` square pieces of other items, outside the item's box).
  std::string distractors = "fragments";
  /// Fragments per canvas, 0 to kMaxFragments.
  int64_t count = 3;
  /// The noise amplitude, in [0, 1].
  double noise = 0.1;
  /// The key of every random number (see the file comment).
  uint64_t seed = 0;
};

/// The bounding box of an image's pixels above 0 in any channel (an item on a black background:
/// the item's extent); an empty Box when there are none.
Box nonzero_box(const Image& image);

/// The names PastedOptions::distractors takes.
const std::vector<std::string>& distractor_names();
/// The most fragments a canvas takes (what one per-example Rng can draw: 8 words each).
constexpr int64_t kMaxFragments = 100;
/// The size of a side of n pixels scaled by s: max(1, round(n * s)).
int64_t scaled_size(int64_t n, double scale);

class PastedObjects : public Dataset {
 public:
  /// Example i of this data set is item i of `items` pasted (see the file comment); its size and
  /// labels are the items'. Reads item 0 to learn the items' shape, which every item must have.
  /// Errors (vitrine::Error, naming the option and the value): a null or empty items set, a
  /// canvas smaller than an item at max_scale, min_scale <= 0 or above max_scale, an unknown
  /// distractors name, count outside [0, kMaxFragments], noise outside [0, 1], fragments with
  /// fewer than two items.
  PastedObjects(std::shared_ptr<const Dataset> items, PastedOptions options = {});

  int64_t size() const override { return items_->size(); }
  /// A channels x canvas x canvas image (the items' channels) and item i's label. Thread-safe.
  Example get(int64_t index) const override;
  std::vector<std::string> classes() const override { return items_->classes(); }
  /// "pasted on 64x64 (fragments) from <the items' source>".
  std::string source() const override;

  /// Where item i is on its canvas: the whole scaled item (h x w, background included). Cheap:
  /// two draws, no image is decoded.
  Box box(int64_t index) const;
  /// The bounding box of the scaled item's non-zero pixels (any channel) on the canvas: inside
  /// box(i), tighter for items with a black border (every Fashion-MNIST item). An empty Box for
  /// an all-zero item. Decodes and resizes item i (as get does, without the distractors).
  Box tight_box(int64_t index) const;

  const PastedOptions& options() const { return options_; }
  const std::shared_ptr<const Dataset>& items() const { return items_; }
  /// The items' shape (channels, height, width), before scaling.
  int64_t item_channels() const { return channels_; }
  int64_t item_height() const { return height_; }
  int64_t item_width() const { return width_; }

 private:
  std::shared_ptr<const Dataset> items_;
  PastedOptions options_;
  int64_t channels_ = 0, height_ = 0, width_ = 0;
};

}  // namespace vitrine::nn::data
