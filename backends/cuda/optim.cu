// CUDA optimizer updates: PyTorch's single-tensor (foreach=False) Adam, AdamW and SGD,
// elementwise and in place, all operands contiguous and of the parameter's shape and dtype.
// The same sequence of operations as the CPU reference (backends/cpu/optim.cpp), so that results
// match it bit for bit: the scalars (bias corrections, step size, 1 - beta, ...) are computed on
// the host in double exactly as there, then rounded once to the parameter's dtype; the kernels
// work in that dtype, with an fma exactly where the CPU calls std::fma and every other operation
// written with a _rn intrinsic (rounded once, never contracted into an fma by nvcc). The
// multi-tensor Adam runs the same per-element update (adam_update) over several parameters in one
// launch, so its results equal the per-tensor kernel's bit for bit.
#include <cmath>
#include <cstdint>

#include "backends/cuda/dispatch.cuh"
#include "backends/cuda/kernels.cuh"

namespace vitrine::cuda {

namespace {

// ---- IEEE operations, rounded once each, never contracted -----------------------------------
__device__ inline float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double fadd(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double fmul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float fdiv(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double fdiv(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float fsqrt(float a) { return __fsqrt_rn(a); }
__device__ inline double fsqrt(double a) { return __dsqrt_rn(a); }
/// a * b + c with one rounding (std::fma).
__device__ inline float ffma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ inline double ffma(double a, double b, double c) { return __fma_rn(a, b, c); }

/// Adam's scalars, rounded once to T (as a Python scalar reaching a PyTorch kernel).
template <typename T>
struct AdamScalars {
  T decay, wd, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bc2_sqrt;
  bool decoupled, coupled_decay;
};

/// PyTorch's _single_tensor_adam / _single_tensor_adamw (amsgrad off), one thread per element:
///   AdamW: p = p * (1 - lr wd)             Adam (wd != 0): g = g + wd p
///   m = m b1 + (1 - b1) g                  v = v b2 + (1 - b2) g g
///   denom = sqrt(v) / sqrt(1 - b2^t) + eps
///   p = p + (-lr / (1 - b1^t)) m / denom
/// p, g, m, v: [n] contiguous
/// Element i of p, g, m, v: the one update both Adam kernels run.
template <typename T>
__device__ inline void adam_update(T* p, const T* g, T* m, T* v, int64_t i,
                                   const AdamScalars<T>& s) {
  T pi = p[i];
  T gi = g[i];
  if (s.decoupled) {
    pi = fmul(pi, s.decay);  // param.mul_(1 - lr * weight_decay)
  } else if (s.coupled_decay) {
    gi = ffma(pi, s.wd, gi);  // grad = grad.add(param, alpha=weight_decay)
  }
  const T mi = ffma(gi, s.one_minus_beta1, fmul(m[i], s.beta1));            // exp_avg.mul_().add_()
  const T vi = ffma(fmul(s.one_minus_beta2, gi), gi, fmul(v[i], s.beta2));  // .addcmul_()
  const T denom = fadd(fdiv(fsqrt(vi), s.bc2_sqrt), s.eps);
  m[i] = mi;
  v[i] = vi;
  p[i] = fadd(pi, fdiv(fmul(s.neg_step_size, mi), denom));  // param.addcdiv_(m, denom, -ss)
}

template <typename T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, AdamScalars<T> s) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += step)
    adam_update(p, g, m, v, i, s);
}

// ---- Multi-tensor Adam: one launch for up to kMultiTensors parameters ------------------------
// The tensors' pointers travel in the kernel's arguments (no copy to the device, as PyTorch's
// multi_tensor_apply). Each tensor is cut into chunks of kMultiChunk elements, one block a chunk;
// block_start[t] is tensor t's first block, so block b finds its tensor by a binary search over
// block_start and its chunk as b - block_start[t]. About 2 KiB of arguments (under the 4 KiB
// kernel-parameter limit).
constexpr int kMultiTensors = 48;
constexpr int64_t kMultiChunk = 4096;

template <typename T>
struct AdamMultiArgs {
  T* p[kMultiTensors];
  const T* g[kMultiTensors];
  T* m[kMultiTensors];
  T* v[kMultiTensors];
  int64_t n[kMultiTensors];
  int32_t block_start[kMultiTensors + 1];  // block_start[count] = the grid's size
  int count;
};

/// p[t], g[t], m[t], v[t]: [n[t]] contiguous, t < count; grid: block_start[count] blocks.
template <typename T>
__global__ void adam_multi_kernel(AdamMultiArgs<T> a, AdamScalars<T> s) {
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = a.count;  // block_start[lo] <= b < block_start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (a.block_start[mid] <= b) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int t = lo;
  const int64_t begin = static_cast<int64_t>(b - a.block_start[t]) * kMultiChunk;
  const int64_t end = begin + kMultiChunk < a.n[t] ? begin + kMultiChunk : a.n[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adam_update(a.p[t], a.g[t], a.m[t], a.v[t], i, s);
}

/// SGD's scalars, rounded once to T.
template <typename T>
struct SgdScalars {
  T wd, momentum, one_minus_dampening, neg_lr;
  bool decay, use_momentum, first, nesterov;
};

/// PyTorch's _single_tensor_sgd, one thread per element:
///   g = g + wd p                          (when wd != 0)
///   buf = g on the first step, else buf = buf momentum + (1 - dampening) g   (when momentum != 0)
///   g = nesterov ? g + momentum buf : buf
///   p = p - lr g
/// p, g, buf: [n] contiguous (buf unused when momentum == 0)
template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, SgdScalars<T> s) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const T pi = p[i];
    T d = g[i];
    if (s.decay) d = ffma(pi, s.wd, d);  // d_p = d_p.add(param, alpha=weight_decay)
    if (s.use_momentum) {
      // buf = clone(d_p), or buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      const T b = s.first ? d : ffma(d, s.one_minus_dampening, fmul(buf[i], s.momentum));
      buf[i] = b;
      d = s.nesterov ? ffma(b, s.momentum, d) : b;  // d_p.add(buf, alpha=momentum)
    }
    p[i] = ffma(d, s.neg_lr, pi);  // param.add_(d_p, alpha=-lr)
  }
}

