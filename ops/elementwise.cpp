// Elementwise ops with NumPy broadcasting. Backward rules return gradients in the broadcast
// (output) shape; the engine sums them back to each operand's shape. Rules are written with ops,
// so create_graph gives higher derivatives (gelu's fused backward is the exception).
#include <algorithm>
#include <cmath>

#include "ops/helpers.h"
#include "ops/sequence.h"

namespace vitrine::ops {

using detail::check_float;
using detail::check_same;

namespace {

Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const char* name,
                     bool numeric_ok = true) {
  check_same(a, b, name);
  if (!numeric_ok) check_float(a, name);
  VT_CHECK(a.dtype() != kBool || op >= BinaryOp::Eq,
           "{}: bool tensors are not supported (convert with to(kFloat32))", name);
  VT_CHECK(is_float(a.dtype()) || a.dtype() == kInt64 || a.dtype() == kBool,
           "{}: dtype {} is a storage type (convert with to(kFloat32) first)", name,
           dtype_name(a.dtype()));
  Dims shape = broadcast_shapes(a.shape(), b.shape(), name);
  bool cmp = op >= BinaryOp::Eq && op <= BinaryOp::Ge;
  Tensor y = detail::empty_on(a, shape, cmp ? kBool : a.dtype());
  a.backend().binary(op, detail::broadcast_view(a, shape), detail::broadcast_view(b, shape),
                     y.strided());
  return y;
}

Tensor unary_kernel(UnaryOp op, const Tensor& x, const char* name, bool float_only,
                    double alpha = 0, double beta = 0) {
  detail::check_defined(x, name, "x");
  if (float_only)
    check_float(x, name);
  else
    VT_CHECK(is_float(x.dtype()) || x.dtype() == kInt64,
             "{}: expected a float32, float64 or int64 tensor, got {}", name,
             dtype_name(x.dtype()));
  if (x.dtype() == kInt64)  // no silent truncation of a fractional scalar
    for (double s : {alpha, beta})
      VT_CHECK(!std::isfinite(s) || s == std::trunc(s),
               "{}: the scalar {} is not an integer, and the tensor is int64 (shape {}); convert "
               "it with to(kFloat32) first",
               name, s, x.shape());
  Tensor y = detail::empty_on(x, x.shape(), x.dtype());
  x.backend().unary(op, x.strided(), y.strided(), alpha, beta);
  return y;
}

/// The derivative mask of maximum/minimum: 1 where a wins, 0.5 on ties, 0 where b wins.
Tensor win_share(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor wins = to_dtype(is_max ? gt(a, b) : lt(a, b), a.dtype());
  Tensor ties = to_dtype(eq(a, b), a.dtype());
  return add(wins, ties, 0.5);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor y = alpha == 1 ? binary_kernel(BinaryOp::Add, a, b, "add")
                        : binary_kernel(BinaryOp::Add, a, mul(b.detach(), alpha), "add");
  return record(y, "add", {a, b}, [alpha](const Tensor& dy, const Needs& n) -> Grads {
    return {n[0] ? dy : Tensor(), n[1] ? (alpha == 1 ? dy : mul(dy, alpha)) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel(BinaryOp::Sub, a, b, "sub");
  return record(y, "sub", {a, b}, [](const Tensor& dy, const Needs& n) -> Grads {
    return {n[0] ? dy : Tensor(), n[1] ? neg(dy) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel(BinaryOp::Mul, a, b, "mul");
  return record(y, "mul", {a, b},
                [sa = save(a), sb = save(b)](const Tensor& dy, const Needs& n) -> Grads {
                  return {n[0] ? mul(dy, sb.get()) : Tensor(), n[1] ? mul(dy, sa.get()) : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  VT_CHECK(!a.defined() || a.dtype() != kInt64,
           "div: int64 tensors (shapes {} and {}) cannot be divided: PyTorch's true division gives "
           "floats; convert with to(kFloat32) first",
           a.shape(), b.defined() ? b.shape() : Dims{});
  Tensor y = binary_kernel(BinaryOp::Div, a, b, "div");
  return record(
      y, "div", {a, b}, [sa = save(a), sb = save(b)](const Tensor& dy, const Needs& n) -> Grads {
        const Tensor& b = sb.get();
        Tensor da = n[0] ? div(dy, b) : Tensor();
        Tensor db = n[1] ? neg(div(mul(dy, sa.get()), mul(b, b))) : Tensor();  // -dy a / b^2
        return {da, db};
      });
}

Tensor add(const Tensor& x, double c) {
  Tensor y = unary_kernel(UnaryOp::AddScalar, x, "add", false, c);
  return record(y, "add", {x}, [](const Tensor& dy, const Needs&) -> Grads { return {dy}; });
}

Tensor mul(const Tensor& x, double c) {
  Tensor y = unary_kernel(UnaryOp::MulScalar, x, "mul", false, c);
  return record(y, "mul", {x},
                [c](const Tensor& dy, const Needs&) -> Grads { return {mul(dy, c)}; });
}

Tensor neg(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Neg, x, "neg", false);
  return record(y, "neg", {x}, [](const Tensor& dy, const Needs&) -> Grads { return {neg(dy)}; });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel(BinaryOp::Pow, a, b, "pow", false);
  return record(
      y, "pow", {a, b}, [sa = save(a), sb = save(b)](const Tensor& dy, const Needs& n) -> Grads {
        const Tensor &a = sa.get(), &b = sb.get();
        Tensor da = n[0] ? mul(dy, mul(b, pow(a, sub(b, ones_like(b))))) : Tensor();  // b a^(b-1)
        Tensor db;
        if (n[1]) {  // a^b ln a, defined as 0 where a == 0 and b >= 0 (as PyTorch)
          db = mul(dy, mul(pow(a, b), log(a)));
          Tensor zero_base = mul(to_dtype(eq(a, zeros_like(a)), a.dtype()),
                                 to_dtype(ge(b, zeros_like(b)), b.dtype()));
          db = where(gt(zero_base, zeros_like(zero_base)), zeros_like(db), db);
        }
        return {da, db};
      });
}

Tensor pow(const Tensor& x, double p) {
  Tensor y = unary_kernel(UnaryOp::PowScalar, x, "pow", true, p);
  return record(y, "pow", {x}, [sx = save(x), p](const Tensor& dy, const Needs&) -> Grads {
    if (p == 0) return {zeros_like(dy)};
    return {mul(dy, mul(pow(sx.get(), p - 1), p))};  // p x^(p-1)
  });
}

Tensor exp(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Exp, x, "exp", true);
  return record(y, "exp", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(dy, exp(sx.get()))};
  });
}

Tensor log(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Log, x, "log", true);
  return record(y, "log", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {div(dy, sx.get())};
  });
}

Tensor sqrt(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Sqrt, x, "sqrt", true);
  return record(y, "sqrt", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(div(dy, sqrt(sx.get())), 0.5)};  // 1 / (2 sqrt x)
  });
}

Tensor rsqrt(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Rsqrt, x, "rsqrt", true);
  return record(y, "rsqrt", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(dy, mul(pow(sx.get(), -1.5), -0.5))};  // -x^(-3/2) / 2
  });
}

