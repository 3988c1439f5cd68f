// CUDA elementwise kernels: strided copy with dtype conversion (16-bit types included), fill,
// arange, the Philox4x32-10 random numbers (uniform, normal, randint), unary ops (with scalar
// parameters alpha/beta), binary ops with broadcast strides (comparisons write bool), and where.
// Semantics, accepted dtypes and floating-point sequences are those of the CPU reference
// (backends/cpu/memory.cpp, random.cpp, elementwise.cpp; the 16-bit conversions and Philox of
// backends/common.cpp and backends/generator.h):
//   - every kernel is one grid-stride loop over the flat (row-major) index i of the output; an
//     operand's element is at View::offset(i), or at i itself when it is contiguous, and a call
//     whose operands are all contiguous runs a version of the kernel without any offset math;
//   - what the CPU computes with IEEE operations only matches it bit for bit: copy, fill,
//     arange, uniform, randint; neg, abs, sign, relu, clamp, add/mul scalar, sqrt, rsqrt; add,
//     sub, mul, div, maximum, minimum, the comparisons; where. Multiply-adds are written with the
//     _rn intrinsics (fadd, fmul below), which nvcc never contracts into an fma the CPU lacks,
//     and / and sqrt are IEEE-rounded (nvcc's default -prec-div=true, -prec-sqrt=true);
//   - ops through exp, log, erf, tanh, pow, cos follow the CPU's formula step by step, in the
//     same precision (float math for float32, double for float64 and for Box-Muller), with
//     CUDA's libm in place of the host's: they agree to a few ulp. The CPU's float32 GELU and its
//     backward use the polynomial approximations of backends/cpu/simd.h (errors below 5e-7);
//     here they use erff/expf, the exact formula.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/dispatch.cuh"
#include "backends/cuda/kernels.cuh"
#include "backends/philox.h"

