// matmul: NumPy semantics. 1-D operands are promoted ([K] -> [1, K] on the left, [K, 1] on the
// right) and the added dim removed after; batch dims broadcast. The GEMM reads transposed and
// broadcast operands in place (backends/cpu/gemm.cpp), so mT() and expand() cost no copies.
#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {
/// Whether the last two dims can be handed to BLAS as they are (row-major or transposed).
bool gemm_ready(const Tensor& t) {
  const int n = t.dim();
  bool trans;
  int64_t ld;
  return gemm_layout(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1],
                     trans, ld);
}

/// a: [..., M, K], b: [..., K, N] (both at least 2-D) -> [batch..., M, N].
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int na = a.dim(), nb = b.dim();
  const int64_t M = a.shape()[na - 2], K = a.shape()[na - 1], K2 = b.shape()[nb - 2],
                N = b.shape()[nb - 1];
  VT_CHECK(K == K2, "matmul: shapes {} and {} cannot be multiplied ({} != {})", a.shape(),
           b.shape(), K, K2);
  Dims ab, bb;
  for (int i = 0; i < na - 2; ++i) ab.push_back(a.shape()[i]);
  for (int i = 0; i < nb - 2; ++i) bb.push_back(b.shape()[i]);
  Dims batch = broadcast_shapes(ab, bb, "matmul (batch dims)");
  Dims sa = batch, sb = batch, sy = batch;
  sa.push_back(M), sa.push_back(K);
  sb.push_back(K), sb.push_back(N);
  sy.push_back(M), sy.push_back(N);
  Tensor ca = gemm_ready(a) ? a : a.contiguous();
  Tensor cb = gemm_ready(b) ? b : b.contiguous();
  Tensor y = empty_on(a, sy, a.dtype());
  a.backend().gemm(broadcast_view(ca, sa), broadcast_view(cb, sb), y.strided(), false);
  // dA = dY B^T, dB = A^T dY, in the broadcast batch shape; the engine sums broadcast dims.
  return record(y, "matmul", {a, b},
                [sa_ = save(a), sb_ = save(b)](const Tensor& dy, const Needs& n) -> Grads {
                  return {n[0] ? matmul(dy, sb_.get().mT()) : Tensor(),
                          n[1] ? matmul(sa_.get().mT(), dy) : Tensor()};
                });
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same(a, b, "matmul");
  check_float(a, "matmul");
  VT_CHECK(a.dim() >= 1 && b.dim() >= 1,
           "matmul: both operands need at least 1 dim (got shapes {} and {})", a.shape(),
           b.shape());
  if (a.dim() == 1 && b.dim() == 1) {
    VT_CHECK(a.shape()[0] == b.shape()[0],
             "matmul: shapes {} and {} cannot be multiplied ({} != {})", a.shape(), b.shape(),
             a.shape()[0], b.shape()[0]);
    return reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  }
  if (a.dim() == 1) return squeeze(matmul_nd(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul_nd(a, unsqueeze(b, 1)), -1);
  return matmul_nd(a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same(x, weight, "linear");
  check_float(x, "linear");
  VT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "linear: input shape {} does not fit weight shape {} (expected [..., {}])", x.shape(),
           weight.shape(), weight.dim() == 2 ? weight.size(1) : -1);
  const int64_t K = weight.size(1), N = weight.size(0);
  int64_t M = 1;
  for (int i = 0; i + 1 < x.dim(); ++i) M *= x.size(i);
  if (bias.defined()) {
    check_same(x, bias, "linear");
    VT_CHECK(bias.dim() == 1 && bias.size(0) == N, "linear: bias has shape {}, expected [{}]",
             bias.shape(), N);
  }
  Dims out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  Tensor x2 = x.reshape({M, K}), wt = weight.mT();  // [M, K], [K, N]
  Tensor ca = gemm_ready(x2) ? x2 : x2.contiguous();
  Tensor cb = gemm_ready(wt) ? wt : wt.contiguous();
  Tensor y = empty_on(x, {M, N}, x.dtype());
  Backend& be = x.backend();
  if (bias.defined())
    be.gemm_bias(ca.strided(), cb.strided(), bias.contiguous().strided(), y.strided());
  else
    be.gemm(ca.strided(), cb.strided(), y.strided(), /*accumulate=*/false);
  // dx = dy W, dW = dy^T x, db = sum over rows of dy: ops, so differentiable again.
  Tensor out =
      record(y, "linear", {x2, weight, bias},
             [sx = save(x2), sw = save(weight)](const Tensor& dy, const Needs& n) -> Grads {
               return {n[0] ? matmul(dy, sw.get()) : Tensor(),
                       n[1] ? matmul(dy.mT(), sx.get()) : Tensor(), n[2] ? sum(dy, {0}) : Tensor()};
             });
  return out.reshape(out_shape);
}

}  // namespace vitrine::ops
