// matmul: NumPy semantics. 1-D operands are promoted ([K] -> [1, K] on the left, [K, 1] on the
// right) and the added dim removed after; batch dims broadcast. The GEMM reads transposed and
// broadcast operands in place (backends/cpu/gemm.cpp), so mT() and expand() cost no copies.
#include <algorithm>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "ops/batch_tree.h"
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

/// x as a gemm operand: itself when BLAS can read it in place, else a contiguous copy.
Tensor gemm_operand(const Tensor& x) { return gemm_ready(x) ? x : x.contiguous(); }

/// A layer's input x [..., K] seen as M rows, and its output [..., N] (linear, mlp_gelu).
struct Rows {
  int64_t M = 1;
  Dims out_shape;
  Rows(const Tensor& x, int64_t N) : out_shape(x.shape()) {
    for (int i = 0; i + 1 < x.dim(); ++i) M *= x.size(i);
    out_shape[out_shape.size() - 1] = N;
  }
};

/// A bias [n] (undefined: nothing to check), or an Error naming the op and the argument.
void check_bias(const Tensor& x, const Tensor& b, int64_t n, const char* op, const char* name) {
  if (!b.defined()) return;
  check_same(x, b, op);
  VT_CHECK(b.dim() == 1 && b.size(0) == n, "{}: {} has shape {}, expected [{}]", op, name,
           b.shape(), n);
}

/// A residual [..., N] (the output's shape) as the [M, N] rows an epilogue adds (undefined
/// stays so).
Tensor residual_rows(const Tensor& x, const Tensor& residual, const Rows& rows, const char* op) {
  if (!residual.defined()) return residual;
  check_same(x, residual, op);
  VT_CHECK(residual.shape() == rows.out_shape, "{}: residual has shape {}, expected {}", op,
           residual.shape(), rows.out_shape);
  return residual.reshape({rows.M, rows.out_shape[rows.out_shape.size() - 1]});
}

/// The kernel view of an epilogue's operand (Backend::GemmEpilogue): a bias contiguous, rows
/// [M, N] with unit column stride (copied when they are not), nullptr for an undefined tensor.
/// keep holds what the view points into.
const Strided* epilogue_view(const Tensor& t, Tensor& keep, Strided& view) {
  if (!t.defined()) return nullptr;
  keep = t.dim() == 2 && t.strides()[1] == 1 ? t : t.contiguous();
  view = keep.strided();
  return &view;
}

/// A linear layer's dW = dy^T x and db = sum_rows dy (dy [M, N], x [M, K]; either may be
/// skipped). In a backward without create_graph one product gives both (Backend::gemm_fused
/// sums dy's columns as it reads them); with create_graph they are ops, differentiable again.
/// The product of both without graph, into dw [N, K] and (when defined) db [N].
void weight_bias_grads_into(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const Strided dbs = db.defined() ? db.strided() : Strided();
  Backend::GemmEpilogue ep;
  ep.a_row_sums = db.defined() ? &dbs : nullptr;
  x.backend().gemm_fused(gemm_operand(dy.mT()).strided(), gemm_operand(x).strided(), dw.strided(),
                         ep);
}

/// The same into new tensors of dtype out: dW, and db when need_b.
std::pair<Tensor, Tensor> fused_weight_bias_grads(const Tensor& dy, const Tensor& x, bool need_b,
                                                  DType out) {
  Tensor dw = empty_on(x, {dy.size(1), x.size(1)}, out);
  Tensor db = need_b ? empty_on(x, {dy.size(1)}, out) : Tensor();
  weight_bias_grads_into(dy, x, dw, db);
  return {dw, db};
}

