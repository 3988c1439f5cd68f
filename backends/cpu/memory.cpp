// CPU memory: 64-byte aligned allocation (large blocks cached for reuse), strided copy with dtype
// conversion, fill, arange.
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/block_cache.h"
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
/// Blocks of 64 KiB to 32 MiB are cached for reuse (backends/block_cache.h); smaller ones go
/// straight to malloc, whose own bins serve them well, and larger ones back to the system when
/// freed (map_large: mappings of their own in huge pages), as PyTorch's CPU allocator, which
/// caches none. A cached
/// block serves only its own size class, so cached large blocks add up: a GPT-2 step's logits,
/// their gradient and the embedding's gradient (50 to 200 MB each, in several classes) kept 700
/// MB of RSS beyond what tensors held. Faulting a 200 MB block in again costs tens of
/// milliseconds, against seconds of the computation that fills it. (At 64 MiB, GPT-2's T = 64
/// step kept two 56 MB logits blocks: 962 MiB of RSS against PyTorch's 991, 864 at 32.)
constexpr size_t kMinCached = size_t{1} << 16;
constexpr size_t kMaxCachedBlock = size_t{32} << 20;
constexpr size_t kMaxCached = size_t{2} << 30;

/// A block over kMaxCachedBlock: its own mapping of whole 2 MiB pages, aligned to them, and
/// marked for transparent huge pages (MADV_HUGEPAGE; a no-op where the kernel has them off). Such
/// a block is freed to the system and faulted in again at its next use, every step for GPT-2's
/// logits: in 4 KiB pages that was a fifth of a T = 64 training step on a Zen 5 VM (exc_page_fault
/// under perf), in 2 MiB pages 512 times fewer faults. Returns nullptr when the system refuses;
/// `length` is what to munmap.
void* map_large(size_t bytes, size_t& length) {
  constexpr size_t kHuge = size_t{2} << 20;
  length = (bytes + kHuge - 1) / kHuge * kHuge;
  const size_t span = length + kHuge;  // room to align the start
  void* base = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const auto b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t a = (b + kHuge - 1) & ~(kHuge - 1);
  if (a > b) munmap(base, a - b);
  if (const size_t tail = span - (a - b) - length; tail > 0)
    munmap(reinterpret_cast<void*>(a + length), tail);
  void* p = reinterpret_cast<void*>(a);
  madvise(p, length, MADV_HUGEPAGE);
  return p;
}

/// Never destroyed: storages freed during static destruction still find it.
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache(kMaxCached, std::free);
  return *cache;
}
/// The CPU allocator's counters (never destroyed, as the cache).
MemoryCounter& counter() {
  static MemoryCounter* c = new MemoryCounter;
  return *c;
}
}  // namespace

StoragePtr CpuBackend::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  s->nbytes = nbytes;
  s->device = kCPU;
  if (rounded >= kMinCached && rounded <= kMaxCachedBlock) {
    const size_t cls = BlockCache::size_class(rounded);
    void* p = block_cache().take(cls);
    if (!p) p = std::aligned_alloc(64, cls);
    VT_CHECK(p != nullptr, "cpu: out of memory allocating {} bytes", nbytes);
    s->data = p;
    counter().add(cls);
    s->deleter = [cls](void* q) {
      counter().sub(cls);
      block_cache().give(q, cls);
    };
    return s;
  }
  if (rounded > kMaxCachedBlock) {
    size_t length = 0;
    s->data = map_large(rounded, length);
    VT_CHECK(s->data != nullptr, "cpu: out of memory allocating {} bytes", nbytes);
    counter().add(rounded);
    s->deleter = [rounded, length](void* p) {
      counter().sub(rounded);
      munmap(p, length);
    };
    return s;
  }
  s->data = std::aligned_alloc(64, rounded);
  VT_CHECK(s->data != nullptr, "cpu: out of memory allocating {} bytes", nbytes);
  counter().add(rounded);
  s->deleter = [rounded](void* p) {
    counter().sub(rounded);
    std::free(p);
  };
  return s;
}

MemoryStats CpuBackend::memory_stats() {
  return {counter().current(), counter().peak(), block_cache().cached_bytes()};
}
void CpuBackend::reset_peak_memory_stats() { counter().reset_peak(); }

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