namespace vitrine::cuda {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluC = 0.044715;
constexpr double kPi = 3.14159265358979323846;  // M_PI

// ---- IEEE operations, rounded once each, never contracted ------------------------------------
__device__ inline float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double fadd(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float fsub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double fsub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double fmul(double a, double b) { return __dmul_rn(a, b); }

// ---- libm in the operand's precision (float math for float32, as std:: overloads pick) -------
namespace fm {
__device__ inline float exp(float x) { return ::expf(x); }
__device__ inline double exp(double x) { return ::exp(x); }
__device__ inline float log(float x) { return ::logf(x); }
__device__ inline double log(double x) { return ::log(x); }
__device__ inline float sqrt(float x) { return ::sqrtf(x); }
__device__ inline double sqrt(double x) { return ::sqrt(x); }
__device__ inline float tanh(float x) { return ::tanhf(x); }
__device__ inline double tanh(double x) { return ::tanh(x); }
__device__ inline float erf(float x) { return ::erff(x); }
__device__ inline double erf(double x) { return ::erf(x); }
__device__ inline float pow(float x, float y) { return ::powf(x, y); }
__device__ inline double pow(double x, double y) { return ::pow(x, y); }
__device__ inline float log1p(float x) { return ::log1pf(x); }
__device__ inline double log1p(double x) { return ::log1p(x); }
__device__ inline float expm1(float x) { return ::expm1f(x); }
__device__ inline double expm1(double x) { return ::expm1(x); }
__device__ inline float sin(float x) { return ::sinf(x); }
__device__ inline double sin(double x) { return ::sin(x); }
__device__ inline float cos(float x) { return ::cosf(x); }
__device__ inline double cos(double x) { return ::cos(x); }
}  // namespace fm

// ---- 16-bit floats: the bit logic of backends/common.cpp ------------------------------------
struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

__host__ __device__ inline uint32_t bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
__host__ __device__ inline float float_of(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
__host__ __device__ inline uint16_t float_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                      // RNE
  return static_cast<uint16_t>(u >> 16);
}

__host__ __device__ inline float bf16_to_float(uint16_t h) {
  return float_of(static_cast<uint32_t>(h) << 16);
}

/// float -> float16, round to nearest even (subnormals included); overflow -> inf, NaN -> NaN.
__host__ __device__ inline uint16_t float_to_f16(float f) {
  uint32_t u = bits_of(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {                                               // subnormal or zero
    // value = absf; f16 subnormal unit is 2^-24: round(absf * 2^24) with RNE.
    float scaled = float_of(absu) * 16777216.0f;  // exact (power of two)
    float r = nearbyintf(scaled);                 // nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // RNE (may carry into exponent)
  return static_cast<uint16_t>(sign | h);
}

__host__ __device__ inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // subnormal or zero: mant * 2^-24, exact (the CPU's ldexp)
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return float_of(bits_of(f) | sign);
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                         : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  return float_of(u);
}

/// An element as double (the CPU's load: 16-bit types through float).
template <typename T>
__host__ __device__ inline double load(T v) {
  if constexpr (std::is_same_v<T, BF16>)
    return bf16_to_float(v.bits);
  else if constexpr (std::is_same_v<T, F16>)
    return f16_to_float(v.bits);
  else
    return static_cast<double>(v);
}
/// A double as an element (the CPU's store: 16-bit types through float, bool as v != 0).
template <typename T>
__host__ __device__ inline T store(double v) {
  if constexpr (std::is_same_v<T, BF16>)
    return BF16{float_to_bf16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, F16>)
    return F16{float_to_f16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(v);
}

// ---- dtype dispatch (host) --------------------------------------------------------------------
constexpr size_t dtype_size(Dt t) {
  switch (t) {
    case Dt::F32:
      return 4;
    case Dt::F64:
    case Dt::I64:
      return 8;
    case Dt::Bool:
      return 1;
    case Dt::BF16:
    case Dt::F16:
      return 2;
  }
  return 0;
}

/// f.operator()<T>() for every dtype, 16-bit storage types included.
template <typename F>
cudaError_t dispatch_storage(Dt t, F&& f) {
  switch (t) {
    case Dt::F32:
      return f.template operator()<float>();
    case Dt::F64:
      return f.template operator()<double>();
    case Dt::I64:
      return f.template operator()<int64_t>();
    case Dt::Bool:
      return f.template operator()<bool>();
    case Dt::BF16:
      return f.template operator()<BF16>();
    case Dt::F16:
      return f.template operator()<F16>();
  }
  return cudaErrorInvalidValue;
}

// ---- operands and the two loops --------------------------------------------------------------

/// An operand of element type T: its view and whether it is contiguous (element at flat index).
template <typename T>
struct Arg {
  View v;
  bool contig;
  template <bool AllContig>
  __device__ int64_t at(int64_t i) const {
    if constexpr (AllContig)
      return i;
    else
      return contig ? i : v.offset(i);
  }
  template <bool AllContig>
  __device__ T load(int64_t i) const {
    return static_cast<const T*>(v.data)[at<AllContig>(i)];
  }
  template <bool AllContig>
  __device__ void store(int64_t i, T x) const {
    static_cast<T*>(v.data)[at<AllContig>(i)] = x;
  }
};

template <typename T>
Arg<T> arg(const View& v) {
  return {v, v.contiguous()};
}

/// y[i] = f(x[i]...) for flat index i < n.   y, x...: the same shape, any strides
template <bool AllContig, typename F, typename TY, typename... TX>
__global__ void map_kernel(F f, int64_t n, Arg<TY> y, Arg<TX>... x) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y.template store<AllContig>(i, f(x.template load<AllContig>(i)...));
}

template <typename F, typename TY, typename... TX>
cudaError_t launch_map(F f, int64_t n, cudaStream_t stream, Arg<TY> y, Arg<TX>... x) {
  const bool all = y.contig && (x.contig && ...);
  if (all)
    map_kernel<true><<<blocks_for(n), kThreads, 0, stream>>>(f, n, y, x...);
  else
    map_kernel<false><<<blocks_for(n), kThreads, 0, stream>>>(f, n, y, x...);
  return cudaGetLastError();
}

/// y[i] = f(i) for flat index i < n.   y: any strides
template <bool Contig, typename F, typename T>
__global__ void generate_kernel(F f, int64_t n, Arg<T> y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y.template store<Contig>(i, f(i));
}

template <typename F, typename T>
cudaError_t launch_generate(F f, int64_t n, cudaStream_t stream, Arg<T> y) {
  if (y.contig)
    generate_kernel<true><<<blocks_for(n), kThreads, 0, stream>>>(f, n, y);
  else
    generate_kernel<false><<<blocks_for(n), kThreads, 0, stream>>>(f, n, y);
  return cudaGetLastError();
}

// ---- memory ----------------------------------------------------------------------------------

/// S -> D through double, as the CPU converts (same type: the element as it is).
template <typename D, typename S>
struct Convert {
  __device__ D operator()(S x) const {
    if constexpr (std::is_same_v<D, S>)
      return x;
    else
      return store<D>(load(x));
  }
};

template <typename T>
struct FillFn {
  T value;
  __device__ T operator()(int64_t) const { return value; }
};

/// start + i * step in double, then cast (int64: truncation), as the CPU.
template <typename T>
struct ArangeFn {
  double start, step;
  __device__ T operator()(int64_t i) const {
    return static_cast<T>(fadd(start, fmul(static_cast<double>(i), step)));
  }
};

// ---- random numbers --------------------------------------------------------------------------

/// 53 random bits from words (hi, lo), as a double in [0, 2^53).
__device__ inline double bits53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 32 | lo) >> 11);
}

