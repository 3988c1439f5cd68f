// Weight normalisation and spectral normalisation, as torch.nn.utils.weight_norm and
// spectral_norm (PyTorch 1.13) apply them, with their parameter and buffer names:
//   weight_norm:   weight = v (g / ||v||)   parameters weight_g, weight_v (the norm over every dim
//                  but dim, kept; dim -1 or nullopt: over the whole tensor)
//   spectral_norm: weight = W / sigma(W)    parameter weight_orig, buffers weight_u, weight_v
//                  (sigma = u^T W v, u and v refined by power iteration in training only)
// PyTorch rewrites the module in place and recomputes the weight in a forward pre-hook. Here the
// utilities return a module that wraps the given one: the wrapper registers the wrapped module's
// other parameters, its buffers and its children under their own names beside the new tensors,
// so its state_dict has PyTorch's keys ("bias", "weight_g", "weight_v"), and its forward sets the
// wrapped module's weight member to the recomputed weight before calling it. Put the wrapper
// where the module was (Sequential, register_module); remove_weight_norm / remove_spectral_norm
// return the wrapped module with the weight a parameter again.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "backends/generator.h"
#include "nn/module.h"

namespace vitrine::nn {

/// A module whose parameter `name` (held in the member *slot) is recomputed before each forward.
/// Its type_name and extra_repr are the wrapped module's, as PyTorch's module stays a Linear.
class Reparametrized : public Module {
 public:
  /// *slot = compute_weight(), then the wrapped module's forward (through its operator(), so
  /// its hooks run).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return module_->type_name(); }
  std::string extra_repr() const override { return module_->extra_repr(); }
  /// Sets training mode here and in the wrapped module.
  void train(bool on = true) override;
  /// The weight the next forward would use (in training, spectral norm's power iteration runs).
  virtual Tensor compute_weight() = 0;
  const std::shared_ptr<Module>& module() const { return module_; }
  const std::string& name() const { return name_; }
  /// The wrapped module with its parameter `name` = weight (detached, a leaf) again, as
  /// remove_weight_norm / remove_spectral_norm leave it. This wrapper is spent after it.
  std::shared_ptr<Module> unwrap(const Tensor& weight);

 protected:
  /// Checks that *slot is module's parameter `name` and registers module's other parameters here
  /// (op names the utility in errors).
  Reparametrized(std::shared_ptr<Module> module, Tensor* slot, std::string name, const char* op);
  /// Registers module's buffers and children here (after the subclass's own parameters).
  void adopt_buffers_and_children();

  std::shared_ptr<Module> module_;
  Tensor* slot_;
  std::string name_;
  Tensor original_;  // the parameter as it was when wrapped
};

/// torch.nn.utils.weight_norm: weight = v (g / norm_except_dim(v, dim)), g = the norm at the
/// start, v = the weight at the start; both parameters (name_g, name_v).
class WeightNorm : public Reparametrized {
 public:
  WeightNorm(std::shared_ptr<Module> module, Tensor* slot, std::string name = "weight",
             std::optional<int64_t> dim = 0);
  Tensor compute_weight() override;
  Tensor weight_g, weight_v;   // the parameters name_g, name_v
  std::optional<int64_t> dim;  // nullopt: the whole tensor (PyTorch's dim=None, as -1)
};

/// torch.nn.utils.spectral_norm: with W = weight_orig as a matrix [size(dim), rest] (dim moved
/// first), in training n_power_iterations of
///   v = normalize(W^T u),  u = normalize(W v)      (normalize(a) = a / max(||a||, eps))
/// updating the buffers in place (no gradient), then weight = weight_orig / (u^T W v) with u and v
/// constants. In eval: the buffers as they are. u, v start as normalize(N(0, 1)) from gen.
class SpectralNorm : public Reparametrized {
 public:
  SpectralNorm(std::shared_ptr<Module> module, Tensor* slot, std::string name = "weight",
               int64_t n_power_iterations = 1, double eps = 1e-12,
               std::optional<int64_t> dim = std::nullopt, Generator& gen = default_generator());
  /// weight(is_training()).
  Tensor compute_weight() override;
  /// weight_orig / sigma, after the power iteration (updating u and v) when power_iteration.
  Tensor weight(bool power_iteration);
  Tensor weight_orig, weight_u, weight_v;  // name_orig (parameter), name_u, name_v (buffers)
  int64_t n_power_iterations;
  double eps;
  int64_t dim;  // nullopt at construction: 1 for ConvTranspose*, else 0 (as PyTorch)

 private:
  Tensor matrix(const Tensor& w) const;
};

namespace utils {

/// name == "weight", else an error naming op and the member overload to use.
void check_weight_name(const std::string& name, const char* op);

/// weight_norm(module, name, dim) with module's parameter held in the member `member` (a member
/// of a base class too: weight_norm(cell, &nn::RNNCell::weight_hh, "weight_hh")).
template <typename M>
std::shared_ptr<WeightNorm> weight_norm(const std::shared_ptr<M>& module,
                                        std::type_identity_t<Tensor M::*> member, std::string name,
                                        std::optional<int64_t> dim = 0) {
  return std::make_shared<WeightNorm>(module, &((*module).*member), std::move(name), dim);
}
/// torch.nn.utils.weight_norm(module, name="weight", dim=0) for a module whose parameter is its
/// member `weight` (Linear, Conv1d/2d, ConvTranspose1d/2d, ...): returns the wrapper. Another
/// name needs the member overload above (an error here names it).
template <typename M>
std::shared_ptr<WeightNorm> weight_norm(const std::shared_ptr<M>& module,
                                        const std::string& name = "weight",
                                        std::optional<int64_t> dim = 0) {
  check_weight_name(name, "weight_norm");
  return weight_norm(module, &M::weight, name, dim);
}
/// torch.nn.utils.remove_weight_norm: the wrapped module, its weight a parameter with the
/// current value.
std::shared_ptr<Module> remove_weight_norm(const std::shared_ptr<WeightNorm>& wrapped);

/// spectral_norm(module, name, ...) with module's parameter held in the member `member`.
template <typename M>
std::shared_ptr<SpectralNorm> spectral_norm(const std::shared_ptr<M>& module,
                                            std::type_identity_t<Tensor M::*> member,
                                            std::string name, int64_t n_power_iterations = 1,
                                            double eps = 1e-12,
                                            std::optional<int64_t> dim = std::nullopt,
                                            Generator& gen = default_generator()) {
  return std::make_shared<SpectralNorm>(module, &((*module).*member), std::move(name),
                                        n_power_iterations, eps, dim, gen);
}
/// torch.nn.utils.spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12,
/// dim=None) for a module whose parameter is its member `weight`: returns the wrapper.
template <typename M>
std::shared_ptr<SpectralNorm> spectral_norm(const std::shared_ptr<M>& module,
                                            const std::string& name = "weight",
                                            int64_t n_power_iterations = 1, double eps = 1e-12,
                                            std::optional<int64_t> dim = std::nullopt,
                                            Generator& gen = default_generator()) {
  check_weight_name(name, "spectral_norm");
  return spectral_norm(module, &M::weight, name, n_power_iterations, eps, dim, gen);
}
/// torch.nn.utils.remove_spectral_norm: the wrapped module, its weight a parameter with the
/// value weight_orig / sigma from the current u and v (no power iteration).
std::shared_ptr<Module> remove_spectral_norm(const std::shared_ptr<SpectralNorm>& wrapped);

}  // namespace utils

}  // namespace vitrine::nn
