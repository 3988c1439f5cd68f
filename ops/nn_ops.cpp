// Neural-network ops: softmax, log_softmax, layer_norm, cross_entropy (fused kernels with their
// own *_backward kernels) and dropout (written with ops). The fused kernels reduce over the last
// dim of contiguous tensors, so an op moves its dim there first. The gradients that a fused
// backward kernel returns are not differentiable again: they carry a node that refuses double
// backward (create_graph through them is an error, not a silent zero); layer_norm's backward
// under create_graph is a composition of ops instead, so it has second derivatives.
#include <algorithm>

#include "ops/batch_tree.h"
#include "ops/helpers.h"

namespace vitrine::ops {

using detail::check_float;
using detail::check_same;
using detail::empty_on;
using detail::no_double_backward;
using detail::plain;

namespace {

/// plain(t) with dim d moved to the end (swapped with the last dim).
Tensor to_last(const Tensor& t, int d) {
  if (t.dim() <= 1 || d == t.dim() - 1) return plain(t);
  NoGradGuard no_grad;
  return contiguous(transpose(t.detach(), d, -1));
}

/// The inverse of to_last.
Tensor from_last(const Tensor& t, int d) { return to_last(t, d); }

/// The kernel view of a contiguous tensor as [rows, cols].
Strided rows_view(const Tensor& t, int64_t rows, int64_t cols) {
  VT_ASSERT(t.is_contiguous() && t.numel() == rows * cols);
  Strided s = t.strided();
  s.shape = {rows, cols};
  s.strides = {cols, 1};
  return s;
}

/// The kernel view of a contiguous tensor as [n].
Strided flat_view(const Tensor& t) {
  VT_ASSERT(t.is_contiguous());
  Strided s = t.strided();
  s.shape = {t.numel()};
  s.strides = {1};
  return s;
}

/// The kernel view of an optional operand (data == nullptr when t is undefined).
Strided optional_view(const Tensor& t) { return t.defined() ? flat_view(t) : Strided(); }

/// layer_norm's gradients as ops (differentiable again: create_graph), x and dy viewed as
/// [R, C]:  xhat = (x - mean) rstd, g = dy w,
///   dx = rstd (g - mean_C(g) - xhat mean_C(g xhat)),  dw = sum_R dy xhat,  db = sum_R dy
Grads layer_norm_grads(const Tensor& x, const Tensor& w, const Tensor& dy, int64_t rows,
                       int64_t cols, const Dims& normalized_shape, double eps, const Needs& needs) {
  const Tensor x2 = reshape(x, {rows, cols}), dy2 = reshape(dy, {rows, cols});
  const Tensor xc = sub(x2, mean(x2, {1}, true));
  const Tensor rstd = rsqrt(add(mean(mul(xc, xc), {1}, true), eps));
  const Tensor xhat = mul(xc, rstd);
  Grads out(3);
  if (needs[0]) {
    const Tensor g = w.defined() ? mul(dy2, reshape(w, {cols})) : dy2;
    const Tensor inner = sub(sub(g, mean(g, {1}, true)), mul(xhat, mean(mul(g, xhat), {1}, true)));
    out[0] = reshape(mul(rstd, inner), x.shape());
  }
  if (needs[1]) out[1] = reshape(sum(mul(dy2, xhat), {0}), normalized_shape);
  if (needs[2]) out[2] = reshape(sum(dy2, {0}), normalized_shape);
  return out;
}

/// softmax (or log_softmax) over the last dim of a contiguous tensor by the fused kernel.
Tensor softmax_last(const Tensor& xt, bool log) {
  Tensor yt = empty_on(xt, xt.shape(), xt.dtype());
  xt.backend().softmax(xt.strided(), yt.strided(), log);
  return yt;
}

Tensor softmax_op(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_float(x, name);
  const int d = wrap_dim(dim, std::max(x.dim(), 1), name);
  Tensor y = from_last(softmax_last(to_last(x, d), log), d);
  // x is saved rather than y: backward recomputes y (one more kernel, the same memory as saving
  // y), and the refusing double-backward node can then link to x.
  return record(y, name, {x}, [sx = save(x), d, log](const Tensor& dy, const Needs&) -> Grads {
    const Tensor& x = sx.get();
    Tensor yt = softmax_last(to_last(x, d), log), dyt = to_last(dy, d);
    Tensor dxt = empty_on(yt, yt.shape(), yt.dtype());
    yt.backend().softmax_backward(yt.strided(), dyt.strided(), dxt.strided(), log);
    return {no_double_backward(from_last(dxt, d), log ? "log_softmax_backward" : "softmax_backward",
                               {x, dy})};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, false); }

Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, true); }

Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_float(x, "layer_norm");
  const int k = normalized_shape.size(), nd = x.dim();
  bool match = k >= 1 && k <= nd;
  for (int i = 0; match && i < k; ++i) match = x.shape()[nd - k + i] == normalized_shape[i];
  VT_CHECK(match,
           "layer_norm: normalized_shape {} does not match the trailing dims of input shape {}",
           normalized_shape, x.shape());
  for (const auto& [p, pname] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!p->defined()) continue;
    check_same(x, *p, "layer_norm");
    VT_CHECK(p->shape() == normalized_shape,
             "layer_norm: {} has shape {}, expected normalized_shape {}", pname, p->shape(),
             normalized_shape);
  }
  VT_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got {}", eps);
  const int64_t cols = normalized_shape.numel(), rows = cols == 0 ? 0 : x.numel() / cols;

  // x, y: [R, C]; w, b: [C]; mean, rstd: [R]
  Tensor xc = plain(x), wc = plain(weight), bc = plain(bias);
  Tensor y = empty_on(x, x.shape(), x.dtype());
  Tensor mu = empty_on(x, {rows}, x.dtype()), rstd = empty_on(x, {rows}, x.dtype());
  x.backend().layer_norm(rows_view(xc, rows, cols), optional_view(wc), optional_view(bc), eps,
                         rows_view(y, rows, cols), mu.strided(), rstd.strided());

  return record(
      y, "layer_norm", {x, weight, bias},
      [sx = save(x), sw = save(weight), mu, rstd, rows, cols, normalized_shape, eps](
          const Tensor& dy, const Needs& needs) -> Grads {
        const Tensor& x = sx.get();
        const Tensor& w = sw.get();
        if (GradMode::is_enabled())
          return layer_norm_grads(x, w, dy, rows, cols, normalized_shape, eps, needs);
        Tensor xc = plain(x), dyc = plain(dy), wc = plain(w);
        Tensor dx = needs[0] ? empty_on(x, x.shape(), x.dtype()) : Tensor();
        Tensor dw = needs[1] ? empty_on(x, normalized_shape, x.dtype()) : Tensor();
        Tensor db = needs[2] ? empty_on(x, normalized_shape, x.dtype()) : Tensor();
        // dw and db sum over the rows: in the batch's fixed tree (ops/batch_tree.h) when the rows
        // are x's dim 0 entries (x [B, ..., normalized_shape]), each leaf's dx rows beside its
        // partials (a row's dx is its own, wherever the row sits).
        const int64_t items = x.dim() > normalized_shape.size() ? x.size(0) : 1;
        if ((dw.defined() || db.defined()) && rows % std::max<int64_t>(items, 1) == 0 &&
            detail::use_batch_tree(x, items)) {
          const int64_t per = rows / items;
          std::vector<Dims> shapes;
          if (dw.defined()) shapes.push_back(normalized_shape);
          if (db.defined()) shapes.push_back(normalized_shape);
          const auto sums = detail::batch_tree_sum(
              x, items, shapes, x.dtype(),
              [&](int64_t begin, int64_t count, std::vector<Tensor>& parts) {
                const int64_t r0 = begin * per, n = count * per;
                const auto part = [&](int i) { return flat_view(parts[i]); };
                x.backend().layer_norm_backward(
                    rows_view(narrow(xc.reshape({rows, cols}), 0, r0, n), n, cols),
                    optional_view(wc), narrow(mu, 0, r0, n).strided(),
                    narrow(rstd, 0, r0, n).strided(),
                    rows_view(narrow(dyc.reshape({rows, cols}), 0, r0, n), n, cols),
                    dx.defined() ? rows_view(narrow(dx.reshape({rows, cols}), 0, r0, n), n, cols)
                                 : Strided(),
                    dw.defined() ? part(0) : Strided(),
                    db.defined() ? part(dw.defined() ? 1 : 0) : Strided());
              });
          if (dw.defined()) dw = sums[0];
          if (db.defined()) db = sums[dw.defined() ? 1 : 0];
        } else {
          x.backend().layer_norm_backward(rows_view(xc, rows, cols), optional_view(wc),
                                          mu.strided(), rstd.strided(), rows_view(dyc, rows, cols),
                                          dx.defined() ? rows_view(dx, rows, cols) : Strided(),
                                          optional_view(dw), optional_view(db));
        }
        auto refuse = [&](const Tensor& g) {
          return g.defined() ? no_double_backward(g, "layer_norm_backward", {x, w, dy}) : g;
        };
        return {refuse(dx), refuse(dw), refuse(db)};
      });
}