/// lo + span * u, u in [0, 1): float32 from the top 24 bits of word 0, float64 from 53 bits of
/// words 0-1.
template <typename T>
struct UniformFn {
  uint64_t seed, offset;
  double lo, span;  // span = hi - lo
  __device__ T operator()(int64_t i) const {
    const PhiloxWords r = philox_words(offset + static_cast<uint64_t>(i), seed);
    double u;
    if constexpr (std::is_same_v<T, float>)
      u = static_cast<float>(r.w[0] >> 8) * (1.0f / 16777216.0f);
    else
      u = bits53(r.w[0], r.w[1]) * (1.0 / 9007199254740992.0);
    return static_cast<T>(fadd(lo, fmul(span, u)));
  }
};

/// mean + stddev * z, z by Box-Muller (cosine branch) in double: u1 in (0, 1] from words 0-1, u2
/// in [0, 1) from words 2-3.
template <typename T>
struct NormalFn {
  uint64_t seed, offset;
  double mean, stddev;
  __device__ T operator()(int64_t i) const {
    const PhiloxWords r = philox_words(offset + static_cast<uint64_t>(i), seed);
    const double u1 = fmul(fadd(bits53(r.w[0], r.w[1]), 1.0), 1.0 / 9007199254740992.0);
    const double u2 = fmul(bits53(r.w[2], r.w[3]), 1.0 / 9007199254740992.0);
    const double z = fmul(::sqrt(fmul(-2.0, ::log(u1))), ::cos(fmul(2.0 * kPi, u2)));
    return static_cast<T>(fadd(mean, fmul(stddev, z)));
  }
};

/// lo + (64 bits of words 0-1) mod range (range = hi - lo > 0), wrapping as int64.
struct RandintFn {
  uint64_t seed, offset, lo, range;
  __device__ int64_t operator()(int64_t i) const {
    const PhiloxWords r = philox_words(offset + static_cast<uint64_t>(i), seed);
    const uint64_t x = static_cast<uint64_t>(r.w[0]) << 32 | r.w[1];
    return static_cast<int64_t>(lo + x % range);
  }
};

// ---- unary -----------------------------------------------------------------------------------

/// Whether the CPU computes op on T: everything on float32/float64, the sign-and-scale ops on
/// int64.
template <Unary Op, typename T>
constexpr bool unary_supported() {
  if constexpr (std::is_floating_point_v<T>)
    return true;
  else if constexpr (std::is_same_v<T, int64_t>)
    return Op == Unary::Neg || Op == Unary::Abs || Op == Unary::Sign || Op == Unary::AddScalar ||
           Op == Unary::MulScalar || Op == Unary::Clamp;
  else
    return false;
}

