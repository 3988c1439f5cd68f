// SGD: momentum buffers, steps through Backend::sgd_step, state save/load.
#include "nn/optim/sgd.h"

#include <utility>

#include "autograd/grad_mode.h"
#include "nn/optim/detail.h"
#include "ops/ops.h"

namespace vitrine::nn::optim {

namespace {

void check_options(double momentum, double dampening, bool nesterov) {
  VT_CHECK(momentum >= 0, "SGD: momentum must be >= 0, got {}", momentum);
  VT_CHECK(!nesterov || (momentum > 0 && dampening == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening = 0 (got momentum {}, "
           "dampening {})",
           momentum, dampening);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(detail::one_group(std::move(params), options.lr, options.weight_decay), options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(detail::validated("SGD", std::move(groups))),
      momentum_(options.momentum),
      dampening_(options.dampening),
      nesterov_(options.nesterov) {
  check_options(momentum_, dampening_, nesterov_);
}

void SGD::step() {
  NoGradGuard no_grad;
  buffers_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    buffers_[g].resize(group.params.size());
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = detail::step_grad("SGD", group, g, i);
      if (!grad.defined()) continue;
      Tensor& buf = buffers_[g][i];
      const bool first = !buf.defined();
      if (momentum_ != 0) {
        if (first) {
          buf = ops::empty(p.shape(), p.dtype(), p.device());  // the kernel writes g into it
        } else {
          detail::check_state_fits("SGD", buf, detail::state_key(g, i, "momentum_buffer"), p);
        }
      }
      const SgdStep o{group.lr, momentum_, dampening_, group.weight_decay, nesterov_, first};
      detail::update_in_place(p, [&](const Tensor& w) {
        w.backend().sgd_step(w.strided(), grad.strided(), buf.defined() ? buf.strided() : Strided{},
                             o);
      });
      if (buf.defined()) buf.bump_version();
    }
  }
}

NamedTensors SGD::state_tensors() const {
  NamedTensors out;
  for (size_t g = 0; g < buffers_.size(); ++g) {
    for (size_t i = 0; i < buffers_[g].size(); ++i) {
      if (buffers_[g][i].defined())
        out.emplace_back(detail::state_key(g, i, "momentum_buffer"), buffers_[g][i]);
    }
  }
  return out;
}

nlohmann::json SGD::state_json() const {
  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json jg = detail::group_json(groups_[g]);
    std::vector<bool> has(groups_[g].params.size(), false);
    for (size_t i = 0; i < has.size(); ++i)
      has[i] = g < buffers_.size() && i < buffers_[g].size() && buffers_[g][i].defined();
    jg["has_momentum_buffer"] = has;
    groups.push_back(std::move(jg));
  }
  return {{"type", type_name()},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"nesterov", nesterov_},
          {"groups", std::move(groups)}};
}

void SGD::load_state(const NamedTensors& tensors, const nlohmann::json& j) {
  // Everything is read and checked before anything changes, so a failed load leaves this
  // optimizer as it was.
  std::vector<std::vector<Tensor>> buffers(groups_.size());
  double momentum, dampening;
  bool nesterov;
  try {
    detail::check_state_groups("SGD", groups_, j);
    momentum = j.at("momentum").get<double>();
    dampening = j.at("dampening").get<double>();
    nesterov = j.at("nesterov").get<bool>();
    check_options(momentum, dampening, nesterov);
    detail::StateReader reader("SGD", tensors);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const auto& has = j["groups"][g].at("has_momentum_buffer");
      VT_CHECK(has.is_array() && has.size() == groups_[g].params.size(),
               "SGD: load_state: {} needs one has_momentum_buffer flag per parameter ({}), got {}",
               detail::group_label(groups_[g], g), groups_[g].params.size(), has.dump());
      buffers[g].resize(groups_[g].params.size());
      for (size_t i = 0; i < buffers[g].size(); ++i) {
        if (has[i].get<bool>())
          buffers[g][i] =
              reader.take(detail::state_key(g, i, "momentum_buffer"), groups_[g].params[i]);
      }
    }
    reader.check_all_taken();
  } catch (const nlohmann::json::exception& e) {
    fail("SGD: load_state: malformed state JSON: {}", e.what());
  }
  detail::load_group_hyperparameters(groups_, j);
  momentum_ = momentum;
  dampening_ = dampening;
  nesterov_ = nesterov;
  buffers_ = std::move(buffers);
}

}  // namespace vitrine::nn::optim
