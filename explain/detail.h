// Internal helpers of the explanation methods (not installed API): guards that put a model in
// eval mode, freeze its parameters or hook a module for a scope, targets, input gradients.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "models/vit.h"
#include "ops/ops.h"

namespace vitrine::explain::detail {

/// Seconds on the steady clock since t (the timings explain and the server report).
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// A tensor's values as doubles, row-major (any device, any dtype).
inline std::vector<double> values(const Tensor& t) {
  return t.to(kCPU).contiguous().to_vector<double>();
}

/// doubles -> a float32 CPU tensor of the given shape.
inline Tensor make(const std::vector<double>& v, const Dims& shape) {
  return ops::from_vector(v, shape, kFloat32);
}

/// Every parameter's requires_grad switched off for the lifetime of the guard (and restored):
/// the explanation methods need gradients of the input and of activations only, so backward
/// skips the weight gradients.
class FrozenParameters {
 public:
  explicit FrozenParameters(nn::Module& m) : params_(m.parameters()) {
    for (auto& p : params_) {
      was_.push_back(p.requires_grad());
      p.requires_grad_(false);
    }
  }
  ~FrozenParameters() {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].requires_grad_(was_[i]);
  }
  FrozenParameters(const FrozenParameters&) = delete;
  FrozenParameters& operator=(const FrozenParameters&) = delete;

 private:
  std::vector<Tensor> params_;
  std::vector<bool> was_;
};

/// Eval mode for the lifetime of the guard, then the mode the model had.
class EvalMode {
 public:
  explicit EvalMode(nn::Module& m) : m_(m), was_training_(m.is_training()) { m.eval(); }
  ~EvalMode() { m_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  nn::Module& m_;
  bool was_training_;
};

/// A forward hook on a module for the lifetime of the guard.
class ForwardHook {
 public:
  ForwardHook(nn::Module& m, nn::Module::ForwardHook hook)
      : m_(m), handle_(m.register_forward_hook(std::move(hook))) {}
  ~ForwardHook() { m_.remove_forward_hook(handle_); }
  ForwardHook(const ForwardHook&) = delete;
  ForwardHook& operator=(const ForwardHook&) = delete;

 private:
  nn::Module& m_;
  int64_t handle_;
};

inline Device model_device(const nn::Module& model) { return model.parameters().front().device(); }

inline DType model_dtype(const nn::Module& model) { return model.parameters().front().dtype(); }

/// One-hot rows selecting each image's target logit: [B, K].
inline Tensor target_selector(const Tensor& logits, const std::vector<int64_t>& targets) {
  const int64_t B = logits.size(0), K = logits.size(1);
  std::vector<double> sel(static_cast<size_t>(B * K), 0.0);
  for (int64_t b = 0; b < B; ++b) sel[static_cast<size_t>(b * K + targets[b])] = 1.0;
  return ops::from_vector(sel, {B, K}, logits.dtype()).to(logits.device());
}

/// Checks the targets against the logits and replaces -1 by the predicted class.
inline std::vector<int64_t> resolve_targets(const Tensor& logits,
                                            const std::vector<int64_t>& targets) {
  const int64_t B = logits.size(0), K = logits.size(1);
  VT_CHECK(static_cast<int64_t>(targets.size()) == B,
           "explain: {} target classes given for {} images", targets.size(), B);
  const auto predicted = ops::argmax(logits.detach(), 1).to(kCPU).to_vector<int64_t>();
  std::vector<int64_t> out(targets.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t t = targets[b];
    VT_CHECK(t == -1 || (t >= 0 && t < K),
             "explain: class {} is out of range for a model with {} classes (0..{})", t, K, K - 1);
    out[b] = t == -1 ? predicted[b] : t;
  }
  return out;
}

/// d y_c / d x for a batch of model inputs X [M, C, H, W] with targets [M] (-1: the class the
/// model predicts for that input), in chunks of at most `chunk` images: the gradients [M, C, H, W]
/// on the CPU and the targets with -1 resolved.
inline std::pair<Tensor, std::vector<int64_t>> input_gradients(nn::Module& model, const Tensor& X,
                                                               const std::vector<int64_t>& targets,
                                                               int64_t chunk) {
  const int64_t M = X.size(0);
  std::vector<Tensor> grads;
  std::vector<int64_t> resolved;
  for (int64_t s = 0; s < M; s += chunk) {
    const int64_t n = std::min(chunk, M - s);
    Tensor x = X.narrow(0, s, n).detach().contiguous();
    x.requires_grad_(true);
    Tensor logits = model(x);
    const std::vector<int64_t> t =
        resolve_targets(logits, std::vector<int64_t>(targets.begin() + s, targets.begin() + s + n));
    resolved.insert(resolved.end(), t.begin(), t.end());
    grads.push_back(grad({logits}, {x}, {target_selector(logits, t)})[0].to(kCPU));
  }
  return {ops::cat(grads, 0), resolved};
}

/// A ViT's forward options (the position-embedding interpolation) for the lifetime of the guard,
/// so that code calling model(x) on any nn::Module runs the ViT as the options say; nothing for
/// other models.
class VitForward {
 public:
  VitForward(nn::Module& m, models::PosInterp pos_interp)
      : vit_(dynamic_cast<models::VisionTransformer*>(&m)) {
    if (!vit_) return;
    was_ = vit_->forward_options;
    vit_->forward_options.pos_interp = pos_interp;
  }
  ~VitForward() {
    if (vit_) vit_->forward_options = was_;
  }
  VitForward(const VitForward&) = delete;
  VitForward& operator=(const VitForward&) = delete;

 private:
  models::VisionTransformer* vit_;
  models::ViTForwardOptions was_;
};

/// images [B, C, H, W]: for a ViT, C its channels and H, W multiples of its patch; for another
/// model 4 dims.
void check_images(const nn::Module& model, const Tensor& images);

}  // namespace vitrine::explain::detail
