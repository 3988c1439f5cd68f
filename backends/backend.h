// The backend interface: everything a device must provide. Kernels only: no graph, no autograd.
// Tensors reach kernels as Strided views (pointer to the first element, dtype, shape, strides in
// elements). Output arguments are contiguous unless a comment says otherwise. CPU is the
// reference implementation (backends/cpu); CUDA implements the same interface (backends/cuda).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

#include "backends/device.h"
#include "backends/dtype.h"
#include "backends/memory_stats.h"
#include "backends/op_lists.h"
#include "backends/shape.h"
#include "backends/storage.h"

namespace vitrine {

/// A kernel's view of a tensor: data points at element [0, ..., 0].
struct Strided {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Dims shape;
  Dims strides;
  int64_t numel() const { return shape.numel(); }
  bool is_contiguous() const;
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// The elementwise and reduction kernels' ops, from the lists of backends/op_lists.h (which the
// CUDA backend's enums are built from too); the comments there say what each computes.
enum class UnaryOp : uint8_t { VITRINE_UNARY_OPS(VITRINE_OP_ENUMERATOR) };
enum class BinaryOp : uint8_t { VITRINE_BINARY_OPS(VITRINE_OP_ENUMERATOR) };
enum class ReduceOp : uint8_t { VITRINE_REDUCE_OPS(VITRINE_OP_ENUMERATOR) };

/// Parameters of a 2-D convolution as im2col sees one image: kernel tap (i, j) of output (oh, ow)
/// reads input pixel (oh stride_h - pad_h + i dilation_h, ow stride_w - pad_w + j dilation_w).
struct ConvGeometry {
  int64_t channels, height, width;  // input image (of one group's channels)
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w;
  int64_t pad_h, pad_w;
  int64_t out_h, out_w;
  int64_t dilation_h = 1, dilation_w = 1;
};

/// How BLAS can read a [rows, cols] matrix with strides (s0, s1) in place: row-major (trans =
/// false) or transposed (trans = true), with leading dimension ld. False when neither works (a
/// copy is needed). A size-1 dim may have any stride (BLAS never steps along it).
inline bool gemm_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool& trans,
                        int64_t& ld) {
  if (cols == 1) s1 = 1;
  if (rows == 1) s0 = std::max<int64_t>(cols, 1);
  if (s1 == 1 && s0 >= std::max<int64_t>(cols, 1)) {
    trans = false;
    ld = s0;
    return true;
  }
  if (s0 == 1 && s1 >= std::max<int64_t>(rows, 1)) {
    trans = true;
    ld = s1;
    return true;
  }
  return false;
}

enum class InterpMode : uint8_t { Nearest, Bilinear, Bicubic };

/// The activation of a fused MLP (ops::mlp, Backend::GemmEpilogue's gelu_out and gelu_pre):
///   GELU: x Phi(x) (erf, torch's approximate='none')   GELUTanh: torch's approximate='tanh'
///   ReLU: max(x, 0)                                     SiLU: x sigmoid(x)
enum class Activation : uint8_t { GELU, GELUTanh, ReLU, SiLU };

/// How output pixel coordinates map to input coordinates (PyTorch's rules).
struct InterpGeometry {
  InterpMode mode;
  bool align_corners;
  double scale_h, scale_w;  // input/output ratio to use when align_corners is false
};

/// Options of one Adam/AdamW step (PyTorch's single-tensor implementation, amsgrad off).
struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;    // 1 on the first update (after incrementing)
  bool decoupled;  // AdamW: p *= 1 - lr * wd; Adam: g += wd * p
};

/// One parameter's tensors in a multi-tensor Adam step: all contiguous, of the param's shape.
struct AdamTensors {
  Strided param, grad, exp_avg, exp_avg_sq;
};