/// The same, with the sums over rows in the batch's fixed tree (ops/batch_tree.h) when the M rows
/// are `items` batch entries of M / items rows each: one product per leaf of entries, each on one
/// thread, then the partials added pairwise. So dW and db do not depend on the thread count, nor
/// on how the batch is split between ranks or micro-batches.
std::pair<Tensor, Tensor> weight_bias_grads(const Tensor& dy, const Tensor& x, bool need_w,
                                            bool need_b, int64_t items) {
  if (GradMode::is_enabled() || !need_w)
    return {need_w ? matmul(dy.mT(), x) : Tensor(), need_b ? sum(dy, {0}) : Tensor()};
  const int64_t M = x.size(0);
  if (items <= 0 || M % items != 0 || !use_batch_tree(x, items))
    return fused_weight_bias_grads(dy, x, need_b, x.dtype());
  const int64_t per = M / items, N = dy.size(1), K = x.size(1);
  std::vector<Dims> shapes = {Dims{N, K}};
  if (need_b) shapes.push_back(Dims{N});
  const auto sums = batch_tree_sum(x, items, shapes, x.dtype(),
                                   [&](int64_t begin, int64_t count, std::vector<Tensor>& parts) {
                                     weight_bias_grads_into(narrow(dy, 0, begin * per, count * per),
                                                            narrow(x, 0, begin * per, count * per),
                                                            parts[0], need_b ? parts[1] : Tensor());
                                   });
  return {sums[0], need_b ? sums[1] : Tensor()};
}

/// The batch entries of a layer's input x [B, ..., K] (its rows' first dim; 1 for x [K]).
int64_t batch_items(const Tensor& x) { return x.dim() >= 2 ? x.size(0) : 1; }

/// A product's depth and width: a [M, K] @ b [K, N].
struct KN {
  int64_t K, N;
};

/// Runs f(r0, n, fixed) over rows [r0, r0 + n) of a layer's M rows, whose products (`products`)
/// f computes: all at once (fixed false); or, batch-invariant (ops/batch_tree.h), all at once
/// with fixed true where the backend gives each row of every product the same bits at any M
/// (Backend::gemm_fixed_rows: f then sets GemmEpilogue::fixed_rows), else leaf by leaf of the
/// `items` batch entries, each leaf on one thread.
template <class F>
void over_rows(const Tensor& like, int64_t M, int64_t items, std::initializer_list<KN> products,
               const F& f) {
  if (items > 0 && M > 0 && M % items == 0 && batch_invariant(like)) {
    const Backend& be = like.backend();
    if (std::all_of(products.begin(), products.end(),
                    [&](KN p) { return be.gemm_fixed_rows(p.K, p.N, like.dtype()); }))
      return f(0, M, true);
    const int64_t per = M / items;
    for_each_leaf(items, [&](int64_t b0, int64_t count) { f(b0 * per, count * per, false); });
  } else {
    f(0, M, false);
  }
}

/// dy [M, N] @ w [N, K] -> [M, K] (a layer's input gradient): matmul, or the batch's rows as
/// over_rows runs them when batch-invariant (not differentiable again there: no graph is
/// recorded).
Tensor rows_matmul(const Tensor& dy, const Tensor& w, int64_t items) {
  if (GradMode::is_enabled() || !batch_invariant(dy) || dy.dim() != 2) return matmul(dy, w);
  Tensor out = empty_on(dy, {dy.size(0), w.size(1)}, dy.dtype());
  const Tensor wo = gemm_operand(w);
  over_rows(dy, dy.size(0), items, {{w.size(0), w.size(1)}},
            [&](int64_t r0, int64_t n, bool fixed) {
              Backend::GemmEpilogue ep;
              ep.fixed_rows = fixed;
              dy.backend().gemm_fused(gemm_operand(narrow(dy, 0, r0, n)).strided(), wo.strided(),
                                      narrow(out, 0, r0, n).strided(), ep);
            });
  return out;
}

/// The rows [r0, r0 + n) of an [M, N] operand of an epilogue (undefined stays so).
Tensor row_slice(const Tensor& t, int64_t r0, int64_t n) {
  return t.defined() ? narrow(t, 0, r0, n) : t;
}

// ---- bfloat16 operands (bf16_operands: CUDA, precision "medium"; docs/cuda.md) --------------
// The products read bfloat16 copies made once: x16 where the layer's input is read, the
// weight's per optimizer step, dy16 once in the backward. The backward reads the copies, not the
// float32 tensors (half the memory kept per layer, as autocast keeps its casts). Their outputs
// refuse a second derivative (create_graph), as the other fused backward kernels' do.

/// The error for create_graph through a layer on bfloat16 operands.
void check_no_graph(const char* op) {
  VT_CHECK(!GradMode::is_enabled(),
           "{}: create_graph through a layer on bfloat16 operands is not supported (they are "
           "CUDA's under matmul precision 'medium'; set VITRINE_BF16_OPERANDS=0 or precision "
           "'high' to differentiate twice)",
           op);
}