/// y = op(x), the CPU's unary_value (alpha, beta already cast to T).
template <Unary Op, typename T>
struct UnaryFn {
  T alpha, beta;
  __device__ T operator()(T x) const {
    if constexpr (Op == Unary::Neg) {
      return -x;
    } else if constexpr (Op == Unary::Abs) {
      return x < 0 ? -x : x;  // -0 stays -0, NaN stays NaN
    } else if constexpr (Op == Unary::Sign) {
      return static_cast<T>((x > 0) - (x < 0));  // NaN -> 0
    } else if constexpr (Op == Unary::AddScalar) {
      return x + alpha;
    } else if constexpr (Op == Unary::MulScalar) {
      return x * alpha;
    } else if constexpr (Op == Unary::Clamp) {
      return x < alpha ? alpha : (x > beta ? beta : x);  // NaN passes through
    } else if constexpr (Op == Unary::Exp) {
      return fm::exp(x);
    } else if constexpr (Op == Unary::Log) {
      return fm::log(x);
    } else if constexpr (Op == Unary::Sqrt) {
      return fm::sqrt(x);
    } else if constexpr (Op == Unary::Rsqrt) {
      return T(1) / fm::sqrt(x);
    } else if constexpr (Op == Unary::Tanh) {
      return fm::tanh(x);
    } else if constexpr (Op == Unary::Sigmoid) {
      return T(1) / fadd(T(1), fm::exp(-x));
    } else if constexpr (Op == Unary::Softplus) {
      return x > T(20) ? x : fadd(x > 0 ? x : T(0), fm::log1p(fm::exp(x < 0 ? x : -x)));
    } else if constexpr (Op == Unary::Relu) {
      return x > 0 ? x : T(0);  // NaN -> 0
    } else if constexpr (Op == Unary::Gelu) {
      // 0.5 x (1 + erf(x / sqrt 2))
      return fmul(fmul(T(0.5), x), fadd(T(1), fm::erf(fmul(x, T(kSqrt1_2)))));
    } else if constexpr (Op == Unary::GeluTanh) {
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3)))
      const T cube = fmul(fmul(fmul(T(kGeluC), x), x), x);
      const T t = fm::tanh(fmul(T(kSqrt2OverPi), fadd(x, cube)));
      return fmul(fmul(T(0.5), x), fadd(T(1), t));
    } else if constexpr (Op == Unary::PowScalar) {
      return fm::pow(x, alpha);
    } else if constexpr (Op == Unary::Sin) {
      return fm::sin(x);
    } else if constexpr (Op == Unary::Cos) {
      return fm::cos(x);
    } else if constexpr (Op == Unary::Log1p) {
      return fm::log1p(x);
    } else if constexpr (Op == Unary::Expm1) {
      return fm::expm1(x);
    } else {
      // A new entry of VITRINE_UNARY_OPS stops the build here until its formula is written.
      static_assert(sizeof(T) == 0, "UnaryFn: this unary op has no CUDA formula yet");
      return x;
    }
  }
};

template <typename T>
cudaError_t unary_typed(Unary op, const View& x, const View& y, double alpha, double beta,
                        int64_t n, cudaStream_t stream) {
  const T a = static_cast<T>(alpha), b = static_cast<T>(beta);
  auto go = [&]<Unary Op>() -> cudaError_t {
    if constexpr (!unary_supported<Op, T>())
      return cudaErrorInvalidValue;
    else
      return launch_map(UnaryFn<Op, T>{a, b}, n, stream, arg<T>(y), arg<T>(x));
  };
  switch (op) {  // one case per op of backends/op_lists.h
#define VITRINE_UNARY_CASE(name) \
  case Unary::name:              \
    return go.template operator()<Unary::name>();
    VITRINE_UNARY_OPS(VITRINE_UNARY_CASE)
#undef VITRINE_UNARY_CASE
  }
  return cudaErrorInvalidValue;
}

// ---- binary ----------------------------------------------------------------------------------

constexpr bool is_comparison(Binary op) { return op >= Binary::Eq && op <= Binary::Ge; }

/// Whether the CPU computes op on T: comparisons on every compute dtype (bool included),
/// arithmetic on float32/float64, the four operations and max/min on int64.
template <Binary Op, typename T>
constexpr bool binary_supported() {
  if constexpr (is_comparison(Op) || std::is_floating_point_v<T>)
    return true;
  else if constexpr (std::is_same_v<T, int64_t>)
    return Op == Binary::Add || Op == Binary::Sub || Op == Binary::Mul || Op == Binary::Div ||
           Op == Binary::Maximum || Op == Binary::Minimum;
  else
    return false;
}

