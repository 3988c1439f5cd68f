// CPU memory: 64-byte aligned allocation (large blocks cached for reuse), strided copy with dtype
// conversion, fill, arange.
#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {
struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

template <typename T>
double load(T v) {
  if constexpr (std::is_same_v<T, BF16>)
    return bf16_to_float(v.bits);
  else if constexpr (std::is_same_v<T, F16>)
    return f16_to_float(v.bits);
  else
    return static_cast<double>(v);
}
template <typename T>
T store(double v) {
  if constexpr (std::is_same_v<T, BF16>)
    return BF16{float_to_bf16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, F16>)
    return F16{float_to_f16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(v);
}

/// Calls f.operator()<T>() for every dtype, 16-bit storage types included.
template <typename F>
void dispatch_storage(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      f.template operator()<float>();
      return;
    case DType::Float64:
      f.template operator()<double>();
      return;
    case DType::Int64:
      f.template operator()<int64_t>();
      return;
    case DType::Bool:
      f.template operator()<bool>();
      return;
    case DType::BFloat16:
      f.template operator()<BF16>();
      return;
    case DType::Float16:
      f.template operator()<F16>();
      return;
  }
}
}  // namespace

namespace {
/// Freed blocks of 64 KiB and more, kept for reuse by size class: a training step asks for the
/// same sizes every time, so after the first step it takes them from here, with no mmap/munmap,
/// page faults or zeroing by the kernel (which large malloc blocks cost on every allocation).
/// Size classes are eight per power of two (at most 12.5% rounding). Smaller blocks go straight
/// to malloc, whose own bins serve them well. At most kMaxCached bytes wait here; the rest is
/// freed.
class BlockCache {
 public:
  static constexpr size_t kMinCached = size_t{1} << 16;
  static constexpr size_t kMaxCached = size_t{2} << 30;

  /// The bytes actually allocated for a request of n (n >= kMinCached).
  static size_t size_class(size_t n) {
    size_t p = std::bit_floor(n), step = p / 8;
    return (n + step - 1) / step * step;
  }
  void* take(size_t cls) {
    std::lock_guard lock(mu_);
    auto it = free_.find(cls);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
    return p;
  }
  void give(void* p, size_t cls) {
    {
      std::lock_guard lock(mu_);
      if (cached_ + cls <= kMaxCached) {
        free_[cls].push_back(p);
        cached_ += cls;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

/// Never destroyed: storages freed during static destruction still find it.
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;
  return *cache;
}
}  // namespace

StoragePtr CpuBackend::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  s->nbytes = nbytes;
  s->device = kCPU;
  if (rounded >= BlockCache::kMinCached) {
    const size_t cls = BlockCache::size_class(rounded);
    void* p = block_cache().take(cls);
    if (!p) p = std::aligned_alloc(64, cls);
    VT_CHECK(p != nullptr, "cpu: out of memory allocating {} bytes", nbytes);
    s->data = p;
    s->deleter = [cls](void* q) { block_cache().give(q, cls); };
    return s;
  }
  s->data = std::aligned_alloc(64, rounded);
  VT_CHECK(s->data != nullptr, "cpu: out of memory allocating {} bytes", nbytes);
  s->deleter = [](void* p) { std::free(p); };
  return s;
}

void CpuBackend::copy(const Strided& src, const Strided& dst) {
  VT_ASSERT(src.shape == dst.shape);
  if (src.dtype == dst.dtype && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.data, src.data, src.numel() * dtype_size(src.dtype));
    return;
  }
  Loop<2> loop(dst.shape, {dst.strides, src.strides});
  dispatch_storage(dst.dtype, [&]<typename D>() {
    dispatch_storage(src.dtype, [&]<typename S>() {
      D* d = dst.ptr<D>();
      const S* s = src.ptr<S>();
      loop.run([&](auto off, int64_t n, auto in) {
        D* dp = d + off[0];
        const S* sp = s + off[1];
        if constexpr (std::is_same_v<D, S>) {
          if (in[0] == 1 && in[1] == 1) {  // a contiguous run (a broadcast row, a slice)
            std::memcpy(dp, sp, n * sizeof(D));
            return;
          }
        }
        for (int64_t j = 0; j < n; ++j) {
          if constexpr (std::is_same_v<D, S>)
            dp[j * in[0]] = sp[j * in[1]];
          else
            dp[j * in[0]] = store<D>(load(sp[j * in[1]]));
        }
      });
    });
  });
}

void CpuBackend::to_host(const void* src, void* host_dst, size_t nbytes) {
  std::memcpy(host_dst, src, nbytes);
}
void CpuBackend::from_host(const void* host_src, void* dst, size_t nbytes) {
  std::memcpy(dst, host_src, nbytes);
}

void CpuBackend::fill(const Strided& dst, double value) {
  Loop<1> loop(dst.shape, {dst.strides});
  dispatch_storage(dst.dtype, [&]<typename T>() {
    const T v = store<T>(value);
    T* d = dst.ptr<T>();
    loop.run([&](auto off, int64_t n, auto in) {
      for (int64_t j = 0; j < n; ++j) d[off[0] + j * in[0]] = v;
    });
  });
}

void CpuBackend::arange(const Strided& dst, double start, double step) {
  dispatch_numeric(dst.dtype, "arange", [&]<typename T>() {
    T* d = dst.ptr<T>();
    for (int64_t i = 0; i < dst.numel(); ++i) d[i] = static_cast<T>(start + i * step);
  });
}

Backend* make_cpu_backend() {
  static CpuBackend b;
  return &b;
}

}  // namespace vitrine::cpu

namespace vitrine {
Backend* cpu_backend() { return cpu::make_cpu_backend(); }
}  // namespace vitrine
