// CPU elementwise kernels: unary (with scalar parameters alpha/beta), binary with broadcast
// strides, where. Operands: any strides, already shaped like y (stride 0 on broadcast dims).
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {
constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluC = 0.044715;

template <typename T>
T unary_value(UnaryOp op, T x, T alpha, T beta) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return x < 0 ? -x : x;
    case UnaryOp::Sign:
      return static_cast<T>((x > 0) - (x < 0));
    case UnaryOp::AddScalar:
      return x + alpha;
    case UnaryOp::MulScalar:
      return x * alpha;
    case UnaryOp::Clamp:
      return x < alpha ? alpha : (x > beta ? beta : x);
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::Exp:
        return std::exp(x);
      case UnaryOp::Log:
        return std::log(x);
      case UnaryOp::Sqrt:
        return std::sqrt(x);
      case UnaryOp::Rsqrt:
        return T(1) / std::sqrt(x);
      case UnaryOp::Tanh:
        return std::tanh(x);
      case UnaryOp::Sigmoid:
        return T(1) / (T(1) + std::exp(-x));
      case UnaryOp::Softplus:  // PyTorch's threshold 20; else max(x, 0) + log(1 + e^-|x|)
        return x > T(20) ? x : (x > 0 ? x : T(0)) + std::log1p(std::exp(-std::abs(x)));
      case UnaryOp::Relu:
        return x > 0 ? x : T(0);
      case UnaryOp::Gelu:
        return T(0.5) * x * (T(1) + std::erf(x * T(kSqrt1_2)));
      case UnaryOp::GeluTanh:
        return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(kGeluC) * x * x * x)));
      case UnaryOp::PowScalar:
        return std::pow(x, alpha);
      case UnaryOp::Sin:
        return std::sin(x);
      case UnaryOp::Cos:
        return std::cos(x);
      case UnaryOp::Log1p:
        return std::log1p(x);
      case UnaryOp::Expm1:
        return std::expm1(x);
      default:
        break;
    }
  }
  VT_ASSERT(!"unary op not supported for this dtype");
  return x;
}

template <typename T>
T binary_value(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Maximum:
      return a > b ? a : b;
    case BinaryOp::Minimum:
      return a < b ? a : b;
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case BinaryOp::Pow:
        return std::pow(a, b);
      case BinaryOp::ReluBackward:  // a = x, b = dy
        return a > T(0) ? b : T(0);
      case BinaryOp::GeluBackward: {  // a = x, b = dy
        T cdf = T(0.5) * (T(1) + std::erf(a * T(kSqrt1_2)));
        T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * a * a);
        return b * (cdf + a * pdf);
      }
      case BinaryOp::GeluTanhBackward: {
        T x2 = a * a;
        T t = std::tanh(T(kSqrt2OverPi) * (a + T(kGeluC) * x2 * a));
        T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * x2);
        return b * (T(0.5) * (T(1) + t) + T(0.5) * a * (T(1) - t * t) * dinner);
      }
      default:
        break;
    }
  }
  VT_ASSERT(!"binary op not supported for this dtype");
  return a;
}

template <typename T>
bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq:
      return a == b;
    case BinaryOp::Ne:
      return a != b;
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Gt:
      return a > b;
    case BinaryOp::Ge:
      return a >= b;
    default:
      VT_ASSERT(!"not a comparison");
  }
  return false;
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::Ge; }

/// body(f) with f(a, b) the op as a lambda of its own, so the per-element switch of binary_value
/// is taken once per call for the common ops and their loops vectorise.
template <typename T, typename Body>
void with_binary_fn(BinaryOp op, Body&& body) {
  switch (op) {
    case BinaryOp::Add:
      return body([](T a, T b) { return a + b; });
    case BinaryOp::Sub:
      return body([](T a, T b) { return a - b; });
    case BinaryOp::Mul:
      return body([](T a, T b) { return a * b; });
    case BinaryOp::Div:
      return body([](T a, T b) { return a / b; });
    case BinaryOp::ReluBackward:
      return body([](T a, T b) { return a > T(0) ? b : T(0); });
    default:
      return body([op](T a, T b) { return binary_value<T>(op, a, b); });
  }
}

/// The same for the common unary ops.
template <typename T, typename Body>
void with_unary_fn(UnaryOp op, T alpha, T beta, Body&& body) {
  switch (op) {
    case UnaryOp::Neg:
      return body([](T x) { return -x; });
    case UnaryOp::AddScalar:
      return body([alpha](T x) { return x + alpha; });
    case UnaryOp::MulScalar:
      return body([alpha](T x) { return x * alpha; });
    case UnaryOp::Relu:
      return body([](T x) { return x > T(0) ? x : T(0); });
    default:
      return body([op, alpha, beta](T x) { return unary_value<T>(op, x, alpha, beta); });
  }
}

/// y[j] = f(a[j], b[j]) for j < n with element strides sy, sa, sb; the contiguous and the
/// broadcast-scalar patterns get loops of their own that the compiler vectorises.
template <typename T, typename F>
inline void binary_run(T* y, const T* a, const T* b, int64_t n, int64_t sy, int64_t sa, int64_t sb,
                       F f) {
  if (sy == 1 && sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j], b[j]);
  } else if (sy == 1 && sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j], bv);
  } else if (sy == 1 && sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t j = 0; j < n; ++j) y[j] = f(av, b[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) y[j * sy] = f(a[j * sa], b[j * sb]);
  }
}
/// y[j] = c[j] ? a[j * SA] : b[j * SB] for j < n, as a select of bits under a mask made from the
/// condition (GCC turns `c ? a : b` on floats into a branch per element; this vectorises).
template <int SA, int SB, typename T>
inline void where_run(T* y, const bool* c, const T* a, const T* b, int64_t n) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    for (int64_t j = 0; j < n; ++j) {
      const Bits mask = Bits(0) - static_cast<Bits>(c[j]);  // all ones where c[j]
      const Bits ab = std::bit_cast<Bits>(a[j * SA]), bb = std::bit_cast<Bits>(b[j * SB]);
      y[j] = std::bit_cast<T>((ab & mask) | (bb & ~mask));
    }
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = c[j] ? a[j * SA] : b[j * SB];
  }
}
}  // namespace

