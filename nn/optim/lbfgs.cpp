// LBFGS: the two-loop recursion and the iteration of torch.optim.LBFGS, and its strong-Wolfe line
// search (_strong_wolfe, _cubic_interpolate in torch/optim/lbfgs.py), in PyTorch's order of
// operations. Vectors are flat tensors composed with ops (any device), x + a y rounded once as
// PyTorch's add_(y, alpha=a); scalars are doubles (rounded to float where PyTorch holds a float32
// 0-dim tensor).
#include "nn/optim/lbfgs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "autograd/grad_mode.h"
#include "nn/optim/detail.h"
#include "ops/ops.h"

namespace vitrine::nn::optim {

namespace {

constexpr const char* kType = "LBFGS";

double dot(const Tensor& a, const Tensor& b) { return ops::sum(ops::mul(a, b)).item(); }
double abs_max(const Tensor& x) { return ops::max(ops::abs(x)).item(); }

/// y = y + alpha x (x contiguous, of y's shape) rounded once per element, as PyTorch's CPU
/// y.add_(x, alpha=alpha), an fma: Backend::sgd_step without momentum or weight decay computes
/// p = fma(g, -lr, p).
void axpy(const Tensor& y, const Tensor& x, double alpha) {
  const Tensor xc = x.contiguous();
  detail::update_in_place(y, [&](const Tensor& w) {
    w.backend().sgd_step(w.strided(), xc.strided(), Strided{},
                         SgdStep{-alpha, 0, 0, 0, /*nesterov=*/false, /*first=*/false});
  });
}

/// The loss a closure returned, as a number.
double loss_value(const Tensor& loss) {
  VT_CHECK(loss.defined() && loss.numel() == 1,
           "LBFGS: the closure must return the loss, a one-element tensor; got {}",
           loss.defined() ? fmt::format("shape {}", loss.shape()) : "an undefined tensor");
  return loss.item();
}

void check_options(const LBFGSOptions& o, double lr, int64_t max_eval) {
  VT_CHECK(lr > 0, "LBFGS: lr must be > 0, got {}", lr);
  VT_CHECK(o.max_iter >= 1, "LBFGS: max_iter must be >= 1, got {}", o.max_iter);
  VT_CHECK(max_eval >= 1, "LBFGS: max_eval must be >= 1, got {}", max_eval);
  VT_CHECK(o.tolerance_grad >= 0, "LBFGS: tolerance_grad must be >= 0, got {}", o.tolerance_grad);
  VT_CHECK(o.tolerance_change >= 0, "LBFGS: tolerance_change must be >= 0, got {}",
           o.tolerance_change);
  VT_CHECK(o.history_size >= 1, "LBFGS: history_size must be >= 1, got {}", o.history_size);
  VT_CHECK(o.line_search_fn.empty() || o.line_search_fn == "strong_wolfe",
           "LBFGS: line_search_fn must be \"\" (none) or \"strong_wolfe\", got \"{}\"; only "
           "'strong_wolfe' is supported",
           o.line_search_fn);
}

std::vector<ParamGroup> one_lbfgs_group(std::vector<ParamGroup> groups) {
  VT_CHECK(groups.size() == 1,
           "LBFGS: got {} param groups; LBFGS doesn't support per-parameter options (parameter "
           "groups): give it one group",
           groups.size());
  VT_CHECK(groups[0].lr > 0, "LBFGS: lr must be > 0, got {}", groups[0].lr);
  groups = detail::validated(kType, std::move(groups));
  const ParamGroup& group = groups[0];
  VT_CHECK(group.weight_decay == 0,
           "LBFGS: {} has weight_decay {}; LBFGS has no weight decay (add it to the loss)",
           detail::group_label(group, 0), group.weight_decay);
  const Tensor& p0 = group.params[0];
  for (size_t i = 1; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    VT_CHECK(p.dtype() == p0.dtype() && p.device() == p0.device(),
             "LBFGS: parameter {} is {} on {}, parameter 0 {} on {}; all parameters must share "
             "one dtype and device",
             i, dtype_name(p.dtype()), p.device().str(), dtype_name(p0.dtype()), p0.device().str());
  }
  return groups;
}

// ---- the line search ------------------------------------------------------------------------

/// The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to
/// bounds (the interval between x1 and x2 when not given); the bounds' midpoint when the cubic
/// has no minimum.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [xmin_bound, xmax_bound] =
      bounds ? *bounds : (x1 <= x2 ? std::pair{x1, x2} : std::pair{x2, x1});
  // d1 = g1 + g2 - 3 (f1 - f2) / (x1 - x2);  d2 = sqrt(d1^2 - g1 g2)
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                    : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    // Python's min(max(min_pos, lo), hi): each keeps its first argument unless the other wins.
    const double clamped_lo = xmin_bound > min_pos ? xmin_bound : min_pos;
    return xmax_bound < clamped_lo ? xmax_bound : clamped_lo;
  }
  return (xmin_bound + xmax_bound) / 2.;
}