/// dW = dy16^T x16 [N, K] and db = the column sums of dy16 [N] (each when needed), float32,
/// from one product with the sums in its epilogue.
std::pair<Tensor, Tensor> weight_bias_grads_16(const Tensor& dy16, const Tensor& x16, bool need_w,
                                               bool need_b) {
  if (!need_w)  // (a frozen weight: the bias's sums alone, not a product thrown away)
    return {Tensor(), need_b ? sum(to_dtype(dy16, kFloat32), {0}) : Tensor()};
  return fused_weight_bias_grads(dy16, x16, need_b, kFloat32);
}

/// dx = dy16 W16 [M, K], float32.
Tensor input_grad_16(const Tensor& dy16, const Tensor& w16) {
  Tensor dx = empty_on(dy16, {dy16.size(0), w16.size(1)}, kFloat32);
  dy16.backend().gemm(dy16.strided(), w16.strided(), dx.strided(), false);
  return dx;
}

/// linear on bfloat16 operands: x2 [M, K], weight [N, K], y [M, N] float32.
Tensor linear_16(const Tensor& x2, const Tensor& weight, const Tensor& bias, const Tensor& r2) {
  const Tensor x16 = bf16_copy(x2), w16 = bf16_weight(weight);
  Tensor y = empty_on(x2, {x2.size(0), weight.size(0)}, kFloat32);
  {
    Tensor kb, kr;
    Strided bs, rs;
    Backend::GemmEpilogue ep;
    ep.bias = epilogue_view(bias, kb, bs);
    ep.add = epilogue_view(r2, kr, rs);
    x2.backend().gemm_fused(x16.strided(), w16.mT().strided(), y.strided(), ep);
  }
  return record(y, "linear", {x2, weight, bias, r2},
                [x16, w16](const Tensor& dy, const Needs& n) -> Grads {
                  check_no_graph("linear");
                  const Tensor dy16 = bf16_copy(plain(dy));
                  Grads g(4);
                  if (n[0]) g[0] = input_grad_16(dy16, w16);
                  std::tie(g[1], g[2]) = weight_bias_grads_16(dy16, x16, n[1], n[2]);
                  if (n[3]) g[3] = dy;
                  return g;
                });
}

