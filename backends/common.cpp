// Backend-independent helpers: shapes, errors, devices, 16-bit conversions, the backend registry.
#include <array>
#include <atomic>
#include <cmath>
#include <mutex>

#include "backends/backend.h"
#include "backends/conv_algorithm.h"
#include "backends/env_switch.h"
#include "backends/generator.h"
#include "backends/matmul_precision.h"

namespace vitrine {

void internal_error(const char* cond, const char* file, int line) {
  throw Error(
      fmt::format("internal error (a bug in Vitrine): {} failed at {}:{}", cond, file, line));
}

std::string Dims::str() const { return fmt::format("[{}]", fmt::join(begin(), end(), ", ")); }

Dims contiguous_strides(const Dims& shape) {
  Dims s = Dims::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i) s[i] = s[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  return s;
}

Strided Backend::as_dtype(const Strided& x, DType t, StoragePtr& keep) {
  if (x.dtype == t) return x;
  keep = allocate(static_cast<size_t>(x.numel()) * dtype_size(t));
  Strided y{keep->data, t, x.shape, contiguous_strides(x.shape)};
  copy(x, y);
  return y;
}

namespace {
/// y = act(x), with x and y of one dtype and shape (y may be x): the elementwise ops, SiLU as
/// nn::SiLU computes it (x sigmoid(x)).
void activation(Backend& be, Activation act, const Strided& x, const Strided& y) {
  switch (act) {
    case Activation::GELU:
      return be.unary(UnaryOp::Gelu, x, y);
    case Activation::GELUTanh:
      return be.unary(UnaryOp::GeluTanh, x, y);
    case Activation::ReLU:
      return be.unary(UnaryOp::Relu, x, y);
    case Activation::SiLU: {
      StoragePtr keep = be.allocate(static_cast<size_t>(x.numel()) * dtype_size(x.dtype));
      const Strided s{keep->data, x.dtype, x.shape, contiguous_strides(x.shape)};
      be.unary(UnaryOp::Sigmoid, x, s);
      return be.binary(BinaryOp::Mul, x, s, y);
    }
  }
  VT_ASSERT(!"unknown activation");
}

/// c *= act'(pre), pre of c's dtype and shape.
void activation_grad(Backend& be, Activation act, const Strided& pre, const Strided& c) {
  switch (act) {
    case Activation::GELU:
      return be.binary(BinaryOp::GeluBackward, pre, c, c);
    case Activation::GELUTanh:
      return be.binary(BinaryOp::GeluTanhBackward, pre, c, c);
    case Activation::ReLU:
      return be.binary(BinaryOp::ReluBackward, pre, c, c);
    case Activation::SiLU: {  // silu'(p) = s (1 + p (1 - s)),  s = sigmoid(p)
      const size_t bytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype);
      StoragePtr ks = be.allocate(bytes), kt = be.allocate(bytes);
      const Dims strides = contiguous_strides(c.shape);
      const Strided s{ks->data, c.dtype, c.shape, strides}, t{kt->data, c.dtype, c.shape, strides};
      be.unary(UnaryOp::Sigmoid, pre, s);
      be.unary(UnaryOp::MulScalar, s, t, -1);
      be.unary(UnaryOp::AddScalar, t, t, 1);  // 1 - s
      be.binary(BinaryOp::Mul, pre, t, t);
      be.unary(UnaryOp::AddScalar, t, t, 1);  // 1 + p (1 - s)
      be.binary(BinaryOp::Mul, s, t, t);
      return be.binary(BinaryOp::Mul, c, t, c);
    }
  }
  VT_ASSERT(!"unknown activation");
}
}  // namespace

bool Backend::gemm_fixed_rows(int64_t, int64_t, DType) const { return false; }

