// Max pooling's argmax on the CPU (backend.h; the op is ops/pool.cpp, which gathers the values at
// these indices, so that the gradient is gather's: scatter_add onto the maxima). x [B, C, H, W]
// contiguous, indices int64 [B, C, OH, OW]; one (b, c) plane per task, each window scanned in
// row-major order with PyTorch's rule (a value replaces the maximum when greater, or NaN).
#include <cmath>

#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

bool CpuBackend::max_pool2d_indices(const Strided& x, const Strided& indices,
                                    const ConvGeometry& g) {
  VT_ASSERT(x.shape.size() == 4 && x.is_contiguous() && indices.is_contiguous());
  const int64_t planes = x.shape[0] * x.shape[1], HW = g.height * g.width;
  const int64_t L = g.out_h * g.out_w;
  VT_ASSERT(indices.numel() == planes * L && indices.dtype == DType::Int64);
  dispatch_float(x.dtype, "max_pool2d", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    int64_t* ip = indices.ptr<int64_t>();
    parallel_for(planes, L * g.kernel_h * g.kernel_w, [&](int64_t p) {
      const T* plane = xp + p * HW;
      int64_t* out = ip + p * L;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        const int64_t h0 = oh * g.stride_h - g.pad_h;
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t w0 = ow * g.stride_w - g.pad_w;
          int64_t best = -1;
          T m = T(0);
          for (int64_t i = 0; i < g.kernel_h; ++i) {
            const int64_t h = h0 + i * g.dilation_h;
            if (h < 0 || h >= g.height) continue;
            for (int64_t j = 0; j < g.kernel_w; ++j) {
              const int64_t w = w0 + j * g.dilation_w;
              if (w < 0 || w >= g.width) continue;
              const T v = plane[h * g.width + w];
              if (best < 0 || v > m || std::isnan(v)) {
                m = v;
                best = h * g.width + w;
              }
            }
          }
          out[oh * g.out_w + ow] = best;
        }
      }
    });
  });
  return true;
}

}  // namespace vitrine::cpu