struct Evaluation {
  double f;
  Tensor g;
};

struct LineSearchResult {
  double f;
  Tensor g;
  double t;
  int64_t evals;
};

/// The zoom's safeguard on a trial step t in the interval [a, b] (either order): a trial within
/// 10% of the interval's length from an end is accepted the first time unless it lies on (or
/// past) an end; after that it moves to 10% from the nearer end (PyTorch's insuf_progress).
double safeguard(double t, double a, double b, bool& insuf_progress) {
  const double b_max = std::max(a, b), b_min = std::min(a, b);
  const double eps = 0.1 * (b_max - b_min);
  if (std::min(b_max - t, t - b_min) >= eps) {
    insuf_progress = false;
    return t;
  }
  if (insuf_progress || t >= b_max || t <= b_min) {
    insuf_progress = false;
    return std::fabs(t - b_max) < std::fabs(t - b_min) ? b_max - eps : b_min + eps;
  }
  insuf_progress = true;
  return t;
}

/// The strong-Wolfe line search along d from the point where the loss is f, the gradient g and
/// g.d = gtd, starting at step t: f(t) <= f + c1 t gtd and |g(t).d| <= -c2 gtd. obj(t) evaluates
/// the loss and gradient at x + t d.
LineSearchResult strong_wolfe(const std::function<Evaluation(double)>& obj, double t,
                              const Tensor& d, double f, const Tensor& g_in, double gtd,
                              double tolerance_change, double c1 = 1e-4, double c2 = 0.9,
                              int max_ls = 25) {
  const double d_norm = abs_max(d);
  const Tensor g = g_in.clone();
  double f_new = 0, gtd_new = 0;
  Tensor g_new;
  int64_t evals = 0;
  auto evaluate = [&](double at) {
    Evaluation e = obj(at);
    f_new = e.f;
    g_new = std::move(e.g);
    ++evals;
    gtd_new = dot(g_new, d);
  };
  evaluate(t);

  // Bracket an interval holding a point that satisfies the conditions.
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int ls_iter = 0;
  size_t size = 0;  // 1: bracket[0] satisfies the conditions; 2: an interval
  std::array<double, 2> bracket{}, bracket_f{}, bracket_gtd{};
  std::array<Tensor, 2> bracket_g;
  auto set_interval = [&] {
    size = 2;
    bracket = {t_prev, t};
    bracket_f = {f_prev, f_new};
    bracket_g = {g_prev, g_new.clone()};
    bracket_gtd = {gtd_prev, gtd_new};
  };
  while (ls_iter < max_ls) {
    if (f_new > (f + c1 * t * gtd) || (ls_iter > 1 && f_new >= f_prev)) {
      set_interval();
      break;
    }
    if (std::fabs(gtd_new) <= -c2 * gtd) {
      size = 1;
      bracket[0] = t;
      bracket_f[0] = f_new;
      bracket_g[0] = g_new;
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      set_interval();
      break;
    }
    // Extrapolate by cubic interpolation within [t + 0.01 (t - t_prev), 10 t].
    const double min_step = t + 0.01 * (t - t_prev);
    const double max_step = t * 10;
    const double tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          std::pair{min_step, max_step});
    t_prev = tmp;
    f_prev = f_new;
    g_prev = g_new.clone();
    gtd_prev = gtd_new;
    evaluate(t);
    ++ls_iter;
  }
  if (ls_iter == max_ls) {  // no bracket found within max_ls evaluations
    size = 2;
    bracket = {0, t};
    bracket_f = {f, f_new};
    bracket_g = {g, g_new};
  }

  // Zoom: shrink the interval until a point satisfies the conditions.
  bool insuf_progress = false;
  int low = bracket_f[0] <= bracket_f[size - 1] ? 0 : 1;
  int high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::fabs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                          bracket_gtd[1]);
    t = safeguard(t, bracket[0], bracket[1], insuf_progress);
    evaluate(t);
    ++ls_iter;
    if (f_new > (f + c1 * t * gtd) || f_new >= bracket_f[low]) {
      // Armijo not satisfied, or not below the low end: the new point becomes the high end.
      bracket[high] = t;
      bracket_f[high] = f_new;
      bracket_g[high] = g_new.clone();
      bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1;
      high = 1 - low;
    } else {
      if (std::fabs(gtd_new) <= -c2 * gtd) {
        done = true;  // the Wolfe conditions hold
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        // The old low end becomes the high end.
        bracket[high] = bracket[low];
        bracket_f[high] = bracket_f[low];
        bracket_g[high] = bracket_g[low];
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t;
      bracket_f[low] = f_new;
      bracket_g[low] = g_new.clone();
      bracket_gtd[low] = gtd_new;
    }
  }
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

}  // namespace

