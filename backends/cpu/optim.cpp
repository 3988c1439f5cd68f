// CPU optimizer updates: PyTorch's single-tensor (foreach=False) Adam, AdamW and SGD, elementwise
// and in place. All operands are contiguous, of the parameter's shape and dtype.
//
// Each update repeats PyTorch's sequence of tensor ops in the same order and in the parameter's
// own dtype (float arithmetic for float32, never double): one step from the same state gives
// PyTorch's CPU result bit for bit (tests/nn/test_optim.cpp). The scalars (bias corrections, step
// size, 1 - beta, ...) are computed in double as PyTorch's Python code does, then rounded once to
// the dtype, as PyTorch's kernels do with a Python scalar. PyTorch's vectorised CPU kernels (AVX2)
// compute `a.add(b, alpha=s)` as fma(b, s, a) and `a.addcmul(b, c, value=s)` as fma(s * b, c, a);
// std::fma gives the same single rounding. Chunks run in parallel; every element is independent, so
// results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {

/// Runs f(i) for i in [0, n), in parallel chunks of kBlock elements.
template <typename F>
void for_each_element(int64_t n, F&& f) {
  const int64_t nblk = (n + kBlock - 1) / kBlock;
  parallel_for(nblk, kBlock, [&](int64_t b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) f(i);
  });
}

/// Every operand contiguous and of the first one's shape and dtype.
void check_operands(std::initializer_list<const Strided*> ts) {
  const Strided& p = **ts.begin();
  for (const Strided* t : ts) {
    VT_ASSERT(t->is_contiguous());
    VT_ASSERT(t->shape == p.shape);
    VT_ASSERT(t->dtype == p.dtype);
  }
}

}  // namespace

// PyTorch's _single_tensor_adam / _single_tensor_adamw (amsgrad off), with t = o.step:
//   AdamW: p = p * (1 - lr wd)             Adam (wd != 0): g = g + wd p
//   m = m b1 + (1 - b1) g                  v = v b2 + (1 - b2) g g
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps
//   p = p + (-lr / (1 - b1^t)) m / denom
// param, grad, exp_avg, exp_avg_sq: same shape
void CpuBackend::adam_step(const Strided& param, const Strided& grad, const Strided& exp_avg,
                           const Strided& exp_avg_sq, const AdamStep& o) {
  check_operands({&param, &grad, &exp_avg, &exp_avg_sq});
  VT_ASSERT(o.step >= 1);
  dispatch_float(param.dtype, o.decoupled ? "adamw_step" : "adam_step", [&]<typename T>() {
    // Python doubles, as in PyTorch (step_t.item() is a float, so ** is C's pow).
    const double step = static_cast<double>(o.step);
    const double bias_correction1 = 1 - std::pow(o.beta1, step);
    const double bias_correction2 = 1 - std::pow(o.beta2, step);
    const double step_size = o.lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    // Rounded once to T, as a Python scalar reaching a kernel.
    const T decay = static_cast<T>(1 - o.lr * o.weight_decay);
    const T wd = static_cast<T>(o.weight_decay);
    const T beta1 = static_cast<T>(o.beta1), one_minus_beta1 = static_cast<T>(1 - o.beta1);
    const T beta2 = static_cast<T>(o.beta2), one_minus_beta2 = static_cast<T>(1 - o.beta2);
    const T eps = static_cast<T>(o.eps);
    const T neg_step_size = static_cast<T>(-step_size);
    const T bc2_sqrt = static_cast<T>(bias_correction2_sqrt);
    const bool coupled_decay = !o.decoupled && o.weight_decay != 0;
    T* p = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* m = exp_avg.ptr<T>();
    T* v = exp_avg_sq.ptr<T>();
    if constexpr (std::is_same_v<T, float>) {  // the same arithmetic, vectorised (simd.h)
      const simd::AdamRow row{decay,           wd,  beta1,         one_minus_beta1, beta2,
                              one_minus_beta2, eps, neg_step_size, bc2_sqrt,        o.decoupled,
                              coupled_decay};
      const int64_t n = param.numel(), nblk = (n + kBlock - 1) / kBlock;
      parallel_for(nblk, kBlock, [&](int64_t b) {
        const int64_t i0 = b * kBlock, len = std::min(n, i0 + kBlock) - i0;
        simd::adam_row(p + i0, g + i0, m + i0, v + i0, row, len);
      });
      return;
    }
    for_each_element(param.numel(), [&](int64_t i) {
      T gi = g[i];
      if (o.decoupled) {
        p[i] = p[i] * decay;  // param.mul_(1 - lr * weight_decay)
      } else if (coupled_decay) {
        gi = std::fma(p[i], wd, gi);  // grad = grad.add(param, alpha=weight_decay)
      }
      m[i] = std::fma(gi, one_minus_beta1, m[i] * beta1);  // exp_avg.mul_(beta1).add_(grad, ...)
      v[i] = std::fma(one_minus_beta2 * gi, gi, v[i] * beta2);  // exp_avg_sq.mul_().addcmul_()
      const T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      p[i] = p[i] + neg_step_size * m[i] / denom;  // param.addcdiv_(exp_avg, denom, -step_size)
    });
  });
}

// PyTorch's _single_tensor_sgd:
//   g = g + wd p                          (when wd != 0)
//   buf = g on the first step, else buf = buf momentum + (1 - dampening) g   (when momentum != 0)
//   g = nesterov ? g + momentum buf : buf
//   p = p - lr g
// param, grad, momentum_buf: same shape (momentum_buf unused when momentum == 0)
void CpuBackend::sgd_step(const Strided& param, const Strided& grad, const Strided& momentum_buf,
                          const SgdStep& o) {
  const bool use_momentum = o.momentum != 0;
  if (use_momentum) {
    check_operands({&param, &grad, &momentum_buf});
  } else {
    check_operands({&param, &grad});
  }
  dispatch_float(param.dtype, "sgd_step", [&]<typename T>() {
    const T wd = static_cast<T>(o.weight_decay);
    const T momentum = static_cast<T>(o.momentum);
    const T one_minus_dampening = static_cast<T>(1 - o.dampening);
    const T neg_lr = static_cast<T>(-o.lr);
    const bool decay = o.weight_decay != 0;
    T* p = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* buf = use_momentum ? momentum_buf.ptr<T>() : nullptr;
    for_each_element(param.numel(), [&](int64_t i) {
      T d = g[i];
      if (decay) d = std::fma(p[i], wd, d);  // d_p = d_p.add(param, alpha=weight_decay)
      if (use_momentum) {
        // buf = clone(d_p), or buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
        buf[i] = o.first ? d : std::fma(d, one_minus_dampening, buf[i] * momentum);
        d = o.nesterov ? std::fma(buf[i], momentum, d) : buf[i];  // d_p.add(buf, alpha=momentum)
      }
      p[i] = std::fma(d, neg_lr, p[i]);  // param.add_(d_p, alpha=-lr)
    });
  });
}

}  // namespace vitrine::cpu