Tensor sign(const Tensor& x) { return unary_kernel(UnaryOp::Sign, x, "sign", false); }

Tensor abs(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Abs, x, "abs", false);
  return record(y, "abs", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(dy, sign(sx.get()))};
  });
}

Tensor tanh(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Tanh, x, "tanh", true);
  return record(y, "tanh", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    Tensor t = tanh(sx.get());
    return {mul(dy, sub(ones_like(t), mul(t, t)))};  // 1 - tanh^2
  });
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Sigmoid, x, "sigmoid", true);
  return record(y, "sigmoid", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    Tensor s = sigmoid(sx.get());
    return {mul(dy, mul(s, sub(ones_like(s), s)))};  // s (1 - s)
  });
}

Tensor softplus(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Softplus, x, "softplus", true);
  return record(y, "softplus", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(dy, sigmoid(sx.get()))};  // sigmoid(x)
  });
}

namespace {
/// dx = dy where x > 0, else 0: one kernel. Linear in dy, so its own gradient (double backward)
/// is the same mask applied to the incoming gradient; x gets none (the mask is constant a.e.).
Tensor relu_backward(const Tensor& x, const Tensor& dy) {
  Tensor dx = detail::empty_on(x, x.shape(), x.dtype());
  x.backend().binary(BinaryOp::ReluBackward, x.strided(), detail::broadcast_view(dy, x.shape()),
                     dx.strided());
  return record(dx, "relu_backward", {dy}, [sx = save(x)](const Tensor& g, const Needs&) -> Grads {
    return {relu_backward(sx.get(), g)};
  });
}
}  // namespace

Tensor relu(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Relu, x, "relu", true);
  return record(y, "relu", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {relu_backward(sx.get(), dy)};
  });
}

