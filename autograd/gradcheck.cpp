// gradcheck: the analytic Jacobian column by column (one backward per output element, with a
// one-hot output gradient) against central differences (f(x + eps) - f(x - eps)) / 2 eps, one
// input element at a time. float64 only, as torch.autograd.gradcheck; inputs on any device.
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    VT_CHECK(inputs[i].dtype() == kFloat64,
             "gradcheck: input {} is {}, expected float64 (finite "
             "differences in float32 are too coarse)",
             i, dtype_name(inputs[i].dtype()));
    VT_CHECK(inputs[i].is_leaf() && inputs[i].is_contiguous(),
             "gradcheck: input {} must be a contiguous leaf", i);
    checked.push_back(i);
  }
  VT_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  Tensor y = fn(inputs);
  VT_CHECK(y.dtype() == kFloat64, "gradcheck: the function returned {}, expected float64",
           dtype_name(y.dtype()));
  const int64_t ny = y.numel();

  // Analytic: row j of the Jacobian is d y_j / d inputs (one backward per output element).
  std::vector<std::vector<double>> analytic(checked.size());
  for (size_t k = 0; k < checked.size(); ++k)
    analytic[k].assign(static_cast<size_t>(inputs[checked[k]].numel() * ny), 0.0);
  std::vector<Tensor> wrt;
  for (size_t i : checked) wrt.push_back(inputs[i]);
  if (y.requires_grad()) {
    for (int64_t j = 0; j < ny; ++j) {
      std::vector<double> onehot(static_cast<size_t>(ny), 0.0);
      onehot[j] = 1;
      Tensor g = ops::from_vector(onehot, y.shape(), kFloat64).to(y.device());
      auto grads = grad({y}, wrt, {g}, /*retain_graph=*/true, false, /*allow_unused=*/true);
      for (size_t k = 0; k < checked.size(); ++k) {
        auto v = grads[k].to_vector<double>();
        for (size_t e = 0; e < v.size(); ++e) analytic[k][e * ny + j] = v[e];
      }
    }
  }

  // Numeric, and the worst element.
  // (Grad mode stays as it is: fn may itself call grad(), as a gradgradcheck does.)
  GradcheckResult res;
  double worst = -1;
  for (size_t k = 0; k < checked.size(); ++k) {
    Tensor x = inputs[checked[k]];
    // Elements are written through the backend, so that inputs on any device can be checked.
    const std::vector<double> values = x.to_vector<double>();
    auto set = [&x](int64_t e, double v) {
      x.backend().from_host(&v, static_cast<double*>(x.data_ptr()) + e, sizeof v);
    };
    for (int64_t e = 0; e < x.numel(); ++e) {
      const double orig = values[e];
      set(e, orig + opt.eps);
      auto yp = fn(inputs).to_vector<double>();
      set(e, orig - opt.eps);
      auto ym = fn(inputs).to_vector<double>();
      set(e, orig);
      for (int64_t j = 0; j < ny; ++j) {
        double num = (yp[j] - ym[j]) / (2 * opt.eps);
        double ana = analytic[k][e * ny + j];
        double err = std::fabs(ana - num);
        res.max_abs_error = std::max(res.max_abs_error, err);
        double excess = err - (opt.atol + opt.rtol * std::fabs(num));
        if (excess > 0 && excess > worst) {
          worst = excess;
          res.ok = false;
          res.message = fmt::format(
              "gradcheck: input {} (shape {}), element {}, output element {}: analytic {:.10g} vs "
              "numeric {:.10g} (|diff| {:.3g} > atol {} + rtol {} * |numeric|)",
              checked[k], x.shape(), e, j, ana, num, err, opt.atol, opt.rtol);
        }
      }
    }
  }
  return res;
}

}  // namespace vitrine