namespace {
/// cross_entropy's per-target losses (target's shape) reduced.
Tensor reduce_cross_entropy(const Tensor& loss, const Tensor& target, Reduction reduction,
                            int64_t ignore_index) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean: {
      // As PyTorch: divide by the number of targets that are not ignore_index (NaN when none).
      Tensor kept = ne(target, scalar(static_cast<double>(ignore_index), kInt64, target.device()));
      return div(sum(loss), sum(to_dtype(kept, loss.dtype())));
    }
  }
  return loss;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     double label_smoothing, int64_t ignore_index) {
  check_float(logits, "cross_entropy");
  detail::check_defined(target, "cross_entropy", "target");
  VT_CHECK(target.dtype() == kInt64,
           "cross_entropy: target must hold int64 class indices, got {} (shape {})",
           dtype_name(target.dtype()), target.shape());
  VT_CHECK(target.device() == logits.device(),
           "cross_entropy: logits and target are on different devices ({} and {})",
           logits.device().str(), target.device().str());
  VT_CHECK(logits.dim() >= 1,
           "cross_entropy: logits must have shape [N, C], [C] or [N, C, d1, ...], got {}",
           logits.shape());
  if (logits.dim() > 2) {
    // [N, C, d1, ..., dk] with target [N, d1, ..., dk] (PyTorch's K-dimensional loss): the class
    // dim moved last and the rest flattened, [N d1 ... dk, C], then the loss back in target's
    // shape, reduced as for [N, C] (the mean over the non-ignored targets of all positions).
    Dims want{logits.shape()[0]};
    for (int64_t d = 2; d < logits.dim(); ++d) want.push_back(logits.shape()[d]);
    VT_CHECK(target.shape() == want,
             "cross_entropy: target shape {} does not match logits shape {} (expected target "
             "shape {})",
             target.shape(), logits.shape(), want);
    const int64_t classes = logits.shape()[1];
    Dims order{0};  // [N, d1, ..., dk, C]
    for (int64_t d = 2; d < logits.dim(); ++d) order.push_back(d);
    order.push_back(1);
    const Tensor rows = permute(logits, order).reshape({-1, classes});
    const Tensor flat =
        cross_entropy(rows, target.reshape({-1}), Reduction::None, label_smoothing, ignore_index);
    return reduce_cross_entropy(flat.reshape(want), target, reduction, ignore_index);
  }
  const bool batched = logits.dim() == 2;
  const Dims want = batched ? Dims{logits.shape()[0]} : Dims{};
  VT_CHECK(target.shape() == want,
           "cross_entropy: target shape {} does not match logits shape {} (expected target "
           "shape {})",
           target.shape(), logits.shape(), want);
  VT_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
           "cross_entropy: label_smoothing must be in [0, 1], got {}", label_smoothing);
  const int64_t n = batched ? logits.shape()[0] : 1, classes = logits.shape().back();

  // logits: [N, C]; target, loss: [N] (both [] when logits is [C])
  Tensor lc = plain(logits), tc = plain(target);
  Tensor loss = empty_on(logits, want, logits.dtype());
  logits.backend().cross_entropy(rows_view(lc, n, classes), flat_view(tc), ignore_index,
                                 label_smoothing, flat_view(loss));
  loss = record(loss, "cross_entropy", {logits},
                [sl = save(logits), st = save(tc), n, classes, ignore_index, label_smoothing](
                    const Tensor& dloss, const Needs&) -> Grads {
                  const Tensor& logits = sl.get();
                  const Tensor& tc = st.get();
                  Tensor lc = plain(logits), dl = plain(dloss);
                  Tensor dlogits = empty_on(logits, logits.shape(), logits.dtype());
                  logits.backend().cross_entropy_backward(
                      rows_view(lc, n, classes), flat_view(tc), ignore_index, label_smoothing,
                      flat_view(dl), rows_view(dlogits, n, classes));
                  return {no_double_backward(dlogits, "cross_entropy_backward", {logits, dloss})};
                });

  return reduce_cross_entropy(loss, target, reduction, ignore_index);
}

Tensor dropout(const Tensor& x, double p, bool train, Generator& gen) {
  check_float(x, "dropout");
  VT_CHECK(p >= 0 && p <= 1, "dropout: probability p must be in [0, 1], got {}", p);
  if (!train || p == 0) return x;
  Tensor mask, y;  // mask: 0 or 1 / (1 - p), x's dtype
  {
    NoGradGuard no_grad;
    if (p == 1) {  // as PyTorch: x * 0 (so NaN stays NaN), no random numbers drawn
      mask = zeros(x.shape(), x.dtype(), x.device());
    } else {
      Tensor u = rand(x.shape(), gen, x.dtype(), 0, 1, x.device());
      Tensor keep = ge(u, scalar(p, x.dtype(), x.device()));
      mask = mul(to_dtype(keep, x.dtype()), 1.0 / (1.0 - p));
    }
    y = mul(x.detach(), mask);
  }
  return record(y, "dropout", {x},
                [mask](const Tensor& dy, const Needs&) -> Grads { return {mul(dy, mask)}; });
}

}  // namespace vitrine::ops
