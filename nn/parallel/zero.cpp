// ZeRO-1 Adam(W): the flat layout, reduce-scatter, the sliced update and the all-gather (zero.h).
#include "nn/parallel/zero.h"

#include <cmath>
#include <map>
#include <memory>

#include "autograd/grad_mode.h"
#include "nn/optim/detail.h"
#include "nn/parallel/collectives.h"
#include "ops/ops.h"

namespace vitrine::nn {

ZeroAdam::ZeroAdam(std::vector<optim::ParamGroup> groups, const optim::AdamOptions& options,
                   bool decoupled, double max_grad_norm, dist::ProcessGroup* group)
    : Optimizer(optim::detail::validated(decoupled ? "AdamW" : "Adam", std::move(groups))),
      beta1_(options.beta1),
      beta2_(options.beta2),
      eps_(options.eps),
      max_grad_norm_(max_grad_norm),
      decoupled_(decoupled) {
  const std::string type = "ZeRO-1 " + type_name();
  VT_CHECK(beta1_ >= 0 && beta1_ < 1 && beta2_ >= 0 && beta2_ < 1 && eps_ >= 0,
           "{}: betas must be in [0, 1) and eps >= 0 (got {}, {}, {})", type, beta1_, beta2_, eps_);
  VT_CHECK(max_grad_norm_ >= 0, "{}: max_grad_norm must be >= 0, got {}", type, max_grad_norm_);
  const Tensor& first = groups_.front().params.front();
  dtype_ = first.dtype();
  device_ = first.device();
  group_ = group ? group : &dist::group_for(device_);
  NoGradGuard no_grad;
  offsets_.resize(groups_.size());
  int64_t at = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : groups_[g].params) {
      VT_CHECK(p.dtype() == dtype_ && p.device() == device_,
               "{}: every parameter must be {} on {} (the flat vector has one dtype), got {} on {}",
               type, dtype_name(dtype_), device_.str(), dtype_name(p.dtype()), p.device().str());
      VT_CHECK(p.is_contiguous(), "{}: parameter of shape {} is not contiguous", type, p.shape());
      offsets_[g].push_back(at);
      at += p.numel();
    }
  }
  const int64_t n = group_->size();
  total_ = (at + n - 1) / n * n;
  shard_ = total_ / n;
  const int64_t begin = group_->rank() * shard_, end = begin + shard_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const int64_t off = offsets_[g][i], len = groups_[g].params[i].numel();
      const int64_t lo = std::max(off, begin), hi = std::min(off + len, end);
      if (lo < hi) segments_.push_back({g, i, lo - off, lo - begin, hi - lo});
    }
  }
  exp_avg_ = ops::zeros({shard_}, dtype_, device_);
  exp_avg_sq_ = ops::zeros({shard_}, dtype_, device_);
}

int64_t ZeroAdam::state_bytes() const {
  return 2 * shard_ * static_cast<int64_t>(dtype_size(dtype_));
}

void ZeroAdam::step() {
  NoGradGuard no_grad;
  // 1. Every rank's gradients, flat; rank r gets the average of its slice.
  Tensor flat = ops::zeros({total_}, dtype_, device_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      Tensor grad = optim::detail::step_grad(type_name(), groups_[g], g, i);
      if (grad.defined())
        flat.narrow(0, offsets_[g][i], p.numel()).copy_(grad.reshape({p.numel()}));
    }
  }
  Tensor grad = dist::reduce_scatter(flat, dist::ReduceOp::Average, group_);
  flat = Tensor();
  // 2. With clipping, the global norm from the slices' sums of squares.
  if (max_grad_norm_ > 0) {
    Tensor sq = ops::sum(ops::mul(grad, grad)).to(kFloat64).to(kCPU).contiguous();
    dist::all_reduce(sq, dist::ReduceOp::Sum, &dist::world());
    const double coef = max_grad_norm_ / (std::sqrt(sq.item()) + 1e-6);
    if (coef < 1) grad.mul_(coef);
  }
  // 3. Adam(W) on this rank's slice of each parameter.
  ++steps_;
  Tensor slice = ops::zeros({shard_}, dtype_, device_);
  for (const Segment& s : segments_) {
    const optim::ParamGroup& group = groups_[s.g];
    const Tensor& p = group.params[s.i];
    Tensor w = p.reshape({p.numel()}).narrow(0, s.param_offset, s.length);
    const AdamStep o{group.lr, beta1_, beta2_, eps_, group.weight_decay, steps_, decoupled_};
    w.backend().adam_step(w.strided(), grad.narrow(0, s.shard_offset, s.length).strided(),
                          exp_avg_.narrow(0, s.shard_offset, s.length).strided(),
                          exp_avg_sq_.narrow(0, s.shard_offset, s.length).strided(), o);
    slice.narrow(0, s.shard_offset, s.length).copy_(w);
  }
  exp_avg_.bump_version();
  exp_avg_sq_.bump_version();
  // 4. Everyone's updated slices, written back into every parameter.
  Tensor all = dist::all_gather(slice, group_).reshape({total_});
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      Tensor(p).copy_(all.narrow(0, offsets_[g][i], p.numel()).reshape(p.shape()));
    }
  }
}