template <typename T>
AdamScalars<T> adam_scalars(const Adam& o) {
  // Python doubles, as in PyTorch (step_t.item() is a float, so ** is C's pow).
  const double step = static_cast<double>(o.step);
  const double bias_correction1 = 1 - std::pow(o.beta1, step);
  const double bias_correction2 = 1 - std::pow(o.beta2, step);
  const double step_size = o.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  AdamScalars<T> s;
  s.decay = static_cast<T>(1 - o.lr * o.weight_decay);
  s.wd = static_cast<T>(o.weight_decay);
  s.beta1 = static_cast<T>(o.beta1);
  s.one_minus_beta1 = static_cast<T>(1 - o.beta1);
  s.beta2 = static_cast<T>(o.beta2);
  s.one_minus_beta2 = static_cast<T>(1 - o.beta2);
  s.eps = static_cast<T>(o.eps);
  s.neg_step_size = static_cast<T>(-step_size);
  s.bc2_sqrt = static_cast<T>(bias_correction2_sqrt);
  s.decoupled = o.decoupled;
  s.coupled_decay = !o.decoupled && o.weight_decay != 0;
  return s;
}

template <typename T>
cudaError_t launch_adam(const View& param, const View& grad, const View& exp_avg,
                        const View& exp_avg_sq, const Adam& o, cudaStream_t stream) {
  const int64_t n = param.numel();
  if (n == 0) return cudaSuccess;
  const AdamScalars<T> s = adam_scalars<T>(o);
  adam_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<T*>(param.data), static_cast<const T*>(grad.data), static_cast<T*>(exp_avg.data),
      static_cast<T*>(exp_avg_sq.data), n, s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_adam_multi(const AdamViews* tensors, int64_t count, const Adam& o,
                              cudaStream_t stream) {
  const AdamScalars<T> s = adam_scalars<T>(o);
  constexpr int64_t kMaxBlocks = int64_t{1} << 30;
  AdamMultiArgs<T> a{};
  auto launch = [&]() -> cudaError_t {
    if (a.count == 0) return cudaSuccess;
    adam_multi_kernel<T>
        <<<static_cast<unsigned>(a.block_start[a.count]), kThreads, 0, stream>>>(a, s);
    a = AdamMultiArgs<T>{};
    return cudaGetLastError();
  };
  for (int64_t k = 0; k < count; ++k) {
    const AdamViews& t = tensors[k];
    const int64_t n = t.param.numel();
    if (n == 0) continue;
    const int64_t blocks = (n + kMultiChunk - 1) / kMultiChunk;
    if (a.count == kMultiTensors || a.block_start[a.count] + blocks > kMaxBlocks) {
      if (const cudaError_t e = launch(); e != cudaSuccess) return e;
    }
    if (blocks > kMaxBlocks) return cudaErrorInvalidValue;  // 2^42 elements: not a parameter
    a.p[a.count] = static_cast<T*>(t.param.data);
    a.g[a.count] = static_cast<const T*>(t.grad.data);
    a.m[a.count] = static_cast<T*>(t.exp_avg.data);
    a.v[a.count] = static_cast<T*>(t.exp_avg_sq.data);
    a.n[a.count] = n;
    a.block_start[a.count + 1] = static_cast<int32_t>(a.block_start[a.count] + blocks);
    ++a.count;
  }
  return launch();
}

template <typename T>
cudaError_t launch_sgd(const View& param, const View& grad, const View& momentum_buf, const Sgd& o,
                       cudaStream_t stream) {
  const int64_t n = param.numel();
  if (n == 0) return cudaSuccess;
  SgdScalars<T> s;
  s.wd = static_cast<T>(o.weight_decay);
  s.momentum = static_cast<T>(o.momentum);
  s.one_minus_dampening = static_cast<T>(1 - o.dampening);
  s.neg_lr = static_cast<T>(-o.lr);
  s.decay = o.weight_decay != 0;
  s.use_momentum = o.momentum != 0;
  s.first = o.first;
  s.nesterov = o.nesterov;
  sgd_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<T*>(param.data), static_cast<const T*>(grad.data),
      s.use_momentum ? static_cast<T*>(momentum_buf.data) : nullptr, n, s);
  return cudaGetLastError();
}

}  // namespace