Tensor gelu(const Tensor& x, bool tanh_approx) {
  Tensor y = unary_kernel(tanh_approx ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, "gelu", true);
  return record(
      y, "gelu", {x}, [sx = save(x), tanh_approx](const Tensor& dy, const Needs&) -> Grads {
        const Tensor& x = sx.get();
        Tensor dx = detail::empty_on(x, x.shape(), x.dtype());
        x.backend().binary(tanh_approx ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward,
                           x.strided(), detail::broadcast_view(dy, x.shape()), dx.strided());
        return {detail::no_double_backward(dx, "gelu_backward", {x, dy})};
      });
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  VT_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  double l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
  if (x.defined() && x.dtype() == kInt64) {
    // The kernels cast the bounds to int64: keep them in its range (casting an absent bound,
    // +-inf, is undefined; x86 gives INT64_MIN, so a clamp without max returned INT64_MIN).
    l = std::clamp(l, -0x1p63, 0x1p63 - 1024);
    h = std::clamp(h, -0x1p63, 0x1p63 - 1024);
  }
  Tensor y = unary_kernel(UnaryOp::Clamp, x, "clamp", false, l, h);
  return record(y, "clamp", {x}, [sx = save(x), l, h](const Tensor& dy, const Needs&) -> Grads {
    const Tensor& x = sx.get();
    Tensor inside = to_dtype(eq(x, clamp(x, l, h)), x.dtype());  // 1 where l <= x <= h
    return {mul(dy, inside)};
  });
}

namespace {
/// maximum/minimum: y = a where a wins, b where b wins; the gradient follows the winner.
Tensor extreme_pair(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor y = binary_kernel(is_max ? BinaryOp::Maximum : BinaryOp::Minimum, a, b,
                           is_max ? "maximum" : "minimum");
  return record(
      y, is_max ? "maximum" : "minimum", {a, b},
      [sa = save(a), sb = save(b), is_max](const Tensor& dy, const Needs& n) -> Grads {
        Tensor w = win_share(sa.get(), sb.get(), is_max);
        return {n[0] ? mul(dy, w) : Tensor(), n[1] ? mul(dy, sub(ones_like(w), w)) : Tensor()};
      });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extreme_pair(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extreme_pair(a, b, false); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary_kernel(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_kernel(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_kernel(BinaryOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_kernel(BinaryOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_kernel(BinaryOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_kernel(BinaryOp::Ge, a, b, "ge"); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined(cond, "where", "cond");
  VT_CHECK(cond.dtype() == kBool, "where: cond must be a bool tensor, got {}",
           dtype_name(cond.dtype()));
  check_same(a, b, "where");
  VT_CHECK(cond.device() == a.device(), "where: cond is on {}, values on {}", cond.device().str(),
           a.device().str());
  Dims shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor y = detail::empty_on(a, shape, a.dtype());
  a.backend().where(detail::broadcast_view(cond, shape), detail::broadcast_view(a, shape),
                    detail::broadcast_view(b, shape), y.strided());
  return record(y, "where", {a, b}, [c = save(cond)](const Tensor& dy, const Needs& n) -> Grads {
    Tensor z = zeros_like(dy);
    return {n[0] ? where(c.get(), dy, z) : Tensor(), n[1] ? where(c.get(), z, dy) : Tensor()};
  });
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  detail::check_defined(x, "to", "x");
  if (x.dtype() == dtype) return x;
  Tensor y = detail::empty_on(x, x.shape(), dtype);
  x.backend().copy(x.strided(), y.strided());
  if (!is_floating_point(dtype)) return y;  // no gradient into integer/bool results
  DType from = x.dtype();
  return record(y, "to", {x},
                [from](const Tensor& dy, const Needs&) -> Grads { return {to_dtype(dy, from)}; });
}

// ---- sin, cos, log1p, expm1 (declared in ops/sequence.h) -----------------------------------

Tensor sin(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Sin, x, "sin", true);
  return record(y, "sin", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(dy, cos(sx.get()))};
  });
}

Tensor cos(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Cos, x, "cos", true);
  return record(y, "cos", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {neg(mul(dy, sin(sx.get())))};
  });
}

Tensor log1p(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Log1p, x, "log1p", true);
  return record(y, "log1p", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {div(dy, add(sx.get(), 1.0))};  // 1 / (1 + x)
  });
}

Tensor expm1(const Tensor& x) {
  Tensor y = unary_kernel(UnaryOp::Expm1, x, "expm1", true);
  return record(y, "expm1", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
    return {mul(dy, exp(sx.get()))};
  });
}

}  // namespace vitrine::ops
