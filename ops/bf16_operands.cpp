// bfloat16 operands for linear layers on CUDA under matmul precision "medium", as PyTorch's
// autocast: a product's float32 inputs are rounded to bfloat16 once, where they are made, and
// the copy is what the backward reads too; a weight is rounded once per optimizer step (autocast
// keeps such casts for the forward; here they are kept per version of the weight, so that
// several forwards before a step, gradient accumulation, share one).
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "backends/gpu_paths.h"
#include "backends/matmul_precision.h"
#include "ops/helpers.h"

namespace vitrine::ops::detail {

namespace {
/// Opt-in until a GPU run passes it (GpuPath::Bf16Operands: VITRINE_BF16_OPERANDS=1 or
/// set_gpu_path_enabled).
bool enabled() { return gpu_path_enabled(GpuPath::Bf16Operands); }

/// A weight's bfloat16 copy and what it was made from: the storage (weakly, so that a freed
/// weight's entry never matches a new tensor at the same address), its version, and the view.
struct Cached {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
  int64_t offset = 0;
  Dims shape, strides;
  Tensor copy;
};

std::atomic<bool> on_cpu{false};
}  // namespace

void set_bf16_operands_on_cpu(bool on) { on_cpu = on; }

bool bf16_operands(const Tensor& x) {
  return x.dtype() == kFloat32 && (x.device().type == DeviceType::CUDA || on_cpu) &&
         float32_matmul_precision() == MatmulPrecision::Medium && enabled();
}

Tensor bf16_copy(const Tensor& x) { return to_dtype(x.detach(), kBFloat16); }

Tensor bf16_weight(const Tensor& w) {
  static std::mutex mu;
  static std::unordered_map<const Storage*, Cached> cache;
  const std::shared_ptr<Storage>& st = w.impl().storage;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(st.get());
  if (it != cache.end()) {
    const Cached& c = it->second;
    if (c.storage.lock() == st && c.version == w.version() && c.offset == w.offset() &&
        c.shape == w.shape() && c.strides == w.strides())
      return c.copy;
  }
  // Entries of weights that are gone are dropped as new ones come.
  for (auto e = cache.begin(); e != cache.end();)
    e = e->second.storage.expired() ? cache.erase(e) : std::next(e);
  Cached c{st, w.version(), w.offset(), w.shape(), w.strides(), bf16_copy(w)};
  Tensor copy = c.copy;
  cache[st.get()] = std::move(c);
  return copy;
}

}  // namespace vitrine::ops::detail