/// Options of one SGD step (PyTorch's rule: dampening, nesterov, weight decay added to g).
struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // the momentum buffer starts as g on the first step
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Memory.
  virtual StoragePtr allocate(size_t nbytes) = 0;
  /// The allocator's counters (backends/memory_stats.h).
  virtual MemoryStats memory_stats() = 0;
  virtual void reset_peak_memory_stats() = 0;
  /// dst = src, elementwise, any strides, converting dtype (every dtype pair, 16-bit included).
  virtual void copy(const Strided& src, const Strided& dst) = 0;
  /// Copies raw bytes between this device and the host.
  virtual void to_host(const void* src, void* host_dst, size_t nbytes) = 0;
  virtual void from_host(const void* host_src, void* dst, size_t nbytes) = 0;
  /// dst[...] = value (any strides, any dtype).
  virtual void fill(const Strided& dst, double value) = 0;
  /// dst[i] = start + i * step (contiguous).
  virtual void arange(const Strided& dst, double start, double step) = 0;

  // Random numbers: element i of dst is a function of (seed, offset + i) only (Philox4x32-10).
  virtual void uniform(const Strided& dst, uint64_t seed, uint64_t offset, double lo,
                       double hi) = 0;
  virtual void normal(const Strided& dst, uint64_t seed, uint64_t offset, double mean,
                      double std) = 0;
  virtual void randint(const Strided& dst, uint64_t seed, uint64_t offset, int64_t lo,
                       int64_t hi) = 0;

  // Elementwise. x/a/b/cond: any strides (0 for broadcast dims), already shaped like y.
  virtual void unary(UnaryOp op, const Strided& x, const Strided& y, double alpha = 0,
                     double beta = 0) = 0;
  virtual void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& y) = 0;
  /// y = cond ? a : b
  virtual void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& y) = 0;

  /// Reduces x over the dims where y (same rank as x, keepdim layout) has size 1 and x does not.
  /// ArgMax/ArgMin write int64 indices (of the first extreme) into y and reduce one dim only.
  virtual void reduce(ReduceOp op, const Strided& x, const Strided& y) = 0;
  /// parts [L, N] contiguous (L partial sums, in order) -> parts[0] = their pairwise tree sum,
  /// the other rows overwritten. Level s = 1, 2, 4, ...: parts[i] += parts[i + s] for i = 0, 2s,
  /// 4s, ... with i + s < L (an odd last partial goes up unchanged): batch-invariant mode's fixed
  /// tree (ops/batch_tree.h), so every element is summed in that order whatever the backend does.
  /// The default is one binary Add per level; the CPU sums a block of columns through all the
  /// levels while it is in cache.
  virtual void tree_sum(const Strided& parts);

  /// c[batch] = a[batch] @ b[batch] (+ c if accumulate). a: [..., M, K], b: [..., K, N], c:
  /// [..., M, N] contiguous; a and b may be transposed in their last two dims and broadcast
  /// (stride 0) in batch dims; all three share the batch shape. One dtype for all three, or a and
  /// b bfloat16 and c float32 (float32 accumulation; the CPU multiplies float32 copies).
  virtual void gemm(const Strided& a, const Strided& b, const Strided& c, bool accumulate) = 0;
  /// What gemm_fused does to c = a @ b besides the product, in this order (each when given):
  ///   c[m][n] += bias[n]                  bias [N] contiguous: a linear layer
  ///   c[m][n] += add[m][n]                add [M, N]: a residual
  ///   gelu_out[m][n] = gelu(c[m][n])      gelu_out [M, N] contiguous, may be c: fc1 and GELU
  ///   c[m][n] *= gelu'(gelu_pre[m][n])    gelu_pre [M, N]: the gradient at fc1's output from
  ///                                       the one at GELU's output (dy W2 in an MLP's backward)
  /// and beside c:
  ///   a_row_sums[m] = sum_k a[m][k]       a_row_sums [M] contiguous: with a = dy^T and b = x,
  ///                                       a linear layer's bias gradient beside its dW
  ///   c_copy[m][n] = c[m][n]              c_copy [M, N] contiguous, in its own dtype: the
  ///                                       bfloat16 operand of the next product, written in the
  ///                                       same pass (CUDA's bfloat16 operands, ops/linalg.cpp)
  /// a and b may be bfloat16 with c float32 (CUDA's bfloat16 operands; the CPU converts them):
  /// bias, add and a_row_sums float32, gelu_out and gelu_pre float32 or bfloat16.
  struct GemmEpilogue {
    const Strided* bias = nullptr;
    const Strided* add = nullptr;
    const Strided* gelu_out = nullptr;
    const Strided* gelu_pre = nullptr;
    const Strided* a_row_sums = nullptr;
    const Strided* c_copy = nullptr;
    /// The function gelu_out applies and whose derivative gelu_pre multiplies by.
    Activation act = Activation::GELU;
    /// Every row of c gets bits that depend on its row of a, on b and on the epilogue alone, not
    /// on M, the thread count or the row's place: batch-invariant mode's products on a whole
    /// batch (ops/linalg.cpp). Set only where gemm_fixed_rows said yes; no a_row_sums.
    bool fixed_rows = false;
  };
  /// Whether gemm_fused can compute products a [M, K] @ b [K, N] of dtype with fixed_rows, at
  /// every M (one row included). The default: no (batch-invariant mode then runs the product
  /// leaf by leaf of the batch, ops/batch_tree.h).
  virtual bool gemm_fixed_rows(int64_t K, int64_t N, DType dtype) const;
  /// c = a @ b, then the epilogue ep (a [M, K] and b [K, N] as gemm's, c [M, N] contiguous): a
  /// linear layer is gemm_fused with a bias. This default runs the steps one pass after another
  /// (the bias written into every row of c, the product accumulated onto it); a backend may apply
  /// them as it writes c (the CPU's own GEMM does), so that none of them reads or writes c again.
  virtual void gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                          const GemmEpilogue& ep);

  // Index ops along dim. index: int64, 1-D for the *_index ops, x-shaped for gather.
  /// y = x.index_select(dim, index)
  virtual void index_select(const Strided& x, int dim, const Strided& index, const Strided& y) = 0;
  /// y.index_add_(dim, index, src)   (y: any strides, accumulated in place)
  virtual void index_add(const Strided& y, int dim, const Strided& index, const Strided& src) = 0;
  /// y = x.gather(dim, index)
  virtual void gather(const Strided& x, int dim, const Strided& index, const Strided& y) = 0;
  /// y.scatter_add_(dim, index, src)
  virtual void scatter_add(const Strided& y, int dim, const Strided& index, const Strided& src) = 0;

  // Fused neural-network kernels. All inputs contiguous; the reduced dim is the last one.
  /// y = softmax(x) (or log_softmax) over the last dim.
  virtual void softmax(const Strided& x, const Strided& y, bool log) = 0;
  /// dx = y * (dy - sum(dy * y))   (log: dx = dy - exp(y) * sum(dy))
  virtual void softmax_backward(const Strided& y, const Strided& dy, const Strided& dx,
                                bool log) = 0;
  /// x: [R, C]; y = (x - mean) * rstd * w + b; mean, rstd: [R]. w, b may be null (data == null).
  virtual void layer_norm(const Strided& x, const Strided& w, const Strided& b, double eps,
                          const Strided& y, const Strided& mean, const Strided& rstd) = 0;
  /// Writes dx, dw and db (sums over the rows), each only when its data is non-null.
  virtual void layer_norm_backward(const Strided& x, const Strided& w, const Strided& mean,
                                   const Strided& rstd, const Strided& dy, const Strided& dx,
                                   const Strided& dw, const Strided& db) = 0;
  /// RMS norm over the last dim (ops::rms_norm): x, y [R, C]; w [C] (data null: none); rstd [R],
  /// x's dtype:  rstd[r] = 1 / sqrt(mean_c x[r, c]^2 + eps),  y = x rstd w
  /// This default composes reduce, unary and binary (backends/rms_norm_default.cpp); a backend
  /// may fuse it into one pass over the row (the CPU does).
  virtual void rms_norm(const Strided& x, const Strided& w, double eps, const Strided& y,
                        const Strided& rstd);
  /// Its backward from dy [R, C], with xhat = x rstd and g = dy w (dy when w is absent):
  ///   dx = rstd (g - xhat mean_c(g xhat)),  dw = sum_r dy xhat
  /// each written only when its data is non-null.
  virtual void rms_norm_backward(const Strided& x, const Strided& w, const Strided& rstd,
                                 const Strided& dy, const Strided& dx, const Strided& dw);
  /// logits: [N, C], target: int64 [N]; loss: [N] (0 where target == ignore_index).
  virtual void cross_entropy(const Strided& logits, const Strided& target, int64_t ignore_index,
                             double label_smoothing, const Strided& loss) = 0;
  /// dlogits[n] = dloss[n] * (softmax(logits[n]) - q[n]), q the smoothed one-hot target.
  virtual void cross_entropy_backward(const Strided& logits, const Strided& target,
                                      int64_t ignore_index, double label_smoothing,
                                      const Strided& dloss, const Strided& dlogits) = 0;

  /// Multi-head self-attention, fused. qkv: [B, N, 3, H, Dh] contiguous (a qkv projection's
  /// output); with q, k, v the [N, Dh] slices of batch b and head h:
  ///   P = softmax(scale q k^T)  -> probs [B, H, N, N],   out[b, :, h, :] = P v
  /// out: [B, N, H, Dh] contiguous (the heads side by side, as the output projection reads them).
  virtual void attention(const Strided& qkv, double scale, const Strided& probs,
                         const Strided& out) = 0;
  /// Its backward from probs and dout [B, N, H, Dh], written into dqkv [B, N, 3, H, Dh]:
  ///   dP = dout v^T,  dS = P (dP - rowsum(dP P)),  dq = scale dS k,  dk = scale dS^T q,
  ///   dv = P^T dout
  virtual void attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                  double scale, const Strided& dqkv) = 0;
  /// The same attention in two halves, for when the probabilities are a tensor of the graph (an
  /// explanation reads their gradient, or dropout applies to them). Shapes as above.
  ///   attention_probs:  probs = softmax(scale q k^T)
  ///   attention_apply:  out[b, :, h, :] = probs v   (probs: any [B, H, N, N], e.g. dropped out)
  virtual void attention_probs(const Strided& qkv, double scale, const Strided& probs) = 0;
  virtual void attention_apply(const Strided& qkv, const Strided& probs, const Strided& out) = 0;
  /// attention_apply's backward: dprobs = dout v^T [B, H, N, N]; in dqkv, dv = probs^T dout and
  /// the q and k parts 0 (every element written).
  virtual void attention_apply_backward(const Strided& qkv, const Strided& probs,
                                        const Strided& dout, const Strided& dprobs,
                                        const Strided& dqkv) = 0;
  /// attention_probs's backward: dS = P (dP - rowsum(dP P)), dq = scale dS k, dk = scale dS^T q,
  /// and dqkv's v part 0 (every element written).
  virtual void attention_probs_backward(const Strided& qkv, const Strided& probs,
                                        const Strided& dprobs, double scale,
                                        const Strided& dqkv) = 0;
  /// The same attention without the N x N probabilities (FlashAttention-2: key tiles with an
  /// online softmax; backends/cuda/flash_attention.cu). qkv [B, N, 3, H, Dh] contiguous; out
  /// [B, N, H, Dh] contiguous, of qkv's dtype; lse [B, H, N] float32, kept for the backward:
  ///   S = scale q k^T (causal: S[i, j] = -inf for j > i),  lse[i] = log sum_j exp(S[i, j]),
  ///   out[b, :, h, :] = exp(S - lse) v
  /// Returns false, having done nothing, when the backend has no such kernel for these shapes,
  /// dtype or setting; the caller then takes the materialised path (attention above).
  virtual bool flash_attention(const Strided& qkv, double scale, bool causal, const Strided& out,
                               const Strided& lse) {
    (void)qkv, (void)scale, (void)causal, (void)out, (void)lse;
    return false;
  }
  /// Its backward, the probabilities recomputed from lse: P = exp(S - lse),
  ///   D[i] = rowsum(dout[i] out[i]),  dv = P^T dout,  dS = P (dout v^T - D),
  ///   dq = scale dS k,  dk = scale dS^T q
  /// into dqkv [B, N, 3, H, Dh] contiguous (every element written). false as above.
  virtual bool flash_attention_backward(const Strided& qkv, const Strided& out, const Strided& dout,
                                        const Strided& lse, double scale, bool causal,
                                        const Strided& dqkv) {
    (void)qkv, (void)out, (void)dout, (void)lse, (void)scale, (void)causal, (void)dqkv;
    return false;
  }

  /// x: one image [C, H, W] -> cols [C * kh * kw, out_h * out_w] (zero padding). cols' rows are
  /// contiguous and cols.strides[0] >= out_h * out_w apart (a chunk's images side by side).
  virtual void im2col(const Strided& x, const Strided& cols, const ConvGeometry& g) = 0;
  /// The adjoint of im2col: dx [C, H, W] (zeroed here) += scattered cols (laid out as im2col's).
  virtual void col2im(const Strided& cols, const Strided& dx, const ConvGeometry& g) = 0;
  /// The whole batch's convolution in one call, where the backend has one (the CPU's: groups of
  /// images in parallel, backends/cpu/conv_batched.cpp): x [B, C, H, W] (any strides), w [Cout,
  /// K] and y [B, Cout, OH, OW] contiguous, bias [Cout] (data null: none),
  ///   y[b] = W @ im2col(x[b]) + bias[:, None].
  /// Returns false, having done nothing, when it has none for this dtype or setting
  /// (conv_algorithm.h); ops/conv.cpp then goes through im2col and gemm.
  virtual bool conv2d_batched(const Strided& x, const Strided& w, const Strided& bias,
                              const Strided& y, const ConvGeometry& g) {
    (void)x, (void)w, (void)bias, (void)y, (void)g;
    return false;
  }
  /// conv2d_batched with relu(y + residual) applied as y is written (ops::conv2d_add_relu, in
  /// inference only): residual laid out as y, contiguous (data null: none), relu whether to clamp
  /// (x > 0 ? x : 0, as ops::relu). The bits of the composition. false, having done nothing, where
  /// the backend has none; the op then composes conv2d, add and relu.
  virtual bool conv2d_batched_add_relu(const Strided& x, const Strided& w, const Strided& bias,
                                       const Strided& residual, bool relu, const Strided& y,
                                       const ConvGeometry& g) {
    (void)x, (void)w, (void)bias, (void)residual, (void)relu, (void)y, (void)g;
    return false;
  }
  /// Its backward from dy [B, Cout, OH, OW] contiguous: dx[b] = col2im(W^T dy[b]) into dx
  /// (contiguous; data null: not wanted), dw = sum_b dy[b] im2col(x[b])^T into dw ([Cout, K];
  /// data null: not wanted). false as above.
  virtual bool conv2d_batched_backward(const Strided& x, const Strided& w, const Strided& dy,
                                       const Strided& dx, const Strided& dw,
                                       const ConvGeometry& g) {
    (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)g;
    return false;
  }
  /// Max pooling (backends/cpu/pool.cpp): x [B, C, H, W] contiguous -> values [B, C, OH, OW]
  /// (x's dtype) and indices int64 [B, C, OH, OW], each contiguous, the indices with data null when
  /// not wanted (no gradient; with one, the backward scatters dy onto them):
  ///   values[b, c, oh, ow] = max over the window of x[b, c],  indices = its flat index h W + w
  /// (the first maximum in row-major order; a NaN wins, as PyTorch's max_pool2d); the window of
  /// output (oh, ow) is rows oh stride_h - pad_h + i dilation_h (i < kernel_h) and the columns
  /// likewise, inside the image. false when the backend has no such kernel (ops/pool.cpp then
  /// composes the windows).
  virtual bool max_pool2d(const Strided& x, const Strided& values, const Strided& indices,
                          const ConvGeometry& g) {
    (void)x, (void)values, (void)indices, (void)g;
    return false;
  }
  /// Depthwise convolution (groups = C; backends/cpu/conv_depthwise.cpp): x [B, C, H, W] (any
  /// strides), w [m C, 1, kh, kw] and y [B, m C, OH, OW] contiguous, bias [m C] (data null: none),
  ///   y[b, co] = bias[co] + x[b, co / m] (*) w[co]      (g.channels = C)
  /// false when the backend has no such kernel (ops/conv.cpp then convolves group by group).
  virtual bool depthwise_conv2d(const Strided& x, const Strided& w, const Strided& bias,
                                const Strided& y, const ConvGeometry& g) {
    (void)x, (void)w, (void)bias, (void)y, (void)g;
    return false;
  }
  /// Its backward from dy: dx (contiguous; data null: not wanted) and dw (data null: not wanted).
  virtual bool depthwise_conv2d_backward(const Strided& x, const Strided& w, const Strided& dy,
                                         const Strided& dx, const Strided& dw,
                                         const ConvGeometry& g) {
    (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)g;
    return false;
  }

  // Batch normalisation's kernels (ops/batch_norm.cpp). x, dy, y: [B, C, L] contiguous (L: the
  // positions of one channel's map); the per-channel operands are [C] contiguous. These defaults
  // compose each from reduce and binary (backends/batch_norm_default.cpp); a backend may fuse
  // them into one pass over x (the CPU does).
  /// mean[c] = sum_{b,l} x[b,c,l] / n,  var[c] = sum_{b,l} (x[b,c,l] - mean[c])^2 / n  (biased;
  /// two passes), n = B L.
  virtual void batch_norm_stats(const Strided& x, const Strided& mean, const Strided& var);
  /// sum_dy[c] = sum_{b,l} dy[b,c,l],  sum_dy_xmu[c] = sum_{b,l} dy[b,c,l] (x[b,c,l] - mean[c])
  virtual void batch_norm_backward_reduce(const Strided& x, const Strided& mean, const Strided& dy,
                                          const Strided& sum_dy, const Strided& sum_dy_xmu);
  /// y[b,c,l] = x[b,c,l] a[c] + z[b,c,l] zc[c] + d[c]; the z term only when z.data is non-null.
  /// Batch norm's output (x a + d) and its input gradient (dy a + x zc + d) are both this form.
  virtual void channel_affine(const Strided& x, const Strided& a, const Strided& z,
                              const Strided& zc, const Strided& d, const Strided& y);
  /// y[b,c,l] = max(x[b,c,l] a[c] + d[c] + z[b,c,l], 0), the z term only when z.data is
  /// non-null: batch norm with the ReLU that follows it and a residual. The default runs
  /// channel_affine, the add and relu as kernels of their own.
  virtual void channel_affine_relu(const Strided& x, const Strided& a, const Strided& d,
                                   const Strided& z, const Strided& y);

  // Scans and sorting along the last dim: x, y, values, indices [R, C] contiguous; float32,
  // float64 or int64 (indices int64). These defaults copy to the host, compute there and copy
  // back (backends/host_default.cpp), so every backend has them; a backend may override them.
  /// y[r, j] = sum_{i <= j} x[r, i]   (reverse: sum_{i >= j} x[r, i]), summed in that order
  virtual void cumsum(const Strided& x, const Strided& y, bool reverse);
  /// indices[r] = the stable permutation sorting row r (ascending, or descending; NaN counts as
  /// larger than every number, as PyTorch's sort), values[r, j] = x[r, indices[r, j]].
  virtual void sort(const Strided& x, const Strided& values, const Strided& indices,
                    bool descending);

  /// The recurrent layers' gate nonlinearities for one time step (ops/recurrent.cpp): B rows of
  /// hidden size H, every operand contiguous, float32 or float64. The products are the caller's
  /// (one for the input over all steps, one per step for the hidden state); this is the pass
  /// between them. Returns false, having done nothing, where the backend has no such kernel: the
  /// op then composes the cell from elementwise ops.
  ///   Tanh/Relu: h = act(gates)                                gates [B, H]
  ///   Lstm:      gates [B, 4H] in PyTorch's order (i, f, g, o), prev = c_prev [B, H]:
  ///              c = sigmoid(f) c_prev + sigmoid(i) tanh(g),  h = sigmoid(o) tanh(c);
  ///              saved [B, 4H] = (sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)) (may be gates)
  ///   Gru:       gates [B, 3H] = x W_ih^T + b_ih (r, z, n), hidden [B, 3H] = h_prev W_hh^T +
  ///              b_hh, prev = h_prev:  r, z = sigmoid(gates_rz + hidden_rz),
  ///              n = tanh(gates_n + r hidden_n),  h = (1 - z) n + z h_prev;
  ///              saved [B, 4H] = (r, z, n, hidden_n)
  /// Operands a cell does not use may have data null (c for all but Lstm, hidden for all but Gru).
  enum class RnnCell : uint8_t { Tanh, Relu, Lstm, Gru };
  virtual bool rnn_cell(RnnCell cell, const Strided& gates, const Strided& hidden,
                        const Strided& prev, const Strided& saved, const Strided& h,
                        const Strided& c) {
    (void)cell, (void)gates, (void)hidden, (void)prev, (void)saved, (void)h, (void)c;
    return false;
  }
  /// Its backward for one step, given dh (the gradient at h: the output's plus the next step's):
  ///   Tanh/Relu: dgates = dh act'(h)                          (saved unused, out = h)
  ///   Lstm:      out = c, dc = the gradient at c from the next step (data null: none); writes
  ///              dgates [B, 4H] (at the pre-activations) and dprev = dc_prev
  ///   Gru:       writes dgates [B, 3H] (at x W_ih^T + b_ih), dhidden [B, 3H] (at h_prev W_hh^T
  ///              + b_hh) and dprev = dh z, the part of dh_prev that does not go through W_hh
  /// false as above.
  virtual bool rnn_cell_backward(RnnCell cell, const Strided& saved, const Strided& prev,
                                 const Strided& out, const Strided& dh, const Strided& dc,
                                 const Strided& dgates, const Strided& dhidden,
                                 const Strided& dprev) {
    (void)cell, (void)saved, (void)prev, (void)out, (void)dh, (void)dc, (void)dgates, (void)dhidden,
        (void)dprev;
    return false;
  }

  /// x: [B, C, H, W] -> y: [B, C, OH, OW], PyTorch's nearest / bilinear / bicubic (A = -0.75).
  virtual void interpolate(const Strided& x, const Strided& y, const InterpGeometry& g) = 0;
  /// The adjoint: dx (zeroed here) from dy.
  virtual void interpolate_backward(const Strided& dy, const Strided& dx,
                                    const InterpGeometry& g) = 0;

  // Optimizer updates, in place, elementwise; all tensors contiguous and of the param's shape.
  /// Adam/AdamW: updates param, exp_avg and exp_avg_sq from grad.
  virtual void adam_step(const Strided& param, const Strided& grad, const Strided& exp_avg,
                         const Strided& exp_avg_sq, const AdamStep& o) = 0;
  /// The same step for several parameters that share the options (one param group at one step
  /// count), results equal to adam_step's on each. The default loops over adam_step; CUDA runs
  /// one kernel over all of them (backends/cuda/optim.cu).
  virtual void adam_step_multi(std::span<const AdamTensors> tensors, const AdamStep& o) {
    for (const AdamTensors& t : tensors) adam_step(t.param, t.grad, t.exp_avg, t.exp_avg_sq, o);
  }
  /// SGD: updates param (and momentum_buf when momentum != 0) from grad.
  virtual void sgd_step(const Strided& param, const Strided& grad, const Strided& momentum_buf,
                        const SgdStep& o) = 0;

 protected:
  /// x itself when its dtype is t, else a contiguous copy of it converted to t (in keep).
  Strided as_dtype(const Strided& x, DType t, StoragePtr& keep);
};

/// The backend of a device; throws Error when this build has none for it.
Backend& backend_for(const Device& device);
/// Whether this build has a backend for the device type.
bool backend_available(DeviceType type);
void register_backend(DeviceType type, Backend* backend);

}  // namespace vitrine