/// out = a op b, the CPU's binary_value.
template <Binary Op, typename T>
struct BinaryFn {
  __device__ T operator()(T a, T b) const {
    if constexpr (Op == Binary::Add) {
      return a + b;
    } else if constexpr (Op == Binary::Sub) {
      return a - b;
    } else if constexpr (Op == Binary::Mul) {
      return a * b;
    } else if constexpr (Op == Binary::Div) {
      return a / b;
    } else if constexpr (Op == Binary::Maximum) {
      return a > b ? a : b;  // NaN in either: b
    } else if constexpr (Op == Binary::Minimum) {
      return a < b ? a : b;
    } else if constexpr (Op == Binary::Pow) {
      return fm::pow(a, b);
    } else if constexpr (Op == Binary::GeluBackward) {
      // a = x, b = dy: dy (Phi(x) + x phi(x))
      const T cdf = fmul(T(0.5), fadd(T(1), fm::erf(fmul(a, T(kSqrt1_2)))));
      const T pdf = fmul(T(kInvSqrt2Pi), fm::exp(fmul(fmul(T(-0.5), a), a)));
      return fmul(b, fadd(cdf, fmul(a, pdf)));
    } else if constexpr (Op == Binary::ReluBackward) {
      return a > T(0) ? b : T(0);  // a = x, b = dy
    } else if constexpr (Op == Binary::GeluTanhBackward) {
      // a = x, b = dy: dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2))
      const T x2 = fmul(a, a);
      const T t = fm::tanh(fmul(T(kSqrt2OverPi), fadd(a, fmul(fmul(T(kGeluC), x2), a))));
      const T dinner = fmul(T(kSqrt2OverPi), fadd(T(1), fmul(T(3 * kGeluC), x2)));
      const T left = fmul(T(0.5), fadd(T(1), t));
      const T right = fmul(fmul(fmul(T(0.5), a), fsub(T(1), fmul(t, t))), dinner);
      return fmul(b, fadd(left, right));
    } else {
      // A new entry of VITRINE_BINARY_OPS stops the build here until its formula is written.
      static_assert(sizeof(T) == 0, "BinaryFn: this binary op has no CUDA formula yet");
      return a;
    }
  }
};

/// out = a op b as bool, the CPU's compare.
template <Binary Op, typename T>
struct CompareFn {
  __device__ bool operator()(T a, T b) const {
    if constexpr (Op == Binary::Eq)
      return a == b;
    else if constexpr (Op == Binary::Ne)
      return a != b;
    else if constexpr (Op == Binary::Lt)
      return a < b;
    else if constexpr (Op == Binary::Le)
      return a <= b;
    else if constexpr (Op == Binary::Gt)
      return a > b;
    else
      return a >= b;
  }
};

template <typename T>
cudaError_t binary_typed(Binary op, const View& a, const View& b, const View& y, int64_t n,
                         cudaStream_t stream) {
  auto go = [&]<Binary Op>() -> cudaError_t {
    if constexpr (is_comparison(Op))
      return launch_map(CompareFn<Op, T>{}, n, stream, arg<bool>(y), arg<T>(a), arg<T>(b));
    else if constexpr (!binary_supported<Op, T>())
      return cudaErrorInvalidValue;
    else
      return launch_map(BinaryFn<Op, T>{}, n, stream, arg<T>(y), arg<T>(a), arg<T>(b));
  };
  switch (op) {  // one case per op of backends/op_lists.h
#define VITRINE_BINARY_CASE(name) \
  case Binary::name:              \
    return go.template operator()<Binary::name>();
    VITRINE_BINARY_OPS(VITRINE_BINARY_CASE)
#undef VITRINE_BINARY_CASE
  }
  return cudaErrorInvalidValue;
}

template <typename T>
struct WhereFn {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

cudaError_t copy(const View& src, const View& dst, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  if (src.dtype == dst.dtype && src.contiguous() && dst.contiguous())
    return cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n) * dtype_size(dst.dtype),
                           cudaMemcpyDeviceToDevice, stream);
  return dispatch_storage(dst.dtype, [&]<typename D>() {
    return dispatch_storage(src.dtype, [&]<typename S>() {
      return launch_map(Convert<D, S>{}, n, stream, arg<D>(dst), arg<S>(src));
    });
  });
}