// ---- LBFGS ----------------------------------------------------------------------------------

LBFGS::LBFGS(std::vector<Tensor> params, const LBFGSOptions& options)
    : LBFGS(detail::one_group(std::move(params), options.lr, 0), options) {}

LBFGS::LBFGS(std::vector<ParamGroup> groups, const LBFGSOptions& options)
    : Optimizer(one_lbfgs_group(std::move(groups))),
      max_iter_(options.max_iter),
      max_eval_(options.max_eval.value_or(options.max_iter * 5 / 4)),
      history_size_(options.history_size),
      tolerance_grad_(options.tolerance_grad),
      tolerance_change_(options.tolerance_change),
      line_search_fn_(options.line_search_fn) {
  check_options(options, groups_[0].lr, max_eval_);
  for (const Tensor& p : groups_[0].params) numel_ += p.numel();
}

LBFGSOptions LBFGS::options() const {
  return {groups_[0].lr,     max_iter_,     max_eval_,      tolerance_grad_,
          tolerance_change_, history_size_, line_search_fn_};
}

void LBFGS::step() {
  fail(
      "LBFGS: step() needs a closure that re-evaluates the loss (L-BFGS evaluates it several "
      "times per step); call step(closure)");
}

double LBFGS::fit(double x) const {
  return groups_[0].params[0].dtype() == kFloat32 ? static_cast<double>(static_cast<float>(x)) : x;
}

Tensor LBFGS::gather_flat_grad() const {
  const ParamGroup& group = groups_[0];
  std::vector<Tensor> views;
  views.reserve(group.params.size());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    const Tensor grad = detail::step_grad(kType, group, 0, i);
    views.push_back(grad.defined() ? grad.reshape({p.numel()})
                                   : ops::zeros({p.numel()}, p.dtype(), p.device()));
  }
  return ops::cat(views, 0);  // a new tensor: later zero_grad calls cannot change it
}

void LBFGS::add_grad(double step, const Tensor& d) {
  int64_t offset = 0;
  for (const Tensor& p : groups_[0].params) {
    const int64_t n = p.numel();
    axpy(p, d.narrow(0, offset, n).view(p.shape()), step);
    offset += n;
  }
  VT_ASSERT(offset == numel_);
}

std::vector<Tensor> LBFGS::clone_params() const {
  std::vector<Tensor> out;
  for (const Tensor& p : groups_[0].params) out.push_back(p.clone());
  return out;
}

void LBFGS::set_params(const std::vector<Tensor>& values) {
  for (size_t i = 0; i < values.size(); ++i) Tensor(groups_[0].params[i]).copy_(values[i]);
}