Tensor ZeroAdam::gather_state(const Tensor& slot) const {
  return dist::all_gather(slot, group_).reshape({total_});
}

NamedTensors ZeroAdam::state_tensors() const {
  NamedTensors out;
  if (steps_ == 0) return out;
  NoGradGuard no_grad;
  const Tensor m = gather_state(exp_avg_), v = gather_state(exp_avg_sq_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      const int64_t off = offsets_[g][i];
      out.emplace_back(optim::detail::state_key(g, i, "exp_avg"),
                       m.narrow(0, off, p.numel()).reshape(p.shape()).clone());
      out.emplace_back(optim::detail::state_key(g, i, "exp_avg_sq"),
                       v.narrow(0, off, p.numel()).reshape(p.shape()).clone());
    }
  }
  return out;
}

nlohmann::json ZeroAdam::state_json() const {
  // Adam's format: every parameter has taken the same number of steps.
  return optim::detail::adam_state_json(type_name(), beta1_, beta2_, eps_, groups_,
                                        [&](size_t, size_t) { return steps_; });
}

void ZeroAdam::load_state(const NamedTensors& tensors, const nlohmann::json& j) {
  // Adam's own load_state reads and checks the whole-tensor state (groups, hyperparameters,
  // step counts, names and shapes); this rank then keeps its slices of it.
  std::unique_ptr<optim::Adam> whole;
  if (decoupled_)
    whole = std::make_unique<optim::AdamW>(groups_);
  else
    whole = std::make_unique<optim::Adam>(groups_);
  whole->load_state(tensors, j);
  int64_t steps = -1;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const int64_t s = whole->step_count(g, i);
      VT_CHECK(steps < 0 || s == steps,
               "ZeRO-1 {}: load_state: every parameter must have the same step count (the slices "
               "step together), got {} and {}",
               type_name(), steps, s);
      steps = s;
    }
  NoGradGuard no_grad;
  Tensor m = ops::zeros({shard_}, dtype_, device_), v = ops::zeros({shard_}, dtype_, device_);
  if (steps > 0) {
    std::map<std::string, Tensor> state;
    for (auto& [name, t] : whole->state_tensors()) state.emplace(name, t);
    for (const Segment& s : segments_) {
      const int64_t n = groups_[s.g].params[s.i].numel();
      auto slice = [&](const char* slot) {
        return state.at(optim::detail::state_key(s.g, s.i, slot))
            .reshape({n})
            .narrow(0, s.param_offset, s.length);
      };
      m.narrow(0, s.shard_offset, s.length).copy_(slice("exp_avg"));
      v.narrow(0, s.shard_offset, s.length).copy_(slice("exp_avg_sq"));
    }
  }
  groups_ = whole->param_groups();  // the hyperparameters load_state restored
  beta1_ = whole->beta1();
  beta2_ = whole->beta2();
  eps_ = whole->eps();
  steps_ = std::max<int64_t>(steps, 0);
  exp_avg_ = m;
  exp_avg_sq_ = v;
}

}  // namespace vitrine::nn
