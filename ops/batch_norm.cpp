// Batch normalisation (PyTorch's F.batch_norm). x [B, C, *], read as [B, C, L]: one mean and
// variance per channel c, over the batch and every position (n = B L values):
//   training: mu = mean(x[:, c]), s2 = mean((x[:, c] - mu)^2)       (the biased variance)
//             running_mean = (1 - m) running_mean + m mu
//             running_var  = (1 - m) running_var  + m s2 n / (n - 1)   (the unbiased one)
//   eval:     mu, s2 = running_mean, running_var
//   y = (x - mu) rstd w + b = x a + d,   rstd = 1 / sqrt(s2 + eps),  a = rstd w,  d = b - mu a
// (x a + d is how PyTorch's CPU kernel writes it too). Backward, from dy, with
// sum_dy = sum dy and dot = sum dy (x - mu) over b and l:
//   db = sum_dy,  dw = dot rstd
//   training: dx = (dy - sum_dy / n - (x - mu) k) a,  k = dot rstd^2 / n   (mu and s2 depend on x)
//   eval:     dx = dy a
// Each full-size step is one backend kernel (batch_norm_stats, batch_norm_backward_reduce,
// channel_affine); the per-channel arithmetic is ops on [C] tensors. The gradients are not
// differentiable again (create_graph through batch_norm is an error, as for layer_norm).
// batch_norm_relu is relu(batch_norm(x) + residual) as one op: the forward's affine pass adds the
// residual and clamps (channel_affine_relu), and the backward masks dy by y > 0 before batch
// norm's own backward (the residual's gradient is that masked dy). The composition is the
// reference the tests check it against; nn::BatchNorm2d::forward_relu chooses between them.
// With a BatchNormSync (nn::SyncBatchNorm), training uses the statistics of the batch split across
// processes: mu, s2 and n above become the whole batch's (combine_stats), and dx's sum_dy and dot
// are gathered and summed over the processes; db and dw stay this process's share (data-parallel
// training then averages them across processes, as it does every parameter's gradient).
#include <array>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/batch_tree.h"
#include "ops/helpers.h"

