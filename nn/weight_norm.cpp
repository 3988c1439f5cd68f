#include "nn/weight_norm.h"

#include <fmt/format.h>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {

/// ||v|| over every dim but dim, kept (PyTorch's norm_except_dim(v, 2, dim)); dim nullopt or -1:
/// over the whole tensor, shape [].
Tensor norm_except_dim(const Tensor& v, std::optional<int64_t> dim) {
  if (!dim || *dim == -1) return ops::sqrt(ops::sum(ops::mul(v, v)));
  const int d = wrap_dim(*dim, v.dim(), "weight_norm");
  Dims others;
  for (int i = 0; i < v.dim(); ++i)
    if (i != d) others.push_back(i);
  if (others.empty()) return ops::sqrt(ops::mul(v, v));
  return ops::sqrt(ops::sum(ops::mul(v, v), others, /*keepdim=*/true));
}

/// a / max(||a||, eps) for a 1-D a (F.normalize(a, dim=0, eps=eps)).
Tensor normalize(const Tensor& a, double eps) {
  return ops::div(a, ops::clamp(ops::sqrt(ops::sum(ops::mul(a, a))), eps, std::nullopt));
}

/// "a, b, c": the names of module's own parameters.
std::string parameter_names(const Module& m) {
  std::string s;
  for (const auto& [n, p] : m.named_parameters(false)) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace

Reparametrized::Reparametrized(std::shared_ptr<Module> module, Tensor* slot, std::string name,
                               const char* op)
    : module_(std::move(module)), slot_(slot), name_(std::move(name)) {
  VT_CHECK(module_ != nullptr && slot_ != nullptr, "{}: the module is null", op);
  for (const auto& [n, p] : module_->named_parameters(false))
    if (n == name_) original_ = p;
  VT_CHECK(original_.defined(), "{}: {} has no parameter '{}' (its parameters: {})", op,
           module_->type_name(), name_, parameter_names(*module_));
  VT_CHECK(slot_->defined() && slot_->impl_ptr() == original_.impl_ptr(),
           "{}: the member given does not hold {}'s parameter '{}'", op, module_->type_name(),
           name_);
  for (const auto& [n, p] : module_->named_parameters(false))
    if (n != name_) register_parameter(n, p, p.requires_grad());
  Module::train(module_->is_training());
}

void Reparametrized::adopt_buffers_and_children() {
  for (const auto& [n, b] : module_->named_buffers(false)) register_buffer(n, b);
  for (const auto& [n, c] : module_->named_children()) register_module(n, c);
}

Tensor Reparametrized::forward(const Tensor& x) {
  *slot_ = compute_weight();
  return (*module_)(x);
}

void Reparametrized::train(bool on) {
  Module::train(on);
  module_->train(on);
}

std::shared_ptr<Module> Reparametrized::unwrap(const Tensor& weight) {
  *slot_ = module_->set_parameter(name_, weight.detach(), original_.requires_grad());
  return module_;
}

WeightNorm::WeightNorm(std::shared_ptr<Module> module, Tensor* slot, std::string name,
                       std::optional<int64_t> dim)
    : Reparametrized(std::move(module), slot, std::move(name), "weight_norm"), dim(dim) {
  const Tensor w = original_.detach();
  VT_CHECK(!dim || *dim == -1 || (*dim >= -w.dim() && *dim < w.dim()),
           "weight_norm: dim {} is out of range for {}'s parameter '{}' of shape {}", *dim,
           module_->type_name(), name_, w.shape());
  NoGradGuard no_grad;
  weight_g = register_parameter(name_ + "_g", norm_except_dim(w, dim));
  weight_v = register_parameter(name_ + "_v", w.clone());
  adopt_buffers_and_children();
  *slot_ = compute_weight();
}

Tensor WeightNorm::compute_weight() {
  return ops::mul(weight_v, ops::div(weight_g, norm_except_dim(weight_v, dim)));
}

SpectralNorm::SpectralNorm(std::shared_ptr<Module> module, Tensor* slot, std::string name,
                           int64_t n_power_iterations, double eps, std::optional<int64_t> dim,
                           Generator& gen)
    : Reparametrized(std::move(module), slot, std::move(name), "spectral_norm"),
      n_power_iterations(n_power_iterations),
      eps(eps),
      dim(0) {
  VT_CHECK(n_power_iterations > 0,
           "spectral_norm: expected n_power_iterations to be positive, got {}", n_power_iterations);
  VT_CHECK(eps > 0, "spectral_norm: eps must be positive, got {}", eps);
  const Tensor w = original_.detach();
  VT_CHECK(w.dim() >= 1, "spectral_norm: {}'s parameter '{}' is a scalar", module_->type_name(),
           name_);
  const bool transposed = module_->type_name().rfind("ConvTranspose", 0) == 0;
  this->dim = wrap_dim(dim.value_or(transposed ? 1 : 0), w.dim(), "spectral_norm");
  // weight_orig is the parameter itself (an optimizer made before keeps training it).
  weight_orig = register_parameter(name_ + "_orig", original_, original_.requires_grad());
  NoGradGuard no_grad;
  const Tensor mat = matrix(w);
  weight_u = register_buffer(name_ + "_u",
                             normalize(ops::randn({mat.size(0)}, gen, w.dtype(), w.device()), eps));
  weight_v = register_buffer(name_ + "_v",
                             normalize(ops::randn({mat.size(1)}, gen, w.dtype(), w.device()), eps));
  adopt_buffers_and_children();
}

Tensor SpectralNorm::matrix(const Tensor& w) const {
  Tensor m = w;
  if (dim != 0) {
    Dims perm{dim};
    for (int64_t d = 0; d < w.dim(); ++d)
      if (d != dim) perm.push_back(d);
    m = ops::permute(w, perm);
  }
  return ops::reshape(m, {m.size(0), -1});
}

Tensor SpectralNorm::weight(bool power_iteration) {
  const Tensor mat = matrix(weight_orig);
  Tensor u = weight_u, v = weight_v;
  if (power_iteration) {
    NoGradGuard no_grad;
    const Tensor m = mat.detach(), mt = ops::transpose(m, 0, 1);
    for (int64_t i = 0; i < n_power_iterations; ++i) {
      weight_v.copy_(normalize(ops::matmul(mt, weight_u), eps));
      weight_u.copy_(normalize(ops::matmul(m, weight_v), eps));
    }
    // Copies, as PyTorch's clones: the graph keeps these, and the next step updates the buffers.
    u = weight_u.clone();
    v = weight_v.clone();
  }
  const Tensor sigma = ops::sum(ops::mul(u, ops::matmul(mat, v)));
  return ops::div(weight_orig, sigma);
}

Tensor SpectralNorm::compute_weight() { return weight(is_training()); }

namespace utils {

void check_weight_name(const std::string& name, const char* op) {
  VT_CHECK(name == "weight",
           "{}: for the parameter '{}' pass the member that holds it: {}(module, &Type::member, "
           "\"{}\", ...)",
           op, name, op, name);
}

std::shared_ptr<Module> remove_weight_norm(const std::shared_ptr<WeightNorm>& wrapped) {
  VT_CHECK(wrapped != nullptr, "remove_weight_norm: the module is null");
  NoGradGuard no_grad;
  return wrapped->unwrap(wrapped->compute_weight());
}

std::shared_ptr<Module> remove_spectral_norm(const std::shared_ptr<SpectralNorm>& wrapped) {
  VT_CHECK(wrapped != nullptr, "remove_spectral_norm: the module is null");
  NoGradGuard no_grad;
  return wrapped->unwrap(wrapped->weight(false));
}

}  // namespace utils

}  // namespace vitrine::nn
