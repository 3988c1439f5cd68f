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
#include <cmath>

#include "ops/helpers.h"

namespace vitrine::ops {

namespace {
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
}  // namespace

namespace {
/// batch_norm, then (relu) y = max(y + residual, 0) in the same pass (see the file comment).
Tensor batch_norm_impl(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const BatchNormSync& sync, const Tensor& residual, bool relu) {
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
  const int64_t B = x.size(0);
  const int64_t L = C == 0 || B == 0 ? 0 : x.numel() / (B * C);
  const int64_t n = B * L;
  int64_t count = n;  // values per channel: this batch's, or with sync the whole batch's
  using detail::empty_on;
  using detail::plain;
  // The kernels' view of a contiguous [B, C, *] tensor as [B, C, L].
  auto bcl = [B, C, L](const Tensor& t) {
    Strided s = t.strided();
    s.shape = {B, C, L};
    s.strides = {C * L, L, 1};
    return s;
  };
  Backend& be = x.backend();
  const Tensor xc = plain(x);

  // The per-channel statistics and y = x a + d (a = rstd w, d = b - mu a), all [C].
  Tensor mu, rstd, a;
  Tensor y = empty_on(x, x.shape(), x.dtype());
  {
    NoGradGuard no_grad;
    if (training) {
      mu = empty_on(x, {C}, x.dtype());
      Tensor s2 = empty_on(x, {C}, x.dtype());
      if (n > 0) {
        be.batch_norm_stats(bcl(xc), mu.strided(), s2.strided());
      } else {  // (a process with no images of a synced batch)
        mu.zero_();
        s2.zero_();
      }
      if (sync.all_gather) count = combine_stats(sync, n, mu, s2);
      VT_CHECK(count > 1,
               "batch_norm: expected more than 1 value per channel when training, got input "
               "shape {}{}",
               x.shape(),
               sync.all_gather ? fmt::format(" ({} values in all processes)", count) : "");
      if (running_mean.defined()) {
        Tensor rm = running_mean, rv = running_var;
        rm.mul_(1 - momentum).add_(mu, momentum);
        rv.mul_(1 - momentum)
            .add_(s2, momentum * static_cast<double>(count) / static_cast<double>(count - 1));
      }
      rstd = rsqrt(add(s2, eps));
    } else {
      mu = running_mean.clone();  // a copy: a later training forward updates the buffer in place
      rstd = rsqrt(add(plain(running_var), eps));
    }
    a = weight.defined() ? mul(rstd, plain(weight)) : rstd;
    const Tensor ma = mul(mu, a);
    const Tensor d = bias.defined() ? sub(plain(bias), ma) : neg(ma);
    if (!relu) {
      be.channel_affine(bcl(xc), a.strided(), Strided(), Strided(), d.strided(), bcl(y));
    } else {
      const Tensor rc = residual.defined() ? plain(residual) : Tensor();
      be.channel_affine_relu(bcl(xc), a.strided(), d.strided(),
                             residual.defined() ? bcl(rc) : Strided(), bcl(y));
    }
  }

  std::vector<Tensor> inputs{x, weight, bias};
  if (residual.defined()) inputs.push_back(residual);
  // With the ReLU, its gradient masks dy by y > 0: y is kept detached (the output's own node must
  // not be held by its closure), as relu keeps its input.
  return record(
      y, relu ? "batch_norm_relu" : "batch_norm", inputs,
      [sx = save(x), sw = save(weight), mu, rstd, a, training, count, sync, bcl,
       out = relu ? y.detach() : Tensor(),
       has_residual = residual.defined()](const Tensor& dy_in, const Needs& needs) -> Grads {
        const Tensor& x = sx.get();
        const Tensor& w = sw.get();
        Tensor dy = dy_in;
        if (out.defined()) {  // dy of max(., 0): dy where y > 0
          NoGradGuard no_grad;
          dy = detail::empty_on(out, out.shape(), out.dtype());
          out.backend().binary(BinaryOp::ReluBackward, out.strided(),
                               detail::broadcast_view(dy_in, out.shape()), dy.strided());
        }
        const Tensor xc = plain(x), dyc = plain(dy);
        const int64_t C = mu.numel();
        Backend& be = x.backend();
        Tensor sum_dy, dot, dx, dw, db;
        {
          NoGradGuard no_grad;  // the results get their (refusing) node below
          if (training || needs[1] || needs[2]) {
            sum_dy = empty_on(x, {C}, x.dtype());
            dot = empty_on(x, {C}, x.dtype());
            be.batch_norm_backward_reduce(bcl(xc), mu.strided(), bcl(dyc), sum_dy.strided(),
                                          dot.strided());
          }
          if (needs[0] && training) {
            Tensor all_dy = sum_dy, all_dot = dot;  // with sync: summed over the processes
            if (sync.all_gather) {
              const Tensor mine = cat({sum_dy, dot}, 0).to(kFloat64);
              const Tensor sums = sum(sync.all_gather(mine), {0}).to(x.dtype());
              all_dy = narrow(sums, 0, 0, C);
              all_dot = narrow(sums, 0, C, C);
            }
            // dx = dy a + x (-k a) + (mu k - sum_dy / n) a,  k = dot rstd^2 / n
            const double inv_n = 1.0 / static_cast<double>(count);
            const Tensor k = mul(mul(all_dot, mul(rstd, rstd)), inv_n);
            const Tensor xcoef = neg(mul(k, a));
            const Tensor d = mul(sub(mul(mu, k), mul(all_dy, inv_n)), a);
            dx = empty_on(x, x.shape(), x.dtype());
            be.channel_affine(bcl(dyc), a.strided(), bcl(xc), xcoef.strided(), d.strided(),
                              bcl(dx));
          } else if (needs[0]) {  // eval: dx = dy a
            Dims per_channel(std::vector<int64_t>(static_cast<size_t>(x.dim()), 1));
            per_channel[1] = C;
            dx = mul(dyc, reshape(a, per_channel));
          }
          if (needs[1]) dw = mul(dot, rstd);
          if (needs[2]) db = sum_dy;
        }
        auto refuse = [&](const Tensor& g) {
          return g.defined() ? detail::no_double_backward(g, "batch_norm_backward", {x, w, dy_in})
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