/// mlp on bfloat16 operands: x2 [M, K], w1 [H, K], w2 [N, H], y [M, N] float32. fc1's epilogue
/// writes the activation's output as fc2's bfloat16 operand and the pre-activation as bfloat16
/// (what the activation's backward reads); the backward's first product writes dpre and its copy.
Tensor mlp_16(const Tensor& x2, const Tensor& w1, const Tensor& b1, const Tensor& w2,
              const Tensor& b2, const Tensor& r2, Activation act_fn, bool keep, const char* op) {
  const int64_t M = x2.size(0), H = w1.size(0), N = w2.size(0);
  const Tensor x16 = bf16_copy(x2), w1_16 = bf16_weight(w1), w2_16 = bf16_weight(w2);
  Tensor pre = empty_on(x2, {M, H}, kFloat32);  // float32 only while the epilogue reads it
  Tensor act16 = empty_on(x2, {M, H}, kBFloat16);
  Tensor pre16 = keep ? empty_on(x2, {M, H}, kBFloat16) : Tensor();
  Tensor y = empty_on(x2, {M, N}, kFloat32);
  {
    Tensor kb1, kb2, kr;
    Strided b1s, b2s, rs;
    const Strided acts = act16.strided(), pres = keep ? pre16.strided() : Strided();
    Backend::GemmEpilogue e1, e2;
    e1.bias = epilogue_view(b1, kb1, b1s);
    e1.gelu_out = &acts;
    e1.act = act_fn;
    e1.c_copy = keep ? &pres : nullptr;
    e2.bias = epilogue_view(b2, kb2, b2s);
    e2.add = epilogue_view(r2, kr, rs);
    Backend& be = x2.backend();
    be.gemm_fused(x16.strided(), w1_16.mT().strided(), pre.strided(), e1);
    be.gemm_fused(acts, w2_16.mT().strided(), y.strided(), e2);
  }
  pre = Tensor();
  return record(
      y, op, {x2, w1, b1, w2, b2, r2},
      [x16, w1_16, w2_16, pre16, act16, act_fn, op](const Tensor& dy, const Needs& n) -> Grads {
        check_no_graph(op);
        const Tensor dy16 = bf16_copy(plain(dy));
        Grads g(6);
        std::tie(g[3], g[4]) = weight_bias_grads_16(dy16, act16, n[3], n[4]);
        if (n[5]) g[5] = dy;
        if (n[0] || n[1] || n[2]) {
          const int64_t M = dy16.size(0), H = w2_16.size(1);
          Tensor dpre = empty_on(dy16, {M, H}, kFloat32);
          Tensor dpre16 = empty_on(dy16, {M, H}, kBFloat16);
          const Strided ps = pre16.strided(), cs = dpre16.strided();
          Backend::GemmEpilogue e;
          e.gelu_pre = &ps;
          e.act = act_fn;
          e.c_copy = &cs;
          dy16.backend().gemm_fused(dy16.strided(), w2_16.strided(), dpre.strided(), e);
          dpre = Tensor();
          if (n[0]) g[0] = input_grad_16(dpre16, w1_16);
          std::tie(g[1], g[2]) = weight_bias_grads_16(dpre16, x16, n[1], n[2]);
        }
        return g;
      });
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

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  check_same(x, weight, "linear");
  check_float(x, "linear");
  VT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "linear: input shape {} does not fit weight shape {} (expected [..., {}])", x.shape(),
           weight.shape(), weight.dim() == 2 ? weight.size(1) : -1);
  const int64_t K = weight.size(1), N = weight.size(0);
  check_bias(x, bias, N, "linear", "bias");
  const Rows rows(x, N);
  const Tensor r2 = residual_rows(x, residual, rows, "linear");
  Tensor x2 = x.reshape({rows.M, K});  // [M, K] @ W^T [K, N]
  if (bf16_operands(x) && rows.M > 0)
    return linear_16(x2, weight, bias, r2).reshape(rows.out_shape);
  Tensor y = empty_on(x, {rows.M, N}, x.dtype());
  {
    const Tensor wt = gemm_operand(weight.mT());
    over_rows(x, rows.M, batch_items(x), {{K, N}}, [&](int64_t r0, int64_t n, bool fixed) {
      Tensor kb, kr;
      Strided bs, rs;
      Backend::GemmEpilogue ep;
      ep.fixed_rows = fixed;
      ep.bias = epilogue_view(bias, kb, bs);
      ep.add = epilogue_view(row_slice(r2, r0, n), kr, rs);
      x.backend().gemm_fused(gemm_operand(narrow(x2, 0, r0, n)).strided(), wt.strided(),
                             narrow(y, 0, r0, n).strided(), ep);
    });
  }
  // dx = dy W, dW = dy^T x, db = sum over rows of dy (ops under create_graph, so differentiable
  // again).
  Tensor out = record(
      y, "linear", {x2, weight, bias, r2},
      [sx = save(x2), sw = save(weight), items = batch_items(x)](const Tensor& dy,
                                                                 const Needs& n) -> Grads {
        auto [dw, db] = weight_bias_grads(dy, sx.get(), n[1], n[2], items);
        return {n[0] ? rows_matmul(dy, sw.get(), items) : Tensor(), dw, db, n[3] ? dy : Tensor()};
      });
  return out.reshape(rows.out_shape);
}

