// make_grid and save_image as torchvision.utils' (see image_grid.h). The work is a few loops over
// float32 values on the CPU: images [B, C, H, W] contiguous, the grid [C, H', W'].
#include "nn/data/image_grid.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "autograd/grad_mode.h"
#include "backends/checked.h"
#include "backends/error.h"
#include "nn/atomic_write.h"
#include "nn/data/png_encode.h"

namespace vitrine {

namespace {

/// make_grid's work; `fn` names the public function in errors (make_grid or save_image).
Tensor grid_of(const Tensor& images, int64_t nrow, int64_t padding, bool normalize,
               std::optional<std::pair<double, double>> value_range, bool scale_each,
               double pad_value, const char* fn) {
  VT_CHECK(images.defined(), "{}: the images tensor is undefined", fn);
  VT_CHECK(images.dim() >= 2 && images.dim() <= 4,
           "{}: images must be [B, C, H, W], [C, H, W] or [H, W], got shape {} ({} dims)", fn,
           images.shape(), images.dim());
  VT_CHECK(images.numel() > 0,
           "{}: images of shape {} hold no values (expected at least one image of at least 1 x 1 "
           "pixels)",
           fn, images.shape());
  VT_CHECK(nrow >= 1, "{}: nrow (images per row) must be at least 1, got {}", fn, nrow);
  VT_CHECK(padding >= 0, "{}: padding must be at least 0, got {}", fn, padding);
  if (value_range) {
    const double lo = value_range->first, hi = value_range->second;
    VT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi,
             "{}: value_range ({}, {}) must be two finite numbers with min < max", fn, lo, hi);
  }

  // [H, W] -> [1, H, W] -> [1, 1, H, W]; [C, H, W] -> [1, C, H, W].
  const Dims& s = images.shape();
  const int64_t b = images.dim() == 4 ? s[0] : 1;
  const int64_t c_in = images.dim() >= 3 ? s[images.dim() - 3] : 1;
  const int64_t h = s[images.dim() - 2], w = s[images.dim() - 1];
  const int64_t c = c_in == 1 ? 3 : c_in;  // one grey plane is shown as RGB
  const int64_t plane = h * w;

  NoGradGuard no_grad;
  const Tensor in = images.detach().to(kCPU).to(kFloat32).contiguous();
  const float* src = in.data<float>();

  // x[k]: image k's C planes, the grey plane repeated when it has one.
  std::vector<float> x(static_cast<size_t>(b * c * plane));
  for (int64_t k = 0; k < b; ++k)
    for (int64_t ch = 0; ch < c; ++ch)
      std::copy_n(src + (k * c_in + (c_in == 1 ? 0 : ch)) * plane, plane,
                  x.begin() + (k * c + ch) * plane);

  if (normalize) {
    // torchvision's norm_ip in float32: clamp_(lo, hi), sub_(lo), div_(max(hi - lo, 1e-5)),
    // over the whole batch or (scale_each) one image at a time.
    const int64_t per = scale_each ? c * plane : b * c * plane;
    for (int64_t start = 0; start < b * c * plane; start += per) {
      float* v = x.data() + start;
      double lo = 0, hi = 0;
      if (value_range) {
        lo = value_range->first;
        hi = value_range->second;
      } else {
        const auto mm = std::minmax_element(v, v + per);
        lo = *mm.first;
        hi = *mm.second;
      }
      const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
      const float d = static_cast<float>(std::max(hi - lo, 1e-5));
      for (int64_t i = 0; i < per; ++i) v[i] = (std::min(std::max(v[i], lo_f), hi_f) - lo_f) / d;
    }
  }

  if (b == 1) {  // torchvision returns a single image as it is, without padding
    Tensor out = Tensor::empty({c, h, w}, kFloat32, kCPU);
    std::copy(x.begin(), x.end(), out.data<float>());
    return out;
  }

  const int64_t xmaps = std::min(nrow, b), ymaps = (b + xmaps - 1) / xmaps;
  const std::string what = fmt::format("{}: the grid of {} images with padding {}", fn, b, padding);
  const int64_t cell_h = checked_add(h, padding, what), cell_w = checked_add(w, padding, what);
  const int64_t grid_h = checked_add(checked_mul(cell_h, ymaps, what), padding, what);
  const int64_t grid_w = checked_add(checked_mul(cell_w, xmaps, what), padding, what);
  const Dims shape{c, grid_h, grid_w};
  checked_numel(shape, what);
  Tensor grid = Tensor::empty(shape, kFloat32, kCPU);
  float* g = grid.data<float>();
  std::fill_n(g, grid.numel(), static_cast<float>(pad_value));
  for (int64_t k = 0; k < b; ++k) {
    const int64_t y0 = (k / xmaps) * cell_h + padding, x0 = (k % xmaps) * cell_w + padding;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < h; ++r)
        std::copy_n(x.begin() + ((k * c + ch) * h + r) * w, w,
                    g + (ch * grid_h + y0 + r) * grid_w + x0);
  }
  return grid;
}

}  // namespace

Tensor make_grid(const Tensor& images, int64_t nrow, int64_t padding, bool normalize,
                 std::optional<std::pair<double, double>> value_range, bool scale_each,
                 double pad_value) {
  return grid_of(images, nrow, padding, normalize, value_range, scale_each, pad_value, "make_grid");
}

void save_image(const Tensor& images, const std::string& path, int64_t nrow, int64_t padding,
                bool normalize, std::optional<std::pair<double, double>> value_range,
                bool scale_each, double pad_value) {
  namespace fs = std::filesystem;
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  VT_CHECK(ext == ".png",
           "save_image: \"{}\": only PNG files are written (expected a name ending in .png, got "
           "\"{}\")",
           path, ext);
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  VT_CHECK(dir.empty() || fs::is_directory(dir, ec),
           "save_image: cannot write \"{}\": the folder \"{}\" does not exist", path, dir.string());

  const Tensor grid =
      grid_of(images, nrow, padding, normalize, value_range, scale_each, pad_value, "save_image");
  const int64_t c = grid.size(0), h = grid.size(1), w = grid.size(2);
  VT_CHECK(c >= 2 && c <= 4,
           "save_image: \"{}\": a grid of {} channels cannot be written as PNG (expected 1 or 3, "
           "written as RGB, 4 as RGBA or 2 as grey + alpha, as torchvision writes them)",
           path, c);

  // torchvision: grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to(torch.uint8), in
  // float32; the conversion truncates (a NaN, which clamp keeps, gives 0).
  const float* g = grid.data<float>();
  std::vector<uint8_t> hwc(static_cast<size_t>(c * h * w));
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < h * w; ++i) {
      float v = g[ch * h * w + i] * 255.0f;  // two roundings, as torch's two ops (no FMA)
      v += 0.5f;
      hwc[i * c + ch] = std::isnan(v) ? 0 : static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
  const std::string what = fmt::format("save_image: \"{}\"", path);
  const std::string png = encode_png(hwc.data(), w, h, static_cast<int>(c), what);
  try {
    write_file_atomically(path, png);
  } catch (const Error& e) {
    fail("save_image: {}", e.what());
  }
}

}  // namespace vitrine