void Backend::tree_sum(const Strided& parts) {
  VT_ASSERT(parts.shape.size() == 2 && parts.is_contiguous());
  const int64_t L = parts.shape[0], N = parts.shape[1];
  char* base = static_cast<char*>(parts.data);
  const int64_t esize = static_cast<int64_t>(dtype_size(parts.dtype));
  // One kernel call a level: the partials i = 0, 2s, 4s, ... with i + s < L, as rows 2s apart.
  for (int64_t s = 1; s < L; s *= 2) {
    const int64_t pairs = (L - s + 2 * s - 1) / (2 * s);
    const Strided a{base, parts.dtype, Dims{pairs, N}, Dims{2 * s * N, 1}};
    const Strided b{base + s * N * esize, parts.dtype, Dims{pairs, N}, Dims{2 * s * N, 1}};
    binary(BinaryOp::Add, a, b, a);
  }
}

void Backend::gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                         const GemmEpilogue& ep) {
  if (ep.bias) {
    Strided rows = *ep.bias;
    rows.shape = c.shape;
    rows.strides = Dims{0, 1};
    copy(rows, c);
  }
  gemm(a, b, c, /*accumulate=*/ep.bias != nullptr);
  if (ep.add) binary(BinaryOp::Add, c, *ep.add, c);
  if (ep.gelu_out && ep.gelu_out->dtype == c.dtype) activation(*this, ep.act, c, *ep.gelu_out);
  if (ep.gelu_out && ep.gelu_out->dtype != c.dtype) {  // computed in c's dtype, then rounded
    StoragePtr keep = allocate(static_cast<size_t>(c.numel()) * dtype_size(c.dtype));
    const Strided g{keep->data, c.dtype, c.shape, contiguous_strides(c.shape)};
    activation(*this, ep.act, c, g);
    copy(g, *ep.gelu_out);
  }
  if (ep.gelu_pre) {
    StoragePtr keep;
    activation_grad(*this, ep.act, as_dtype(*ep.gelu_pre, c.dtype, keep), c);
  }
  if (ep.a_row_sums) {
    Strided sums = *ep.a_row_sums;  // as [M, 1], the layout reduce writes
    sums.shape = Dims{a.shape[0], 1};
    sums.strides = Dims{1, 1};
    StoragePtr keep;
    reduce(ReduceOp::Sum, as_dtype(a, sums.dtype, keep), sums);
  }
  if (ep.c_copy) copy(c, *ep.c_copy);
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  int64_t n = std::max(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, as PyTorch
  VT_CHECK(dim >= -n && dim < n,
           "{}: dim {} is out of range for a tensor with {} dims (expected {} to {})", op, dim,
           ndim, -n, n - 1);
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  int n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int64_t da = i < a.size() ? a.back(i) : 1, db = i < b.size() ? b.back(i) : 1;
    VT_CHECK(da == db || da == 1 || db == 1,
             "{}: shapes {} and {} cannot be broadcast (dim {} from the end: {} vs {})", op, a, b,
             i, da, db);
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

bool Strided::is_contiguous() const {
  if (numel() == 0) return true;
  int64_t expect = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return kCPU;
  if (s == "cuda") return {DeviceType::CUDA, 0};
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int idx = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && idx >= 0) return {DeviceType::CUDA, idx};
    } catch (const std::exception&) {
    }
  }
  fail("device: '{}' is not a device (expected cpu, cuda or cuda:N)", s);
}

