// Losses composed of ops (see loss.h for the formulas). Each checks its inputs, builds the
// per-element loss and reduces it with reduce() below.
#include "nn/loss.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace vitrine::nn {

namespace {

using ops::Reduction;

Dims shape_or_empty(const Tensor& t) { return t.defined() ? t.shape() : Dims{}; }

/// A float32/float64 input and a target of its dtype, shape and device.
void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  VT_CHECK(input.defined() && target.defined(), "{}: input and target must be defined", op);
  VT_CHECK(is_float(input.dtype()), "{}: input must be float32 or float64, got {}", op,
           dtype_name(input.dtype()));
  VT_CHECK(target.dtype() == input.dtype(),
           "{}: target dtype {} differs from input dtype {} (expected the same)", op,
           dtype_name(target.dtype()), dtype_name(input.dtype()));
  VT_CHECK(input.shape() == target.shape(), "{}: input shape {} and target shape {} differ", op,
           input.shape(), target.shape());
  VT_CHECK(input.device() == target.device(), "{}: input is on {}, target on {}", op,
           input.device().str(), target.device().str());
}

/// An optional per-element weight (weight, pos_weight) that broadcasts to input's shape.
void check_weight(const char* op, const char* name, const Tensor& weight, const Tensor& input) {
  if (!weight.defined()) return;
  VT_CHECK(weight.dtype() == input.dtype(), "{}: {} dtype {} differs from input dtype {}", op, name,
           dtype_name(weight.dtype()), dtype_name(input.dtype()));
  VT_CHECK(weight.device() == input.device(), "{}: {} is on {}, input on {}", op, name,
           weight.device().str(), input.device().str());
  bool fits = weight.dim() <= input.dim();
  for (int i = 1; fits && i <= weight.dim(); ++i)
    fits =
        weight.shape().back(i - 1) == 1 || weight.shape().back(i - 1) == input.shape().back(i - 1);
  VT_CHECK(fits, "{}: {} shape {} does not broadcast to input shape {}", op, name, weight.shape(),
           input.shape());
}

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return ops::sum(loss);
    case Reduction::Mean:
      return ops::mean(loss);
  }
  return loss;
}

Tensor scalar_like(const Tensor& x, double v) { return ops::scalar(v, x.dtype(), x.device()); }

/// ATen's EPSILON in these losses is the float 1e-12f (9.999999960041972e-13 as a double): in the
/// cosine's squared norms and in binary_cross_entropy's gradient.
constexpr double kEpsilon = static_cast<double>(1e-12f);

/// -(t max(log p, -100) + (1 - t) max(log(1 - p), -100)), PyTorch's clamp of the logarithms.
Tensor bce_unweighted(const Tensor& p, const Tensor& t) {
  Tensor log_p = ops::clamp(ops::log(p), -100.0, std::nullopt);
  Tensor log_q = ops::clamp(ops::log(1.0 - p), -100.0, std::nullopt);
  return -(t * log_p + (1.0 - t) * log_q);
}