cudaError_t adam_step(const View& param, const View& grad, const View& exp_avg,
                      const View& exp_avg_sq, const Adam& o, cudaStream_t stream) {
  if (o.step < 1) return cudaErrorInvalidValue;
  const Dt dt = param.dtype;
  if (grad.dtype != dt || exp_avg.dtype != dt || exp_avg_sq.dtype != dt)
    return cudaErrorInvalidValue;
  if (dt == Dt::F32) return launch_adam<float>(param, grad, exp_avg, exp_avg_sq, o, stream);
  if (dt == Dt::F64) return launch_adam<double>(param, grad, exp_avg, exp_avg_sq, o, stream);
  return cudaErrorInvalidValue;
}

cudaError_t adam_step_multi(const AdamViews* tensors, int64_t count, const Adam& o,
                            cudaStream_t stream) {
  if (o.step < 1 || count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const Dt dt = tensors[0].param.dtype;
  for (int64_t k = 0; k < count; ++k) {
    const AdamViews& t = tensors[k];
    const int64_t n = t.param.numel();
    if (t.param.dtype != dt || t.grad.dtype != dt || t.exp_avg.dtype != dt ||
        t.exp_avg_sq.dtype != dt || t.grad.numel() != n || t.exp_avg.numel() != n ||
        t.exp_avg_sq.numel() != n || !t.param.contiguous() || !t.grad.contiguous() ||
        !t.exp_avg.contiguous() || !t.exp_avg_sq.contiguous())
      return cudaErrorInvalidValue;
  }
  if (dt == Dt::F32) return launch_adam_multi<float>(tensors, count, o, stream);
  if (dt == Dt::F64) return launch_adam_multi<double>(tensors, count, o, stream);
  return cudaErrorInvalidValue;
}

cudaError_t sgd_step(const View& param, const View& grad, const View& momentum_buf, const Sgd& o,
                     cudaStream_t stream) {
  const Dt dt = param.dtype;
  if (grad.dtype != dt || (o.momentum != 0 && momentum_buf.dtype != dt))
    return cudaErrorInvalidValue;
  if (dt == Dt::F32) return launch_sgd<float>(param, grad, momentum_buf, o, stream);
  if (dt == Dt::F64) return launch_sgd<double>(param, grad, momentum_buf, o, stream);
  return cudaErrorInvalidValue;
}

}  // namespace vitrine::cuda
