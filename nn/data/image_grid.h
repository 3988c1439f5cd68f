// torchvision.utils' make_grid and save_image (torchvision 0.14): a batch of images laid out as
// one picture, and that picture written as a PNG file. Any dtype and device in; the values are
// read as float32 on the CPU and the grid is a float32 CPU tensor [C, H', W'].
//
// As torchvision: a [H, W] image is one 1-channel image, a [C, H, W] tensor one image; 1 channel
// becomes 3 (the grey plane repeated); a batch of one image comes back without padding; the grid
// has ceil(B / nrow) rows of min(nrow, B) cells, each image `padding` pixels from its neighbours
// and the border, the gaps pad_value. normalize clamps each value to [lo, hi] (value_range, else
// the min and max of the whole batch, or of each image with scale_each) and maps it to
// (v - lo) / max(hi - lo, 1e-5), so a constant image becomes 0.
// save_image writes round(255 v) clamped to [0, 255] (v * 255 + 0.5, truncated), as torchvision's
// `grid.mul(255).add_(0.5).clamp_(0, 255).to(torch.uint8)`: 3 channels as RGB, 4 as RGBA, 2 as
// grey + alpha (PIL's "LA"). Where Vitrine is stricter than torchvision: an empty tensor, a rank
// other than 2, 3 or 4, nrow < 1, padding < 0 and a value_range with min >= max (torchvision
// divides by zero, copies into the wrong place or maps everything to 0) are errors; save_image
// writes PNG only (the name must end in .png), and refuses more than 4 channels, as PIL does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "autograd/tensor.h"

namespace vitrine {

/// torchvision.utils.make_grid: images [B, C, H, W] (or [C, H, W], or [H, W]) -> one image
/// [3 (or C), H', W'] with nrow images per row, `padding` pixels of pad_value between them.
/// normalize maps value_range (default: the tensor's min and max; per image when scale_each)
/// to [0, 1].
Tensor make_grid(const Tensor& images, int64_t nrow = 8, int64_t padding = 2,
                 bool normalize = false,
                 std::optional<std::pair<double, double>> value_range = std::nullopt,
                 bool scale_each = false, double pad_value = 0.0);

/// torchvision.utils.save_image: make_grid, then * 255 + 0.5, clamp to [0, 255], to uint8, and
/// written as a PNG at path (atomically: a temp file renamed, never a half-written file).
void save_image(const Tensor& images, const std::string& path, int64_t nrow = 8,
                int64_t padding = 2, bool normalize = false,
                std::optional<std::pair<double, double>> value_range = std::nullopt,
                bool scale_each = false, double pad_value = 0.0);

}  // namespace vitrine
