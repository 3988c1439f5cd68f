// Adam and AdamW: per-parameter state, steps through Backend::adam_step, state save/load.
#include "nn/optim/adam.h"

#include <cmath>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "backends/gpu_paths.h"
#include "nn/optim/detail.h"
#include "ops/ops.h"

namespace vitrine::nn::optim {

namespace {

AdamOptions adam_options(const AdamWOptions& o) {
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(detail::one_group(std::move(params), options.lr, options.weight_decay), options, false) {
}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam(std::move(groups), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled)
    : Optimizer(detail::validated(decoupled ? "AdamW" : "Adam", std::move(groups))),
      beta1_(options.beta1),
      beta2_(options.beta2),
      eps_(options.eps),
      decoupled_(decoupled) {
  const std::string type = type_name();
  VT_CHECK(beta1_ >= 0 && beta1_ < 1, "{}: beta1 must be in [0, 1), got {}", type, beta1_);
  VT_CHECK(beta2_ >= 0 && beta2_ < 1, "{}: beta2 must be in [0, 1), got {}", type, beta2_);
  VT_CHECK(eps_ >= 0, "{}: eps must be >= 0, got {}", type, eps_);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(detail::one_group(std::move(params), options.lr, options.weight_decay),
           adam_options(options), true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Adam(std::move(groups), adam_options(options), true) {}

int64_t Adam::step_count(size_t g, size_t i) const {
  VT_CHECK(g < groups_.size() && i < groups_[g].params.size(),
           "{}: step_count: no parameter {} in param group {}", type_name(), i, g);
  return g < state_.size() && i < state_[g].size() ? state_[g][i].step : 0;
}

void Adam::step() {
  NoGradGuard no_grad;
  const std::string type = type_name();
  state_.resize(groups_.size());
  // With the multi-tensor path on (GpuPath::MultiTensorAdam, opt-in until a GPU run passes it:
  // VITRINE_MULTI_TENSOR_ADAM=1 or set_gpu_path_enabled), within a group, contiguous parameters
  // with contiguous gradients of their dtype, on one device and at one step count, go to
  // Backend::adam_step_multi together (one launch on CUDA, not one per tensor); the others, and
  // all of them with the path off, through adam_step one by one. The results are the same
  // either way.
  const bool multi = gpu_path_enabled(GpuPath::MultiTensorAdam);
  std::vector<AdamTensors> batch;
  std::vector<Tensor> batch_grads;  // alive until the batch has run
  Device batch_device;
  DType batch_dtype = DType::Float32;
  AdamStep batch_options{};
  auto flush = [&] {
    if (batch.empty()) return;
    backend_for(batch_device).adam_step_multi(batch, batch_options);
    batch.clear();
    batch_grads.clear();
  };
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    state_[g].resize(group.params.size());
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = detail::step_grad(type, group, g, i);
      if (!grad.defined()) continue;
      ParamState& s = state_[g][i];
      if (s.step == 0) {
        s.exp_avg = ops::zeros_like(p);
        s.exp_avg_sq = ops::zeros_like(p);
      } else {
        detail::check_state_fits(type, s.exp_avg, detail::state_key(g, i, "exp_avg"), p);
      }
      ++s.step;
      const AdamStep o{group.lr, beta1_, beta2_, eps_, group.weight_decay, s.step, decoupled_};
      if (multi && p.is_contiguous() && grad.is_contiguous() && grad.dtype() == p.dtype()) {
        if (!batch.empty() && (p.device() != batch_device || p.dtype() != batch_dtype ||
                               s.step != batch_options.step))
          flush();
        batch_device = p.device();
        batch_dtype = p.dtype();
        batch_options = o;
        batch.push_back({p.strided(), grad.strided(), s.exp_avg.strided(), s.exp_avg_sq.strided()});
        batch_grads.push_back(grad);
        p.bump_version();
      } else {
        detail::update_in_place(p, [&](const Tensor& w) {
          w.backend().adam_step(w.strided(), grad.strided(), s.exp_avg.strided(),
                                s.exp_avg_sq.strided(), o);
        });
      }
      s.exp_avg.bump_version();
      s.exp_avg_sq.bump_version();
    }
    flush();  // the next group has its own lr and weight decay
  }
}

NamedTensors Adam::state_tensors() const {
  NamedTensors out;
  for (size_t g = 0; g < state_.size(); ++g) {
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const ParamState& s = state_[g][i];
      if (s.step == 0) continue;
      out.emplace_back(detail::state_key(g, i, "exp_avg"), s.exp_avg);
      out.emplace_back(detail::state_key(g, i, "exp_avg_sq"), s.exp_avg_sq);
    }
  }
  return out;
}

nlohmann::json Adam::state_json() const {
  return detail::adam_state_json(type_name(), beta1_, beta2_, eps_, groups_,
                                 [&](size_t g, size_t i) { return step_count(g, i); });
}

void Adam::load_state(const NamedTensors& tensors, const nlohmann::json& j) {
  const std::string type = type_name();
  // Everything is read and checked before anything changes, so a failed load leaves this
  // optimizer as it was.
  std::vector<std::vector<ParamState>> state(groups_.size());
  double beta1, beta2, eps;
  try {
    detail::check_state_groups(type, groups_, j);
    beta1 = j.at("beta1").get<double>();
    beta2 = j.at("beta2").get<double>();
    eps = j.at("eps").get<double>();
    VT_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && eps >= 0,
             "{}: load_state: invalid hyperparameters (beta1 {}, beta2 {}, eps {}; expected betas "
             "in [0, 1) and eps >= 0)",
             type, beta1, beta2, eps);
    detail::StateReader reader(type, tensors);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const auto& steps = j["groups"][g].at("steps");
      VT_CHECK(steps.is_array() && steps.size() == groups_[g].params.size(),
               "{}: load_state: {} needs one step count per parameter ({}), got {}", type,
               detail::group_label(groups_[g], g), groups_[g].params.size(), steps.dump());
      state[g].resize(groups_[g].params.size());
      for (size_t i = 0; i < state[g].size(); ++i) {
        ParamState& s = state[g][i];
        const Tensor& p = groups_[g].params[i];
        s.step = steps[i].get<int64_t>();
        VT_CHECK(s.step >= 0, "{}: load_state: negative step count {} for {}, parameter {}", type,
                 s.step, detail::group_label(groups_[g], g), i);
        if (s.step == 0) continue;
        s.exp_avg = reader.take(detail::state_key(g, i, "exp_avg"), p);
        s.exp_avg_sq = reader.take(detail::state_key(g, i, "exp_avg_sq"), p);
      }
    }
    reader.check_all_taken();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: load_state: malformed state JSON: {}", type, e.what());
  }
  detail::load_group_hyperparameters(groups_, j);
  beta1_ = beta1;
  beta2_ = beta2;
  eps_ = eps;
  state_ = std::move(state);
}

}  // namespace vitrine::nn::optim