namespace {
/// The epilogues' act(v) and dy act'(p), by the elementwise ops' functions, so that a fused layer
/// rounds as its unfused steps do (SiLU as Backend::gemm_fused's default steps: sigmoid, then
/// the products, 1 - s as -s + 1).
template <int Act, typename T>
__device__ T act_out(T v) {
  if constexpr (Act == kActGelu) {
    return UnaryFn<Unary::Gelu, T>{}(v);
  } else if constexpr (Act == kActGeluTanh) {
    return UnaryFn<Unary::GeluTanh, T>{}(v);
  } else if constexpr (Act == kActRelu) {
    return UnaryFn<Unary::Relu, T>{}(v);
  } else {
    static_assert(Act == kActSilu);
    return fmul(v, UnaryFn<Unary::Sigmoid, T>{}(v));
  }
}
template <int Act, typename T>
__device__ T act_grad(T p, T dy) {
  if constexpr (Act == kActGelu) {
    return BinaryFn<Binary::GeluBackward, T>{}(p, dy);
  } else if constexpr (Act == kActGeluTanh) {
    return BinaryFn<Binary::GeluTanhBackward, T>{}(p, dy);
  } else if constexpr (Act == kActRelu) {
    return BinaryFn<Binary::ReluBackward, T>{}(p, dy);
  } else {
    static_assert(Act == kActSilu);  // s (1 + p (1 - s)),  s = sigmoid(p)
    const T s = UnaryFn<Unary::Sigmoid, T>{}(p);
    return fmul(dy, fmul(s, fadd(fmul(p, fadd(-s, T(1))), T(1))));
  }
}

/// Runs f.template operator()<Act>() for the act code (kernels.cuh); cudaErrorInvalidValue for
/// another value.
template <typename F>
cudaError_t dispatch_act(int act, F&& f) {
  switch (act) {
    case kActGelu:
      return f.template operator()<kActGelu>();
    case kActGeluTanh:
      return f.template operator()<kActGeluTanh>();
    case kActRelu:
      return f.template operator()<kActRelu>();
    case kActSilu:
      return f.template operator()<kActSilu>();
    default:
      return cudaErrorInvalidValue;
  }
}

/// Output i of gemm_epilogue (m = i / N, n = i % N).
template <typename T, int Act>
__global__ void gemm_epilogue_kernel(T* c, int64_t M, int64_t N, const T* bias, const T* add,
                                     int64_t add_ld, T* gelu_out, const T* pre, int64_t pre_ld) {
  const int64_t total = M * N, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t m = i / N, n = i - m * N;
    T v = c[i];
    if (bias) v = v + bias[n];
    if (add) v = v + add[m * add_ld + n];
    const T g = gelu_out ? act_out<Act>(v) : T(0);
    if (pre) v = act_grad<Act>(pre[m * pre_ld + n], v);
    c[i] = v;
    if (gelu_out) gelu_out[i] = g;  // after c: gelu_out may be c
  }
}
}  // namespace

cudaError_t gemm_epilogue(Dt dtype, void* c, int64_t M, int64_t N, const void* bias,
                          const void* add, int64_t add_ld, void* gelu_out, const void* pre,
                          int64_t pre_ld, int act, cudaStream_t stream) {
  if (M * N == 0) return cudaSuccess;
  return dispatch_act(act, [&]<int Act>() {
    return dispatch_float(dtype, [&]<typename T>() {  // float32, float64; else invalid
      gemm_epilogue_kernel<T, Act><<<blocks_for(M * N), kThreads, 0, stream>>>(
          static_cast<T*>(c), M, N, static_cast<const T*>(bias), static_cast<const T*>(add), add_ld,
          static_cast<T*>(gelu_out), static_cast<const T*>(pre), pre_ld);
      return cudaGetLastError();
    });
  });
}

namespace {
/// gemm_epilogue for a float32 c whose activation operands and copy may be bfloat16 (the
/// bfloat16 operands of linear layers): one block per row (a grid-stride loop over rows), threads
/// over its columns, so that no thread divides. gelu_out, pre and c_copy are float32 when their
/// flag says so, else bfloat16 (uint16_t bits, rounded to nearest even as every conversion here).
template <int Act>
__global__ void gemm_epilogue_mixed_kernel(float* c, int64_t M, int64_t N, const float* bias,
                                           const float* add, int64_t add_ld, void* gelu_out,
                                           bool gelu_f32, const void* pre, bool pre_f32,
                                           int64_t pre_ld, uint16_t* c_copy) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    float* row = c + m * N;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
      float v = row[n];
      if (bias) v = v + bias[n];
      if (add) v = v + add[m * add_ld + n];
      const float g = gelu_out ? act_out<Act>(v) : 0.0f;
      if (pre) {
        const float p = pre_f32 ? static_cast<const float*>(pre)[m * pre_ld + n]
                                : bf16_to_float(static_cast<const uint16_t*>(pre)[m * pre_ld + n]);
        v = act_grad<Act>(p, v);
      }
      row[n] = v;
      if (c_copy) c_copy[m * N + n] = float_to_bf16(v);
      if (gelu_out) {  // after c: a float32 gelu_out may be c
        if (gelu_f32)
          static_cast<float*>(gelu_out)[m * N + n] = g;
        else
          static_cast<uint16_t*>(gelu_out)[m * N + n] = float_to_bf16(g);
      }
    }
  }
}
}  // namespace