void CpuBackend::unary(UnaryOp op, const Strided& x, const Strided& y, double alpha, double beta) {
  VT_ASSERT(x.dtype == y.dtype && x.shape == y.shape);
  Loop<2> loop(y.shape, {y.strides, x.strides});
  dispatch_numeric(x.dtype, "unary", [&]<typename T>() {
    T* yp = y.ptr<T>();
    const T* xp = x.ptr<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (op == UnaryOp::Gelu) {  // float32 GELU: the vectorised kernel of simd.h
        loop.run([&](auto off, int64_t n, auto in) {
          if (in[0] == 1 && in[1] == 1) return simd::gelu(xp + off[1], yp + off[0], n);
          for (int64_t j = 0; j < n; ++j)
            simd::gelu(xp + off[1] + j * in[1], yp + off[0] + j * in[0], 1);
        });
        return;
      }
    }
    with_unary_fn<T>(op, static_cast<T>(alpha), static_cast<T>(beta), [&](auto f) {
      loop.run([&](auto off, int64_t n, auto in) {
        T* yr = yp + off[0];
        const T* xr = xp + off[1];
        if (in[0] == 1 && in[1] == 1) {
          for (int64_t j = 0; j < n; ++j) yr[j] = f(xr[j]);
        } else {
          for (int64_t j = 0; j < n; ++j) yr[j * in[0]] = f(xr[j * in[1]]);
        }
      });
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& y) {
  VT_ASSERT(a.dtype == b.dtype && a.shape == y.shape && b.shape == y.shape);
  Loop<3> loop(y.shape, {y.strides, a.strides, b.strides});
  const bool cmp = is_comparison(op);
  VT_ASSERT(cmp ? y.dtype == DType::Bool : y.dtype == a.dtype);
  auto run = [&]<typename T>() {
    const T* ap = a.ptr<T>();
    const T* bp = b.ptr<T>();
    if (cmp) {
      bool* yp = y.ptr<bool>();
      loop.run([&](auto off, int64_t n, auto in) {
        for (int64_t j = 0; j < n; ++j)
          yp[off[0] + j * in[0]] = compare<T>(op, ap[off[1] + j * in[1]], bp[off[2] + j * in[2]]);
      });
      return;
    }
    if constexpr (std::is_same_v<T, bool>) {
      VT_ASSERT(!"arithmetic on bool");  // ops reject bool before reaching the kernel
    } else {
      T* yp = y.ptr<T>();
      if constexpr (std::is_same_v<T, float>) {
        if (op == BinaryOp::GeluBackward) {  // a = x, b = dy
          loop.run([&](auto off, int64_t n, auto in) {
            if (in[0] == 1 && in[1] == 1 && in[2] == 1)
              return simd::gelu_backward(ap + off[1], bp + off[2], yp + off[0], n);
            for (int64_t j = 0; j < n; ++j)
              simd::gelu_backward(ap + off[1] + j * in[1], bp + off[2] + j * in[2],
                                  yp + off[0] + j * in[0], 1);
          });
          return;
        }
      }
      with_binary_fn<T>(op, [&](auto f) {
        loop.run([&](auto off, int64_t n, auto in) {
          binary_run(yp + off[0], ap + off[1], bp + off[2], n, in[0], in[1], in[2], f);
        });
      });
    }
  };
  if (cmp)
    dispatch_all(a.dtype, "compare", run);
  else
    dispatch_numeric(a.dtype, "binary", run);
}

void CpuBackend::where(const Strided& cond, const Strided& a, const Strided& b, const Strided& y) {
  VT_ASSERT(cond.dtype == DType::Bool && a.dtype == y.dtype && b.dtype == y.dtype);
  Loop<4> loop(y.shape, {y.strides, cond.strides, a.strides, b.strides});
  dispatch_all(y.dtype, "where", [&]<typename T>() {
    T* yp = y.ptr<T>();
    const bool* cp = cond.ptr<bool>();
    const T* ap = a.ptr<T>();
    const T* bp = b.ptr<T>();
    loop.run([&](auto off, int64_t n, auto in) {
      T* yr = yp + off[0];
      const bool* cr = cp + off[1];
      const T *ar = ap + off[2], *br = bp + off[3];
      if (in[0] == 1 && in[1] == 1 && in[2] <= 1 && in[3] <= 1) {
        // The common rows (a and b each contiguous or one broadcast value), branch-free so that
        // they vectorise: a condition that flips at random (x > 0 in a leaky ReLU) costs a
        // mispredicted branch per element otherwise.
        if (in[2] == 1 && in[3] == 1) return where_run<1, 1>(yr, cr, ar, br, n);
        if (in[2] == 1) return where_run<1, 0>(yr, cr, ar, br, n);
        if (in[3] == 1) return where_run<0, 1>(yr, cr, ar, br, n);
        return where_run<0, 0>(yr, cr, ar, br, n);
      }
      for (int64_t j = 0; j < n; ++j) yr[j * in[0]] = cr[j * in[1]] ? ar[j * in[2]] : br[j * in[3]];
    });
  });
}

}  // namespace vitrine::cpu