// ---- 16-bit floats -------------------------------------------------------------------------
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                      // RNE
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {                                               // subnormal or zero
    // value = absf; f16 subnormal unit is 2^-24: round(absf * 2^24) with RNE.
    float a;
    std::memcpy(&a, &absu, 4);
    float scaled = a * 16777216.0f;    // exact (power of two)
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // RNE (may carry into exponent)
  return static_cast<uint16_t>(sign | h);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                         : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- generator and registry ----------------------------------------------------------------
Generator& default_generator() {
  static Generator g(0);
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Backend* cpu_backend();  // backends/cpu/memory.cpp
#ifdef VITRINE_WITH_CUDA
Backend* cuda_backend();  // backends/cuda/cuda_backend.cpp
#endif

namespace {
/// The registry: filled on first use, thread-safely (the data loader's workers allocate tensors
/// from their own threads). CUDA is looked up lazily, once, because it needs a GPU to succeed.
struct Registry {
  std::mutex mutex;
  std::array<Backend*, 2> backends{cpu_backend(), nullptr};
};
Registry& registry() {
  static Registry r;  // C++11 guarantees thread-safe initialisation of function-local statics
  return r;
}
}  // namespace

void register_backend(DeviceType type, Backend* backend) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.backends[static_cast<int>(type)] = backend;
}

bool backend_available(DeviceType type) {
  if (type == DeviceType::CPU) return true;
#ifdef VITRINE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

Backend& backend_for(const Device& device) {
  Registry& r = registry();
  if (device.is_cpu()) return *r.backends[0];  // set at initialisation: no lock on the hot path
  VT_CHECK(device.index == 0,
           "device {}: this build of Vitrine drives one GPU, cuda:0 (select another with "
           "CUDA_VISIBLE_DEVICES)",
           device.str());
  std::lock_guard<std::mutex> lock(r.mutex);
  Backend*& b = r.backends[static_cast<int>(device.type)];
#ifdef VITRINE_WITH_CUDA
  if (!b && device.is_cuda()) b = cuda_backend();
#endif
  VT_CHECK(b != nullptr,
           "device {}: this build of Vitrine has no backend for it (configure with "
           "-DVITRINE_CUDA=ON on a machine with nvcc)",
           device.str());
  return *b;
}

MemoryStats memory_stats(const Device& device) { return backend_for(device).memory_stats(); }
void reset_peak_memory_stats(const Device& device) {
  backend_for(device).reset_peak_memory_stats();
}

namespace {
std::atomic<MatmulPrecision> g_matmul_precision{MatmulPrecision::Highest};
constexpr std::string_view kPrecisionNames[] = {"highest", "high", "medium"};
}  // namespace

void set_float32_matmul_precision(std::string_view precision) {
  for (int i = 0; i < 3; ++i) {
    if (precision == kPrecisionNames[i]) {
      g_matmul_precision = static_cast<MatmulPrecision>(i);
      return;
    }
  }
  fail("set_float32_matmul_precision: '{}' is not a precision (expected highest, high or medium)",
       precision);
}
std::string get_float32_matmul_precision() {
  return std::string(kPrecisionNames[static_cast<int>(g_matmul_precision.load())]);
}
MatmulPrecision float32_matmul_precision() { return g_matmul_precision; }
const char* float32_matmul_precision_for(std::string_view mode) {
  return mode == "bf16" ? "medium" : mode == "tf32" ? "high" : "highest";
}

namespace {
constexpr std::string_view kConvNames[] = {"auto", "batched", "per-image", "implicit", "direct"};
ConvAlgorithm conv_from(std::string_view name, const char* where) {
  for (int i = 0; i < 5; ++i)
    if (name == kConvNames[i]) return static_cast<ConvAlgorithm>(i);
  fail(
      "{}: '{}' is not a convolution algorithm (expected auto, direct, implicit, batched or "
      "per-image)",
      where, name);
}
std::atomic<ConvAlgorithm>& conv_setting() {
  static std::atomic<ConvAlgorithm> a{
      [] { return conv_from(env_value("VITRINE_CONV", "auto"), "VITRINE_CONV"); }()};
  return a;
}
}  // namespace

void set_conv_algorithm(std::string_view name) {
  conv_setting() = conv_from(name, "set_conv_algorithm");
}
void set_conv_algorithm(ConvAlgorithm a) { conv_setting() = a; }
ConvAlgorithm conv_algorithm() { return conv_setting(); }

namespace {
thread_local bool conv_gradient = false;
}  // namespace
bool conv_for_gradient() { return conv_gradient; }
ConvForGradient::ConvForGradient(bool on) : before(conv_gradient) { conv_gradient = on; }
ConvForGradient::~ConvForGradient() { conv_gradient = before; }

}  // namespace vitrine