Tensor LBFGS::step(const LossClosure& closure) {
  VT_CHECK(static_cast<bool>(closure),
           "LBFGS: step(closure) needs a closure that returns the loss");
  NoGradGuard no_grad;
  auto evaluate = [&] {
    GradModeGuard grad(true);  // the closure always runs with gradients on
    return closure();
  };
  const double lr = groups_[0].lr;
  const bool wolfe = line_search_fn_ == "strong_wolfe";

  const Tensor orig_loss = evaluate();
  double loss = loss_value(orig_loss);
  int64_t current_evals = 1;
  ++func_evals_;
  Tensor flat_grad = gather_flat_grad();
  bool opt_cond = abs_max(flat_grad) <= fit(tolerance_grad_);
  if (opt_cond) return orig_loss;  // optimal already

  int64_t n_iter = 0;
  while (n_iter < max_iter_) {
    ++n_iter;
    ++n_iter_;

    // The descent direction.
    if (n_iter_ == 1) {
      d_ = ops::neg(flat_grad);
      old_dirs_.clear();
      old_stps_.clear();
      ro_.clear();
      h_diag_ = 1;
    } else {
      // Update the history with the last step s and the change of gradient y.
      const Tensor y = ops::sub(flat_grad, prev_flat_grad_);
      const Tensor s = ops::mul(d_, t_);
      const double ys = dot(y, s);
      if (ys > fit(1e-10)) {
        if (static_cast<int64_t>(old_dirs_.size()) == history_size_) {
          old_dirs_.erase(old_dirs_.begin());
          old_stps_.erase(old_stps_.begin());
          ro_.erase(ro_.begin());
        }
        old_dirs_.push_back(y);
        old_stps_.push_back(s);
        ro_.push_back(fit(1. / ys));
        h_diag_ = fit(ys / dot(y, y));  // the scale of the initial inverse Hessian
      }
      // Two-loop recursion: d = -H g, H the L-BFGS inverse Hessian from H_diag I.
      const size_t num_old = old_dirs_.size();
      std::vector<double> al(num_old);
      Tensor q = ops::neg(flat_grad);
      for (size_t k = num_old; k-- > 0;) {
        al[k] = fit(dot(old_stps_[k], q) * ro_[k]);
        axpy(q, old_dirs_[k], -al[k]);
      }
      Tensor r = ops::mul(q, h_diag_);
      for (size_t k = 0; k < num_old; ++k) {
        const double be = fit(dot(old_dirs_[k], r) * ro_[k]);
        axpy(r, old_stps_[k], fit(al[k] - be));
      }
      d_ = r;
    }
    prev_flat_grad_ = flat_grad.clone();
    prev_loss_ = loss;

    // The step length: min(1, 1 / |g|_1) lr on the very first iteration, else lr.
    if (n_iter_ == 1) {
      const double inv = fit(1. / ops::sum(ops::abs(flat_grad)).item());
      t_ = inv < 1. ? fit(inv * lr) : 1. * lr;
    } else {
      t_ = lr;
    }
    const double gtd = dot(flat_grad, d_);  // the directional derivative
    if (gtd > fit(-tolerance_change_)) break;

    int64_t ls_func_evals = 0;
    if (wolfe) {
      const std::vector<Tensor> x_init = clone_params();
      auto obj = [&](double step) {
        add_grad(step, d_);
        const double f = loss_value(evaluate());
        Tensor g = gather_flat_grad();
        set_params(x_init);
        return Evaluation{f, std::move(g)};
      };
      LineSearchResult ls = strong_wolfe(obj, t_, d_, loss, flat_grad, gtd, tolerance_change_);
      loss = ls.f;
      flat_grad = ls.g;
      t_ = ls.t;
      ls_func_evals = ls.evals;
      add_grad(t_, d_);
      opt_cond = abs_max(flat_grad) <= fit(tolerance_grad_);
    } else {
      // A fixed step; the loss is re-evaluated except after the last iteration.
      add_grad(t_, d_);
      if (n_iter != max_iter_) {
        loss = loss_value(evaluate());
        flat_grad = gather_flat_grad();
        opt_cond = abs_max(flat_grad) <= fit(tolerance_grad_);
        ls_func_evals = 1;
      }
    }
    current_evals += ls_func_evals;
    func_evals_ += ls_func_evals;

    // The stopping conditions, in PyTorch's order.
    if (n_iter == max_iter_) break;
    if (current_evals >= max_eval_) break;
    if (opt_cond) break;
    if (abs_max(ops::mul(d_, t_)) <= fit(tolerance_change_)) break;  // lack of progress
    if (std::fabs(loss - prev_loss_) < tolerance_change_) break;
  }
  return orig_loss;
}

// ---- state ----------------------------------------------------------------------------------

NamedTensors LBFGS::state_tensors() const {
  NamedTensors out;
  if (!d_.defined()) return out;
  out.emplace_back(detail::state_key(0, 0, "d"), d_);
  out.emplace_back(detail::state_key(0, 0, "prev_flat_grad"), prev_flat_grad_);
  for (size_t k = 0; k < old_dirs_.size(); ++k) {
    out.emplace_back(detail::state_key(0, 0, fmt::format("old_dirs.{}", k)), old_dirs_[k]);
    out.emplace_back(detail::state_key(0, 0, fmt::format("old_stps.{}", k)), old_stps_[k]);
  }
  return out;
}

nlohmann::json LBFGS::state_json() const {
  nlohmann::json groups = nlohmann::json::array();
  groups.push_back(detail::group_json(groups_[0]));
  return {{"type", type_name()},
          {"max_iter", max_iter_},
          {"max_eval", max_eval_},
          {"tolerance_grad", tolerance_grad_},
          {"tolerance_change", tolerance_change_},
          {"history_size", history_size_},
          {"line_search_fn", line_search_fn_},
          {"groups", std::move(groups)},
          {"n_iter", n_iter_},
          {"func_evals", func_evals_},
          {"has_state", d_.defined()},
          {"t", t_},
          {"H_diag", h_diag_},
          {"prev_loss", prev_loss_},
          {"ro", ro_}};
}