namespace vitrine::ops {

namespace {
using detail::empty_on;
using detail::plain;

/// A contiguous [B, C, *] tensor as the kernels' [B, C, L] (B from the tensor: a leaf's share).
Strided bcl(const Tensor& t, int64_t C, int64_t L) {
  Strided s = t.strided();
  s.shape = {t.size(0), C, L};
  s.strides = {C * L, L, 1};
  return s;
}

/// The whole batch's statistics from each process's count n_p, mean mu_p and biased variance s2_p,
/// [C] each (one all_gather of [mu_p, s2_p, n_p]), N = sum_p n_p:
///   mu = sum_p n_p mu_p / N,  s2 = sum_p n_p (s2_p + (mu_p - mu)^2) / N
/// mu and s2 are replaced by the whole batch's; returns N. In float64, as the kernels accumulate.
int64_t combine_stats(const BatchNormSync& sync, int64_t n, Tensor& mu, Tensor& s2) {
  const int64_t C = mu.numel();
  const Tensor mine = cat(
      {mu.to(kFloat64), s2.to(kFloat64), full({1}, static_cast<double>(n), kFloat64, mu.device())},
      0);
  const Tensor all = sync.all_gather(mine);
  VT_CHECK(all.defined() && all.dim() == 2 && all.size(1) == 2 * C + 1,
           "batch_norm: BatchNormSync::all_gather must return [processes, {}] for a [{}] tensor, "
           "got {}",
           2 * C + 1, 2 * C + 1, all.defined() ? all.shape().str() : std::string("undefined"));
  const Tensor counts = narrow(all, 1, 2 * C, 1);  // [P, 1]
  const double total = sum(counts).item();
  const Tensor mean = mul(sum(mul(narrow(all, 1, 0, C), counts), {0}), 1.0 / total);
  const Tensor dev = sub(narrow(all, 1, 0, C), mean);
  const Tensor var =
      mul(sum(mul(add(narrow(all, 1, C, C), mul(dev, dev)), counts), {0}), 1.0 / total);
  mu = mean.to(mu.dtype());
  s2 = var.to(s2.dtype());
  return static_cast<int64_t>(std::llround(total));
}

// ---- Batch-invariant statistics (ops/batch_tree.h; CPU only) -------------------------------
/// The statistics of a part of the batch, in float64: its count, mean and sum of squared
/// deviations m2 (the biased variance is m2 / n), per channel.
struct Moments {
  double n = 0;
  std::vector<double> mean, m2;
};

/// Two parts' moments as one (Chan et al.'s pairwise update):
///   n = na + nb,  delta = mean_b - mean_a,  mean = mean_a + delta nb / n,
///   m2 = m2_a + m2_b + delta^2 na nb / n
Moments combine(const Moments& a, const Moments& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  Moments r;
  r.n = a.n + b.n;
  r.mean.resize(a.mean.size());
  r.m2.resize(a.mean.size());
  for (size_t c = 0; c < a.mean.size(); ++c) {
    const double delta = b.mean[c] - a.mean[c];
    r.mean[c] = a.mean[c] + delta * b.n / r.n;
    r.m2[c] = a.m2[c] + b.m2[c] + delta * delta * a.n * b.n / r.n;
  }
  return r;
}

/// The parts combined in the batch's tree: pairwise, bottom up (as tree_sum_partials adds).
Moments tree_combine(std::vector<Moments> parts) {
  const size_t L = parts.size();
  for (size_t s = 1; s < L; s *= 2)
    for (size_t i = 0; i + s < L; i += 2 * s) parts[i] = combine(parts[i], parts[i + s]);
  return parts.empty() ? Moments{} : parts[0];
}

/// Rows of [rows, C] values (any float dtype) as float64 vectors, on the host.
std::vector<std::vector<double>> host_rows(const Tensor& t) {
  const Tensor d = t.to(kFloat64).contiguous();
  const double* p = d.data<double>();
  const int64_t C = d.size(1);
  std::vector<std::vector<double>> rows;
  for (int64_t r = 0; r < d.size(0); ++r) rows.emplace_back(p + r * C, p + (r + 1) * C);
  return rows;
}

/// Training statistics in the batch's fixed tree: the stats kernel on each leaf of images (one
/// thread each), the leaves' moments combined pairwise in float64; with sync, each process's
/// node is gathered (float64) and the nodes combined in the same tree, so any number of
/// processes (a power of two, each holding whole leaves) gives one process's bits.
int64_t tree_stats(Backend& be, const Tensor& xc, const BatchNormSync& sync, int64_t L, Tensor& mu,
                   Tensor& s2) {
  const int64_t B = xc.size(0), C = mu.numel();
  const int64_t leaves = (B + detail::kBatchLeaf - 1) / detail::kBatchLeaf;
  std::vector<Moments> parts;
  if (B > 0 && L > 0) {
    Tensor lm = empty_on(xc, {leaves, C}, xc.dtype()), lv = empty_on(xc, {leaves, C}, xc.dtype());
    detail::for_each_leaf(B, [&](int64_t b0, int64_t n) {
      const int64_t l = b0 / detail::kBatchLeaf;
      be.batch_norm_stats(bcl(narrow(xc, 0, b0, n), C, L), narrow(lm, 0, l, 1).strided(),
                          narrow(lv, 0, l, 1).strided());
    });
    const auto means = host_rows(lm), vars = host_rows(lv);
    for (int64_t l = 0; l < leaves; ++l) {
      Moments m;
      m.n = static_cast<double>(std::min(detail::kBatchLeaf, B - l * detail::kBatchLeaf) * L);
      m.mean = means[l];
      m.m2 = vars[l];
      for (double& v : m.m2) v *= m.n;
      parts.push_back(std::move(m));
    }
  }
  Moments all = tree_combine(std::move(parts));
  if (all.n == 0) all = {0, std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
  if (sync.all_gather) {
    std::vector<double> mine = all.mean;
    mine.insert(mine.end(), all.m2.begin(), all.m2.end());
    mine.push_back(all.n);
    const Tensor gathered = sync.all_gather(from_vector(mine, {2 * C + 1}, kFloat64));
    VT_CHECK(gathered.defined() && gathered.dim() == 2 && gathered.size(1) == 2 * C + 1,
             "batch_norm: BatchNormSync::all_gather must return [processes, {}] for a [{}] "
             "tensor",
             2 * C + 1, 2 * C + 1);
    std::vector<Moments> nodes;
    for (const auto& row : host_rows(gathered))
      nodes.push_back(
          {row[2 * C], {row.begin(), row.begin() + C}, {row.begin() + C, row.begin() + 2 * C}});
    all = tree_combine(std::move(nodes));
  }
  std::vector<double> var(all.m2);
  for (double& v : var) v = all.n > 0 ? v / all.n : 0.0;
  mu = from_vector(all.mean, {C}, kFloat64).to(xc.dtype());
  s2 = from_vector(var, {C}, kFloat64).to(xc.dtype());
  return static_cast<int64_t>(std::llround(all.n));
}

// ---- The steps of batch_norm_impl -----------------------------------------------------------
/// batch_norm's argument checks, with their messages.
void check_arguments(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool training) {
  detail::check_defined(x, "batch_norm", "x");
  detail::check_float(x, "batch_norm");
  VT_CHECK(x.dim() >= 2, "batch_norm: expected x [B, C, ...], got shape {}", x.shape());
  const int64_t C = x.size(1);
  auto check_channel = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    VT_CHECK(t.dim() == 1 && t.size(0) == C,
             "batch_norm: {} must have shape [{}] (x has {} channels), got {}", name, C, C,
             t.shape());
  };
  check_channel(running_mean, "running_mean");
  check_channel(running_var, "running_var");
  check_channel(weight, "weight");
  check_channel(bias, "bias");
  VT_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var go together (one of them is undefined)");
  VT_CHECK(training || running_mean.defined(),
           "batch_norm: eval mode needs running_mean and running_var");
}

/// The training forward's statistics mu and s2 [C] of xc [B, C, L] (the whole batch's with
/// sync), and the running statistics updated; returns the count of values per channel.
int64_t training_stats(Backend& be, const Tensor& xc, int64_t L, const BatchNormSync& sync,
                       const Tensor& running_mean, const Tensor& running_var, double momentum,
                       Tensor& mu, Tensor& s2) {
  const int64_t C = xc.size(1), n = xc.size(0) * L;
  mu = empty_on(xc, {C}, xc.dtype());
  s2 = empty_on(xc, {C}, xc.dtype());
  int64_t count = n;  // values per channel: this batch's, or with sync the whole batch's
  if (detail::batch_invariant(xc)) {
    count = tree_stats(be, xc, sync, L, mu, s2);
  } else {
    if (n > 0) {
      be.batch_norm_stats(bcl(xc, C, L), mu.strided(), s2.strided());
    } else {  // (a process with no images of a synced batch)
      mu.zero_();
      s2.zero_();
    }
    if (sync.all_gather) count = combine_stats(sync, n, mu, s2);
  }
  VT_CHECK(count > 1,
           "batch_norm: expected more than 1 value per channel when training, got input shape "
           "{}{}",
           xc.shape(), sync.all_gather ? fmt::format(" ({} values in all processes)", count) : "");
  if (running_mean.defined()) {
    Tensor rm = running_mean, rv = running_var;
    rm.mul_(1 - momentum).add_(mu, momentum);
    rv.mul_(1 - momentum)
        .add_(s2, momentum * static_cast<double>(count) / static_cast<double>(count - 1));
  }
  return count;
}

/// sum_dy = sum dy and dot = sum dy (x - mu) over b and l, [C] each; and, when rstd is defined,
/// dw = dot rstd. Batch-invariant, each is a sum in the batch's tree, dw's of each leaf's
/// dot rstd: so that a process's share of dw, summed over the processes, is one process's dw
/// (rstd (dot_a + dot_b) is not rstd dot_a + rstd dot_b in floating point).
std::array<Tensor, 3> backward_sums(Backend& be, const Tensor& xc, const Tensor& dyc,
                                    const Tensor& mu, int64_t L, const Tensor& rstd) {
  const int64_t B = xc.size(0), C = mu.numel();
  if (detail::use_batch_tree(xc, B)) {
    std::vector<Dims> shapes{Dims{C}, Dims{C}};
    if (rstd.defined()) shapes.push_back(Dims{C});
    const auto sums = detail::batch_tree_sum(
        xc, B, shapes, xc.dtype(), [&](int64_t b0, int64_t n, std::vector<Tensor>& parts) {
          be.batch_norm_backward_reduce(bcl(narrow(xc, 0, b0, n), C, L), mu.strided(),
                                        bcl(narrow(dyc, 0, b0, n), C, L), parts[0].strided(),
                                        parts[1].strided());
          if (rstd.defined())
            be.binary(BinaryOp::Mul, parts[1].strided(), rstd.strided(), parts[2].strided());
        });
    return {sums[0], sums[1], rstd.defined() ? sums[2] : Tensor()};
  }
  Tensor sum_dy = empty_on(xc, {C}, xc.dtype()), dot = empty_on(xc, {C}, xc.dtype());
  be.batch_norm_backward_reduce(bcl(xc, C, L), mu.strided(), bcl(dyc, C, L), sum_dy.strided(),
                                dot.strided());
  return {sum_dy, dot, rstd.defined() ? mul(dot, rstd) : Tensor()};
}

/// sum_dy and dot summed over the processes of a synced batch (float64 on the wire; added in the
/// batch's tree, in the input's dtype, when batch-invariant).
std::pair<Tensor, Tensor> synced_sums(const BatchNormSync& sync, const Tensor& sum_dy,
                                      const Tensor& dot) {
  const int64_t C = sum_dy.numel();
  const Tensor all = sync.all_gather(cat({sum_dy, dot}, 0).to(kFloat64));  // [P, 2 C]
  const Tensor sums = detail::batch_invariant(sum_dy)
                          ? detail::tree_sum_partials(all.to(sum_dy.dtype()).contiguous())
                          : sum(all, {0}).to(sum_dy.dtype());
  return {narrow(sums, 0, 0, C), narrow(sums, 0, C, C)};
}

/// batch_norm, then (relu) y = max(y + residual, 0) in the same pass (see the file comment).
Tensor batch_norm_impl(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const BatchNormSync& sync, const Tensor& residual, bool relu) {
  check_arguments(x, running_mean, running_var, weight, bias, training);
  const int64_t B = x.size(0), C = x.size(1);
  const int64_t L = C == 0 || B == 0 ? 0 : x.numel() / (B * C);
  int64_t count = B * L;
  Backend& be = x.backend();
  const Tensor xc = plain(x);

  // The per-channel statistics and y = x a + d (a = rstd w, d = b - mu a), all [C].
  Tensor mu, rstd, a;
  Tensor y = empty_on(x, x.shape(), x.dtype());
  {
    NoGradGuard no_grad;
    if (training) {
      Tensor s2;
      count = training_stats(be, xc, L, sync, running_mean, running_var, momentum, mu, s2);
      rstd = rsqrt(add(s2, eps));
    } else {
      mu = running_mean.clone();  // a copy: a later training forward updates the buffer in place
      rstd = rsqrt(add(plain(running_var), eps));
    }
    a = weight.defined() ? mul(rstd, plain(weight)) : rstd;
    const Tensor ma = mul(mu, a);
    const Tensor d = bias.defined() ? sub(plain(bias), ma) : neg(ma);
    if (!relu) {
      be.channel_affine(bcl(xc, C, L), a.strided(), Strided(), Strided(), d.strided(),
                        bcl(y, C, L));
    } else {
      const Tensor rc = residual.defined() ? plain(residual) : Tensor();
      be.channel_affine_relu(bcl(xc, C, L), a.strided(), d.strided(),
                             residual.defined() ? bcl(rc, C, L) : Strided(), bcl(y, C, L));
    }
  }

  std::vector<Tensor> inputs{x, weight, bias};
  if (residual.defined()) inputs.push_back(residual);
  // With the ReLU, its gradient masks dy by y > 0: y is kept detached (the output's own node must
  // not be held by its closure), as relu keeps its input.
  return record(y, relu ? "batch_norm_relu" : "batch_norm", inputs,
                [sx = save(x), sw = save(weight), mu, rstd, a, training, count, sync, C, L,
                 out = relu ? y.detach() : Tensor(), has_residual = residual.defined()](
                    const Tensor& dy_in, const Needs& needs) -> Grads {
                  const Tensor& x = sx.get();
                  const Tensor& w = sw.get();
                  Tensor dy = dy_in;
                  if (out.defined()) {  // dy of max(., 0): dy where y > 0
                    NoGradGuard no_grad;
                    dy = empty_on(out, out.shape(), out.dtype());
                    out.backend().binary(BinaryOp::ReluBackward, out.strided(),
                                         detail::broadcast_view(dy_in, out.shape()), dy.strided());
                  }
                  const Tensor xc = plain(x), dyc = plain(dy);
                  Backend& be = x.backend();
                  Tensor sum_dy, dot, dx, dw, db;
                  {
                    NoGradGuard no_grad;  // the results get their (refusing) node below
                    if (training || needs[1] || needs[2]) {
                      auto sums = backward_sums(be, xc, dyc, mu, L, needs[1] ? rstd : Tensor());
                      sum_dy = sums[0];
                      dot = sums[1];
                      dw = sums[2];
                    }
                    if (needs[0] && training) {
                      // with sync: summed over the processes
                      const auto [all_dy, all_dot] =
                          sync.all_gather ? synced_sums(sync, sum_dy, dot) : std::pair{sum_dy, dot};
                      // dx = dy a + x (-k a) + (mu k - sum_dy / n) a,  k = dot rstd^2 / n
                      const double inv_n = 1.0 / static_cast<double>(count);
                      const Tensor k = mul(mul(all_dot, mul(rstd, rstd)), inv_n);
                      const Tensor xcoef = neg(mul(k, a));
                      const Tensor d = mul(sub(mul(mu, k), mul(all_dy, inv_n)), a);
                      dx = empty_on(x, x.shape(), x.dtype());
                      be.channel_affine(bcl(dyc, C, L), a.strided(), bcl(xc, C, L), xcoef.strided(),
                                        d.strided(), bcl(dx, C, L));
                    } else if (needs[0]) {  // eval: dx = dy a
                      Dims per_channel(std::vector<int64_t>(static_cast<size_t>(x.dim()), 1));
                      per_channel[1] = C;
                      dx = mul(dyc, reshape(a, per_channel));
                    }
                    if (needs[2]) db = sum_dy;
                  }
                  auto refuse = [&](const Tensor& g) {
                    return g.defined()
                               ? detail::no_double_backward(g, "batch_norm_backward", {x, w, dy_in})
                               : g;
                  };
                  Grads grads{refuse(dx), refuse(dw), refuse(db)};
                  if (has_residual) grads.push_back(needs[3] ? refuse(dy) : Tensor());
                  return grads;
                });
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps, const BatchNormSync& sync) {
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, momentum, eps, sync,
                         Tensor(), false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const Tensor& residual, const BatchNormSync& sync) {
  if (residual.defined()) {
    detail::check_same(x, residual, "batch_norm_relu");
    VT_CHECK(residual.shape() == x.shape(),
             "batch_norm_relu: the residual must have x's shape {}, got {}", x.shape(),
             residual.shape());
  }
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, momentum, eps, sync,
                         residual, true);
}

}  // namespace vitrine::ops