KLDivReduction kl_div_reduction(Reduction r) {
  switch (r) {
    case Reduction::None:
      return KLDivReduction::None;
    case Reduction::Sum:
      return KLDivReduction::Sum;
    case Reduction::Mean:
      return KLDivReduction::Mean;
  }
  return KLDivReduction::Mean;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  VT_CHECK(input.defined() && target.defined() && input.shape() == target.shape(),
           "mse_loss: input shape {} and target shape {} differ", shape_or_empty(input),
           shape_or_empty(target));
  Tensor d = input - target;
  return reduce(d * d, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair("l1_loss", input, target);
  return reduce(ops::abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  check_pair("smooth_l1_loss", input, target);
  VT_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got {}", beta);
  if (beta == 0) return l1_loss(input, target, reduction);
  Tensor d = input - target, z = ops::abs(d);
  // where() sends no gradient into the branch not taken, so |d|'s kink at 0 stays unseen there.
  Tensor loss = ops::where(ops::lt(z, scalar_like(z, beta)), d * d * (0.5 / beta), z - 0.5 * beta);
  return reduce(loss, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  check_pair("huber_loss", input, target);
  VT_CHECK(delta > 0, "huber_loss: delta must be > 0, got {}", delta);
  Tensor d = input - target, z = ops::abs(d);
  Tensor loss =
      ops::where(ops::lt(z, scalar_like(z, delta)), d * d * 0.5, (z - 0.5 * delta) * delta);
  return reduce(loss, reduction);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                int64_t ignore_index, Reduction reduction) {
  VT_CHECK(input.defined() && is_float(input.dtype()),
           "nll_loss: input must be a float32 or float64 tensor, got {}",
           input.defined() ? std::string(dtype_name(input.dtype())) : "an undefined tensor");
  VT_CHECK(target.defined() && target.dtype() == kInt64,
           "nll_loss: target must hold int64 class indices, got {}",
           target.defined() ? std::string(dtype_name(target.dtype())) : "an undefined tensor");
  VT_CHECK(target.device() == input.device(), "nll_loss: input is on {}, target on {}",
           input.device().str(), target.device().str());
  VT_CHECK(input.dim() >= 1,
           "nll_loss: input must have shape [C], [N, C] or [N, C, d1, ...], got shape {}",
           input.shape());
  if (input.dim() == 1) {  // [C] with a 0-dim target: a batch of one
    VT_CHECK(target.dim() == 0,
             "nll_loss: input of shape {} (one example) expects a 0-dim target, got shape {}",
             input.shape(), target.shape());
    Tensor loss = nll_loss(ops::unsqueeze(input, 0), ops::unsqueeze(target, 0), weight,
                           ignore_index, reduction);
    return reduction == Reduction::None ? ops::reshape(loss, {}) : loss;
  }
  Dims want = input.shape();
  want.erase(1);
  VT_CHECK(target.shape() == want,
           "nll_loss: target shape {} does not match input shape {} (expected target shape {})",
           target.shape(), input.shape(), want);
  const int64_t classes = input.size(1);
  if (weight.defined()) {
    VT_CHECK(weight.shape() == Dims{classes},
             "nll_loss: weight must have shape [{}] (one per class), got {}", classes,
             weight.shape());
    VT_CHECK(weight.dtype() == input.dtype() && weight.device() == input.device(),
             "nll_loss: weight ({}, on {}) must have input's dtype and device ({}, on {})",
             dtype_name(weight.dtype()), weight.device().str(), dtype_name(input.dtype()),
             input.device().str());
  }
  for (int64_t t : target.to_vector<int64_t>())
    VT_CHECK(t == ignore_index || (t >= 0 && t < classes),
             "nll_loss: target {} is out of bounds (expected a class in [0, {}) or ignore_index "
             "{})",
             t, classes, ignore_index);

  // input [N, C, d...]; target, kept, w, picked, loss: [N, d...]
  Tensor kept =
      ops::ne(target, ops::scalar(static_cast<double>(ignore_index), kInt64, target.device()));
  Tensor safe = ops::where(kept, target, ops::scalar(0, kInt64, target.device()));  // class 0
  Tensor picked = ops::squeeze(ops::gather(input, 1, ops::unsqueeze(safe, 1)), 1);
  Tensor w = ops::to_dtype(kept, input.dtype());
  if (weight.defined())
    w = w * ops::reshape(ops::index_select(weight, 0, ops::reshape(safe, {safe.numel()})),
                         target.shape());
  Tensor loss = -(picked * w);
  if (reduction == Reduction::Mean) return ops::div(ops::sum(loss), ops::sum(w));
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            Reduction reduction) {
  check_pair("binary_cross_entropy", input, target);
  check_weight("binary_cross_entropy", "weight", weight, input);
  Tensor loss;
  {
    NoGradGuard no_grad;  // the value here, the gradient by PyTorch's rule below
    Tensor one = scalar_like(input, 1);
    double inside = ops::sum(ops::to_dtype(ops::ge(input, scalar_like(input, 0)), input.dtype()) *
                             ops::to_dtype(ops::le(input, one), input.dtype()))
                        .item();
    VT_CHECK(inside == static_cast<double>(input.numel()),
             "binary_cross_entropy: input must hold probabilities in [0, 1], but {} of its {} "
             "elements are outside (or NaN)",
             input.numel() - static_cast<int64_t>(inside), input.numel());
    loss = bce_unweighted(input, target);
    if (weight.defined()) loss = loss * weight;
  }
  loss = record(loss, "binary_cross_entropy", {input, target, weight},
                [sx = save(input), sy = save(target), sw = save(weight)](
                    const Tensor& dloss, const Needs& needs) -> Grads {
                  const Tensor &x = sx.get(), &y = sy.get();
                  Tensor g = sw.defined() ? dloss * sw.get() : dloss;
                  Grads grads(3);
                  if (needs[0])
                    grads[0] = g * (x - y) / ops::clamp(x * (1.0 - x), kEpsilon, std::nullopt);
                  if (needs[1]) grads[1] = g * (ops::log(1.0 - x) - ops::log(x));
                  if (needs[2]) grads[2] = dloss * bce_unweighted(x, y);
                  return grads;
                });
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight, Reduction reduction,
                                        const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(op, input, target);
  check_weight(op, "weight", weight, input);
  check_weight(op, "pos_weight", pos_weight, input);
  // log(1 + e^-x) as m + log(e^-m + e^(-x - m)), m = max(-x, 0): no exponent is positive.
  Tensor m = ops::clamp(-input, 0.0, std::nullopt);
  Tensor log1p_exp = ops::log(ops::exp(-m) + ops::exp(-input - m)) + m;
  Tensor l = pos_weight.defined() ? (pos_weight - 1.0) * target + 1.0 : Tensor();
  Tensor loss = (1.0 - target) * input + (l.defined() ? l * log1p_exp : log1p_exp);
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, KLDivReduction reduction,
              bool log_target) {
  check_pair("kl_div", input, target);
  Tensor loss;
  if (log_target) {
    loss = ops::exp(target) * (target - input);
  } else {
    // xlogy(t, t) = t log t, 0 at t = 0: log sees 1 there, so no 0 * -inf (nor its NaN gradient).
    Tensor zero = ops::eq(target, scalar_like(target, 0));
    loss = target * ops::log(ops::where(zero, scalar_like(target, 1), target)) - target * input;
  }
  switch (reduction) {
    case KLDivReduction::None:
      return loss;
    case KLDivReduction::Sum:
      return ops::sum(loss);
    case KLDivReduction::Mean:
      return ops::mean(loss);
    case KLDivReduction::BatchMean:
      return input.dim() == 0 ? ops::sum(loss)
                              : ops::sum(loss) / static_cast<double>(input.size(0));
  }
  return loss;
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  return kl_div(input, target, kl_div_reduction(reduction), log_target);
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             double margin, Reduction reduction) {
  const char* op = "cosine_embedding_loss";
  VT_CHECK(input1.defined() && input2.defined(), "{}: input1 and input2 must be defined", op);
  VT_CHECK(is_float(input1.dtype()) && input2.dtype() == input1.dtype(),
           "{}: input1 and input2 must both be float32 or both float64, got {} and {}", op,
           dtype_name(input1.dtype()), dtype_name(input2.dtype()));
  VT_CHECK(input1.shape() == input2.shape(), "{}: input1 shape {} and input2 shape {} differ", op,
           input1.shape(), input2.shape());
  VT_CHECK(input1.device() == input2.device(), "{}: input1 is on {}, input2 on {}", op,
           input1.device().str(), input2.device().str());
  VT_CHECK(target.defined() && (is_float(target.dtype()) || target.dtype() == kInt64),
           "{}: target must be a float or int64 tensor of 1 and -1, got {}", op,
           target.defined() ? std::string(dtype_name(target.dtype())) : "an undefined tensor");
  VT_CHECK(target.device() == input1.device(), "{}: inputs are on {}, target on {}", op,
           input1.device().str(), target.device().str());
  VT_CHECK(target.dim() <= 1, "{}: target must be 0-dim or 1-D, got shape {}", op, target.shape());
  if (target.dim() == 1)
    VT_CHECK(input1.dim() == 2 && input1.size(0) == target.size(0),
             "{}: a target of shape {} expects inputs of shape [{}, D], got {}", op, target.shape(),
             target.size(0), input1.shape());
  else
    VT_CHECK(input1.dim() == 1, "{}: a 0-dim target expects inputs of shape [D], got {}", op,
             input1.shape());
  // input1, input2: [N, D] (or [D]); cos and the loss: [N] (or [])
  const int64_t d = input1.dim() - 1;
  Tensor dot = ops::sum(input1 * input2, {d});
  Tensor sq1 = ops::sum(input1 * input1, {d}) + kEpsilon,
         sq2 = ops::sum(input2 * input2, {d}) + kEpsilon;
  Tensor cos = dot / ops::sqrt(sq1 * sq2);
  Tensor zero = ops::zeros_like(cos);
  Tensor pos =
      ops::where(ops::eq(target, ops::scalar(1, target.dtype(), target.device())), 1.0 - cos, zero);
  Tensor neg = ops::where(ops::eq(target, ops::scalar(-1, target.dtype(), target.device())),
                          ops::clamp(cos - margin, 0.0, std::nullopt), zero);
  return reduce(pos + neg, reduction);
}

NLLLoss::NLLLoss(const Tensor& weight, int64_t ignore_index, Reduction reduction)
    : ignore_index(ignore_index), reduction(reduction) {
  if (weight.defined()) this->weight = register_buffer("weight", weight);
}

BCELoss::BCELoss(const Tensor& weight, Reduction reduction) : reduction(reduction) {
  if (weight.defined()) this->weight = register_buffer("weight", weight);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(const Tensor& weight, Reduction reduction,
                                     const Tensor& pos_weight)
    : reduction(reduction) {
  if (weight.defined()) this->weight = register_buffer("weight", weight);
  if (pos_weight.defined()) this->pos_weight = register_buffer("pos_weight", pos_weight);
}

KLDivLoss::KLDivLoss(Reduction reduction, bool log_target)
    : reduction(kl_div_reduction(reduction)), log_target(log_target) {}

}  // namespace vitrine::nn