namespace {
/// mlp and mlp_gelu, named op in errors and in the graph (op_backward: its backward's node, a
/// literal, which the node keeps).
Tensor mlp_as(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
              const Tensor& b2, Activation act_fn, const Tensor& residual, const char* op,
              const char* op_backward) {
  check_float(x, op);
  check_same(x, w1, op);
  check_same(x, w2, op);
  VT_CHECK(w1.dim() == 2 && w2.dim() == 2 && x.dim() >= 1 && x.size(-1) == w1.size(1) &&
               w2.size(1) == w1.size(0),
           "{}: input shape {} does not fit fc1's weight {} and fc2's weight {} (expected "
           "x [..., in], w1 [hidden, in], w2 [out, hidden])",
           op, x.shape(), w1.shape(), w2.shape());
  const int64_t K = w1.size(1), H = w1.size(0), N = w2.size(0);
  check_bias(x, b1, H, op, "b1");
  check_bias(x, b2, N, op, "b2");
  const Rows rows(x, N);
  const int64_t M = rows.M;
  const Tensor r2 = residual_rows(x, residual, rows, op);
  Tensor x2 = x.reshape({M, K});
  // Without a backward, the activation overwrites the pre-activation (nothing keeps it).
  const bool keep = any_requires_grad({x2, w1, b1, w2, b2, r2});
  if (bf16_operands(x) && M > 0)
    return mlp_16(x2, w1, b1, w2, b2, r2, act_fn, keep, op).reshape(rows.out_shape);
  Tensor pre = empty_on(x, {M, H}, x.dtype());
  Tensor act = keep ? empty_on(x, {M, H}, x.dtype()) : pre;
  Tensor y = empty_on(x, {M, N}, x.dtype());
  {
    const Tensor w1t = gemm_operand(w1.mT()), w2t = gemm_operand(w2.mT());
    over_rows(x, M, batch_items(x), {{K, H}, {H, N}}, [&](int64_t r0, int64_t n, bool fixed) {
      Tensor kb1, kb2, kr;
      Strided b1s, b2s, rs;
      const Strided acts = narrow(act, 0, r0, n).strided();
      Backend::GemmEpilogue e1, e2;
      e1.fixed_rows = e2.fixed_rows = fixed;
      e1.bias = epilogue_view(b1, kb1, b1s);
      e1.gelu_out = &acts;
      e1.act = act_fn;
      e2.bias = epilogue_view(b2, kb2, b2s);
      e2.add = epilogue_view(row_slice(r2, r0, n), kr, rs);
      Backend& be = x.backend();
      be.gemm_fused(gemm_operand(narrow(x2, 0, r0, n)).strided(), w1t.strided(),
                    narrow(pre, 0, r0, n).strided(), e1);
      be.gemm_fused(acts, w2t.strided(), narrow(y, 0, r0, n).strided(), e2);
    });
  }
  Tensor out = record(
      y, op, {x2, w1, b1, w2, b2, r2},
      [sx = save(x2), sw1 = save(w1), sw2 = save(w2), spre = save(pre), sact = save(act), act_fn,
       op_backward, items = batch_items(x)](const Tensor& dy, const Needs& n) -> Grads {
        Grads g(6);
        std::tie(g[3], g[4]) = weight_bias_grads(dy, sact.get(), n[3], n[4], items);
        if (n[5]) g[5] = dy;
        if (n[0] || n[1] || n[2]) {
          const Tensor &x = sx.get(), &w1 = sw1.get(), &w2 = sw2.get(), &pre = spre.get();
          Tensor dpre = empty_on(pre, pre.shape(), pre.dtype());
          const Tensor w2o = gemm_operand(w2);
          over_rows(pre, pre.size(0), items, {{w2.size(0), w2.size(1)}},
                    [&](int64_t r0, int64_t rn, bool fixed) {
                      const Strided ps = narrow(pre, 0, r0, rn).strided();
                      Backend::GemmEpilogue e;
                      e.fixed_rows = fixed;
                      e.gelu_pre = &ps;
                      e.act = act_fn;
                      pre.backend().gemm_fused(gemm_operand(narrow(dy, 0, r0, rn)).strided(),
                                               w2o.strided(), narrow(dpre, 0, r0, rn).strided(), e);
                    });
          dpre = no_double_backward(dpre, op_backward, {dy, x, w1, w2});
          if (n[0]) g[0] = rows_matmul(dpre, w1, items);
          std::tie(g[1], g[2]) = weight_bias_grads(dpre, x, n[1], n[2], items);
        }
        return g;
      });
  return out.reshape(rows.out_shape);
}

}  // namespace

Tensor mlp_gelu(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2, const Tensor& residual) {
  return mlp_as(x, w1, b1, w2, b2, Activation::GELU, residual, "mlp_gelu", "mlp_gelu_backward");
}

Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
           Activation act, const Tensor& residual) {
  return mlp_as(x, w1, b1, w2, b2, act, residual, "mlp", "mlp_backward");
}

}  // namespace vitrine::ops