cudaError_t gemm_epilogue_mixed(float* c, int64_t M, int64_t N, const float* bias, const float* add,
                                int64_t add_ld, void* gelu_out, Dt gelu_dt, const void* pre,
                                Dt pre_dt, int64_t pre_ld, void* c_copy, int act,
                                cudaStream_t stream) {
  if (M * N == 0) return cudaSuccess;
  if ((gelu_out && gelu_dt != Dt::F32 && gelu_dt != Dt::BF16) ||
      (pre && pre_dt != Dt::F32 && pre_dt != Dt::BF16) ||
      (gelu_out && gelu_out == c && gelu_dt != Dt::F32))
    return cudaErrorInvalidValue;
  const int threads = N >= 1024 ? 512 : 256;
  const int64_t blocks = std::min<int64_t>(M, 65535);
  return dispatch_act(act, [&]<int Act>() {
    gemm_epilogue_mixed_kernel<Act><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        c, M, N, bias, add, add_ld, gelu_out, gelu_dt == Dt::F32, pre, pre_dt == Dt::F32, pre_ld,
        static_cast<uint16_t*>(c_copy));
    return cudaGetLastError();
  });
}

cudaError_t fill(const View& dst, double value, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  return dispatch_storage(dst.dtype, [&]<typename T>() {
    return launch_generate(FillFn<T>{store<T>(value)}, n, stream, arg<T>(dst));
  });
}

cudaError_t arange(const View& dst, double start, double step, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(dst.dtype, [&]<typename T>() {
    return launch_generate(ArangeFn<T>{start, step}, n, stream, arg<T>(dst));
  });
}

cudaError_t uniform(const View& dst, uint64_t seed, uint64_t offset, double lo, double hi,
                    cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  return dispatch_float(dst.dtype, [&]<typename T>() {
    return launch_generate(UniformFn<T>{seed, offset, lo, hi - lo}, n, stream, arg<T>(dst));
  });
}

cudaError_t normal(const View& dst, uint64_t seed, uint64_t offset, double mean, double stddev,
                   cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  return dispatch_float(dst.dtype, [&]<typename T>() {
    return launch_generate(NormalFn<T>{seed, offset, mean, stddev}, n, stream, arg<T>(dst));
  });
}

cudaError_t randint(const View& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi,
                    cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  if (dst.dtype != Dt::I64 || hi <= lo) return cudaErrorInvalidValue;
  const uint64_t ulo = static_cast<uint64_t>(lo);
  const RandintFn f{seed, offset, ulo, static_cast<uint64_t>(hi) - ulo};
  return launch_generate(f, n, stream, arg<int64_t>(dst));
}

cudaError_t unary(Unary op, const View& x, const View& y, double alpha, double beta,
                  cudaStream_t stream) {
  const int64_t n = y.numel();
  if (n == 0) return cudaSuccess;
  if (x.dtype != y.dtype) return cudaErrorInvalidValue;
  return dispatch_numeric(
      y.dtype, [&]<typename T>() { return unary_typed<T>(op, x, y, alpha, beta, n, stream); });
}

cudaError_t binary(Binary op, const View& a, const View& b, const View& y, cudaStream_t stream) {
  const int64_t n = y.numel();
  if (n == 0) return cudaSuccess;
  const bool cmp = is_comparison(op);
  if (a.dtype != b.dtype || (cmp ? y.dtype != Dt::Bool : y.dtype != a.dtype))
    return cudaErrorInvalidValue;
  auto run = [&]<typename T>() { return binary_typed<T>(op, a, b, y, n, stream); };
  return cmp ? dispatch_all(a.dtype, run) : dispatch_numeric(a.dtype, run);
}

cudaError_t where(const View& cond, const View& a, const View& b, const View& y,
                  cudaStream_t stream) {
  const int64_t n = y.numel();
  if (n == 0) return cudaSuccess;
  if (cond.dtype != Dt::Bool || a.dtype != y.dtype || b.dtype != y.dtype)
    return cudaErrorInvalidValue;
  return dispatch_all(y.dtype, [&]<typename T>() {
    return launch_map(WhereFn<T>{}, n, stream, arg<T>(y), arg<bool>(cond), arg<T>(a), arg<T>(b));
  });
}

}  // namespace vitrine::cuda
