// L-BFGS as torch.optim.LBFGS (PyTorch 1.13, after minFunc), with its optional strong-Wolfe line
// search. All parameters are seen as one flat vector x, g = df/dx (zeros for a parameter without
// a gradient). One step(closure) runs at most max_iter iterations of:
//
//   first iteration ever:  d = -g, no history, H = 1
//   later:                 y = g - g_prev,  s = t d                  (the last step taken)
//                          if y.s > 1e-10: keep (y, s, rho = 1 / y.s), dropping the oldest past
//                                          history_size, and H = y.s / y.y
//                          d = -(two-loop recursion of the history applied to g, from H I)
//   step length:           t = min(1, 1 / |g|_1) lr on the first iteration ever, else lr
//   stop if g.d > -tolerance_change (not a descent direction)
//   strong_wolfe:          t from the line search (c1 = 1e-4, c2 = 0.9, 25 evaluations at most,
//                          bracketing then a zoom by safeguarded cubic interpolation)
//   x = x + t d
//   stop when max_iter iterations or max_eval evaluations are done, max |g| <= tolerance_grad,
//   max |t d| <= tolerance_change, or |f - f_prev| < tolerance_change.
//
// Without a line search the loss is evaluated once per iteration (not after the last one), so a
// call with max_iter = 1 is one fixed step of t lr along d. The state (d, t, the history, H,
// g_prev, f_prev, the counters) lives across calls, so repeated calls continue one run. As
// PyTorch, one parameter group only; all parameters share one dtype and device.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nn/optim/optimizer.h"

namespace vitrine::nn::optim {

struct LBFGSOptions {
  double lr = 1;  // only for the constructor from a parameter list
  /// Iterations per step(closure).
  int64_t max_iter = 20;
  /// Function evaluations per step(closure); max_iter * 5 / 4 (integer division) when not given.
  std::optional<int64_t> max_eval = std::nullopt;
  /// Stop when max |g| <= tolerance_grad (first-order optimality).
  double tolerance_grad = 1e-7;
  /// Stop when the loss, the step or the directional derivative changes less than this.
  double tolerance_change = 1e-9;
  /// Pairs (y, s) kept.
  int64_t history_size = 100;
  /// "" (PyTorch's None: fixed steps of lr) or "strong_wolfe".
  std::string line_search_fn = "";
};

/// torch.optim.LBFGS. Use step(closure): the closure zeroes the gradients, computes the loss,
/// calls backward() and returns the loss; it runs with gradients on, up to max_eval times.
class LBFGS : public Optimizer {
 public:
  /// One group holding params, with options.lr.
  explicit LBFGS(std::vector<Tensor> params, const LBFGSOptions& options = {});
  /// Exactly one group (LBFGS has no per-group options); its weight_decay must be 0.
  explicit LBFGS(std::vector<ParamGroup> groups, const LBFGSOptions& options = {});

  std::string type_name() const override { return "LBFGS"; }
  /// Refused: L-BFGS evaluates the loss several times per step; call step(closure).
  void step() override;
  /// Runs the iterations above; returns the loss of the closure's first evaluation (before any
  /// update), as PyTorch's step.
  Tensor step(const LossClosure& closure) override;

  /// The options (max_eval filled in; lr is the group's).
  LBFGSOptions options() const;
  /// Iterations run so far, over all calls (PyTorch's state["n_iter"]).
  int64_t n_iter() const { return n_iter_; }
  /// Closure evaluations so far, over all calls (state["func_evals"]).
  int64_t func_evals() const { return func_evals_; }
  /// (y, s) pairs currently in the history.
  size_t history_length() const { return old_dirs_.size(); }

  /// Flat tensors [numel] "0.0.d", "0.0.prev_flat_grad", "0.0.old_dirs.<k>", "0.0.old_stps.<k>"
  /// (state kept on the first parameter, as PyTorch's); JSON {"type", the options, "groups",
  /// "n_iter", "func_evals", "has_state", "t", "H_diag", "prev_loss", "ro": [...]}. load_state
  /// restores the options too, as PyTorch's load_state_dict.
  NamedTensors state_tensors() const override;
  nlohmann::json state_json() const override;
  void load_state(const NamedTensors& tensors, const nlohmann::json& json) override;

 private:
  /// The gradients as one flat vector [numel] (zeros where a parameter has none): a copy.
  Tensor gather_flat_grad() const;
  /// x = x + step d, parameter by parameter.
  void add_grad(double step, const Tensor& d);
  std::vector<Tensor> clone_params() const;
  void set_params(const std::vector<Tensor>& values);
  /// A scalar as PyTorch's 0-dim tensor in the parameters' dtype holds it (rounded to float for
  /// float32 parameters).
  double fit(double x) const;

  int64_t max_iter_, max_eval_, history_size_;
  double tolerance_grad_, tolerance_change_;
  std::string line_search_fn_;
  int64_t numel_ = 0;

  // PyTorch's state (undefined / empty until the first iteration).
  int64_t n_iter_ = 0, func_evals_ = 0;
  Tensor d_, prev_flat_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::vector<Tensor> old_dirs_, old_stps_;  // y and s, oldest first
  std::vector<double> ro_;                   // 1 / y.s
};

}  // namespace vitrine::nn::optim