void LBFGS::load_state(const NamedTensors& tensors, const nlohmann::json& j) {
  // Everything is read and checked before anything changes, so a failed load leaves this
  // optimizer as it was.
  LBFGSOptions o;
  int64_t n_iter = 0, func_evals = 0;
  double t = 0, h_diag = 1, prev_loss = 0;
  Tensor d, prev_flat_grad;
  std::vector<Tensor> old_dirs, old_stps;
  std::vector<double> ro;
  try {
    detail::check_state_groups(kType, groups_, j);
    o.max_iter = j.at("max_iter").get<int64_t>();
    o.max_eval = j.at("max_eval").get<int64_t>();
    o.tolerance_grad = j.at("tolerance_grad").get<double>();
    o.tolerance_change = j.at("tolerance_change").get<double>();
    o.history_size = j.at("history_size").get<int64_t>();
    o.line_search_fn = j.at("line_search_fn").get<std::string>();
    check_options(o, j["groups"][0].at("lr").get<double>(), *o.max_eval);
    n_iter = j.at("n_iter").get<int64_t>();
    func_evals = j.at("func_evals").get<int64_t>();
    VT_CHECK(n_iter >= 0 && func_evals >= 0,
             "LBFGS: load_state: negative counters (n_iter {}, func_evals {})", n_iter, func_evals);
    std::map<std::string, Tensor> named;
    for (const auto& [name, tensor] : tensors) {
      VT_CHECK(named.emplace(name, tensor).second, "LBFGS: load_state: tensor {} is given twice",
               name);
    }
    const Tensor& p0 = groups_[0].params[0];
    size_t taken = 0;
    auto take = [&](const std::string& slot) {
      const std::string key = detail::state_key(0, 0, slot);
      auto it = named.find(key);
      VT_CHECK(it != named.end(), "LBFGS: load_state: state tensor {} is missing", key);
      const Tensor& v = it->second;
      VT_CHECK(v.defined() && v.shape() == Dims{numel_},
               "LBFGS: load_state: state tensor {} has shape {}, expected [{}] (all parameters "
               "as one flat vector)",
               key, v.defined() ? v.shape() : Dims{}, numel_);
      VT_CHECK(is_floating_point(v.dtype()),
               "LBFGS: load_state: state tensor {} has dtype {}, expected a floating-point dtype",
               key, dtype_name(v.dtype()));
      ++taken;
      return v.to(p0.device()).to(p0.dtype()).clone();
    };
    if (j.at("has_state").get<bool>()) {
      t = j.at("t").get<double>();
      h_diag = j.at("H_diag").get<double>();
      prev_loss = j.at("prev_loss").get<double>();
      ro = j.at("ro").get<std::vector<double>>();
      VT_CHECK(static_cast<int64_t>(ro.size()) <= o.history_size,
               "LBFGS: load_state: {} history entries, more than history_size {}", ro.size(),
               o.history_size);
      d = take("d");
      prev_flat_grad = take("prev_flat_grad");
      for (size_t k = 0; k < ro.size(); ++k) {
        old_dirs.push_back(take(fmt::format("old_dirs.{}", k)));
        old_stps.push_back(take(fmt::format("old_stps.{}", k)));
      }
    }
    VT_CHECK(taken == named.size(),
             "LBFGS: load_state: {} state tensors given, {} expected (\"0.0.d\", "
             "\"0.0.prev_flat_grad\" and \"0.0.old_dirs.<k>\", \"0.0.old_stps.<k>\" for k < {})",
             named.size(), taken, ro.size());
  } catch (const nlohmann::json::exception& e) {
    fail("LBFGS: load_state: malformed state JSON: {}", e.what());
  }
  detail::load_group_hyperparameters(groups_, j);
  max_iter_ = o.max_iter;
  max_eval_ = *o.max_eval;
  tolerance_grad_ = o.tolerance_grad;
  tolerance_change_ = o.tolerance_change;
  history_size_ = o.history_size;
  line_search_fn_ = o.line_search_fn;
  n_iter_ = n_iter;
  func_evals_ = func_evals;
  t_ = t;
  h_diag_ = h_diag;
  prev_loss_ = prev_loss;
  d_ = d;
  prev_flat_grad_ = prev_flat_grad;
  old_dirs_ = std::move(old_dirs);
  old_stps_ = std::move(old_stps);
  ro_ = std::move(ro);
}

}  // namespace vitrine::nn::optim
