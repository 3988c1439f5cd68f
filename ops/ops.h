// The differentiable operations, one line each with its formula. Each is defined with its backward
// rule beside it: elementwise.cpp, reduce.cpp, linalg.cpp, shape.cpp, index.cpp, nn_ops.cpp,
// conv.cpp, interpolate.cpp; factories in factory.cpp, in-place ops in inplace.cpp. The ops that
// sequence models reach for (sin/cos, triu/tril, masked_fill, split/chunk, sort/topk, cumsum,
// multinomial, einsum, ...) are listed in ops/sequence.h, the recurrent layers' op in
// ops/recurrent.h; vitrine.h includes all three.
// Broadcasting follows NumPy; `dim` arguments may be negative (counted from the end).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "autograd/tensor.h"

namespace vitrine::ops {

// ---- factories (factory.cpp) ----------------------------------------------------------------
Tensor empty(const Dims& shape, DType dtype = kFloat32, Device device = kCPU);
Tensor zeros(const Dims& shape, DType dtype = kFloat32, Device device = kCPU);
Tensor ones(const Dims& shape, DType dtype = kFloat32, Device device = kCPU);
Tensor full(const Dims& shape, double value, DType dtype = kFloat32, Device device = kCPU);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor full_like(const Tensor& x, double value);
/// A 0-dim tensor holding value.
Tensor scalar(double value, DType dtype = kFloat32, Device device = kCPU);
/// [start, start + step, ...) up to end (exclusive)
Tensor arange(double start, double end, double step = 1, DType dtype = kFloat32);
Tensor arange(double end, DType dtype = kInt64);
/// steps values from start to end inclusive, evenly spaced
Tensor linspace(double start, double end, int64_t steps, DType dtype = kFloat32);
/// From host values; shape defaults to [values.size()].
Tensor from_vector(const std::vector<double>& values, const Dims& shape = {},
                   DType dtype = kFloat32);
Tensor from_vector(const std::vector<float>& values, const Dims& shape = {});
Tensor from_vector(const std::vector<int64_t>& values, const Dims& shape = {});
Tensor tensor(std::initializer_list<double> values, DType dtype = kFloat32);
/// U[lo, hi). Element i is a function of (gen's seed, its offset + i) only (Philox4x32-10), so
/// every device draws the same numbers.
Tensor rand(const Dims& shape, Generator& gen = default_generator(), DType dtype = kFloat32,
            double lo = 0, double hi = 1, Device device = kCPU);
/// N(0, 1)
Tensor randn(const Dims& shape, Generator& gen = default_generator(), DType dtype = kFloat32,
             Device device = kCPU);
/// integers in [lo, hi)
Tensor randint(int64_t lo, int64_t hi, const Dims& shape, Generator& gen = default_generator(),
               Device device = kCPU);

// ---- elementwise (elementwise.cpp) ----------------------------------------------------------
/// a + alpha * b
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1);
/// a - b
Tensor sub(const Tensor& a, const Tensor& b);
/// a * b
Tensor mul(const Tensor& a, const Tensor& b);
/// a / b
Tensor div(const Tensor& a, const Tensor& b);
/// x + c
Tensor add(const Tensor& x, double c);
/// x * c
Tensor mul(const Tensor& x, double c);
/// -x
Tensor neg(const Tensor& x);
/// a ^ b   (d/da = b a^(b-1), d/db = a^b ln a)
Tensor pow(const Tensor& a, const Tensor& b);
/// x ^ p   (d/dx = p x^(p-1))
Tensor pow(const Tensor& x, double p);
/// e^x
Tensor exp(const Tensor& x);
/// ln x
Tensor log(const Tensor& x);
/// sqrt(x)
Tensor sqrt(const Tensor& x);
/// 1 / sqrt(x)
Tensor rsqrt(const Tensor& x);
/// |x|   (gradient sign(x), 0 at 0)
Tensor abs(const Tensor& x);
/// sign(x) in {-1, 0, 1}   (no gradient)
Tensor sign(const Tensor& x);
/// tanh(x)   (d/dx = 1 - tanh(x)^2)
Tensor tanh(const Tensor& x);
/// 1 / (1 + e^-x)   (d/dx = s (1 - s))
Tensor sigmoid(const Tensor& x);
/// log(1 + e^x), and x itself above 20 as PyTorch's threshold   (d/dx = sigmoid(x))
Tensor softplus(const Tensor& x);
/// max(x, 0)   (gradient 1 where x > 0)
Tensor relu(const Tensor& x);
/// x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); approximate "tanh":
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
Tensor gelu(const Tensor& x, bool tanh_approx = false);
/// min(max(x, lo), hi); gradient 1 where lo <= x <= hi, else 0 (as PyTorch; a bound may be absent)
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
/// max(a, b)   (gradient to the larger; split evenly on ties, as PyTorch)
Tensor maximum(const Tensor& a, const Tensor& b);
/// min(a, b)
Tensor minimum(const Tensor& a, const Tensor& b);
/// Comparisons: bool tensors, no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
/// cond ? a : b   (no gradient to cond)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// dtype conversion; differentiable between float dtypes
Tensor to_dtype(const Tensor& x, DType dtype);

// ---- reductions (reduce.cpp); empty dims = all dims --------------------------------------
/// sum over dims
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// sum / count
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// sum (x - mean)^2 / (count - 1 if unbiased else count)
Tensor var(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
struct ValuesIndices {
  Tensor values, indices;
};
/// max over one dim, with the int64 index of the first maximum (gradient to that element)
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
/// max over all elements (gradient split evenly among ties, as PyTorch)
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
/// log sum exp(x), computed as m + log sum exp(x - m)   (gradient softmax(x))
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
/// Sums a broadcast gradient back to shape (the engine's one place for broadcast reduction).
Tensor sum_to(const Tensor& x, const Dims& shape);

// ---- linear algebra (linalg.cpp) -----------------------------------------------------------
/// a @ b: 1-D/2-D as NumPy, batched with broadcast batch dims; da = dy b^T, db = a^T dy
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x W^T + b (+ residual) (PyTorch's F.linear, and a residual): x [..., in], weight
/// [out, in], bias [out] or undefined, residual [..., out] or undefined. Bias and residual are
/// added as the product is written (Backend::gemm_fused), not in passes of their own;
/// dx = dy W, dW = dy^T x, db = sum_rows dy, dresidual = dy.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Tensor& residual = Tensor());
/// y = gelu(x W1^T + b1) W2^T + b2 (+ residual): a transformer MLP (timm's Mlp with exact GELU
/// and no dropout) as one op, with the residual of the block around it when given. x [..., in],
/// w1 [hidden, in], b1 [hidden], w2 [out, hidden], b2 [out] (either bias may be undefined),
/// residual [..., out] or undefined. GELU, the biases and the residual are applied as the
/// products are written (Backend::gemm_fused); the backward, with pre = x W1^T + b1:
///   dpre = (dy W2) * gelu'(pre)   (one product, GELU's gradient applied as it is written)
///   dx = dpre W1,  dW1 = dpre^T x,  db1 = sum_rows dpre,
///   dW2 = dy^T gelu(pre),  db2 = sum_rows dy,  dresidual = dy.
/// The same values as linear, gelu and linear one after another; like gelu's, its backward is
/// not differentiable again.
Tensor mlp_gelu(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2, const Tensor& residual = Tensor());
/// The same MLP with another activation act (backend.h's Activation: GELU as mlp_gelu, the tanh
/// GELU of GPT-2, ReLU, SiLU): y = act(x W1^T + b1) W2^T + b2 (+ residual), act and its
/// gradient applied as the products are written, as mlp_gelu's.
Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
           Activation act, const Tensor& residual = Tensor());

// ---- shape (shape.cpp): views share storage where strides allow ---------------------------
/// Same elements, new shape (one dim may be -1); a view when strides allow, else a copy.
Tensor reshape(const Tensor& x, const Dims& shape);
/// As reshape, but must be a view (error otherwise).
Tensor view(const Tensor& x, const Dims& shape);
Tensor flatten(const Tensor& x, int64_t start = 0, int64_t end = -1);
Tensor permute(const Tensor& x, const Dims& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
/// Removes dim if its size is 1 (else returns x unchanged, as PyTorch); squeeze(x) removes every
/// size-1 dim.
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);
Tensor unsqueeze(const Tensor& x, int64_t dim);
/// Broadcasts size-1 dims to shape (-1 keeps a dim); a view with stride 0.
Tensor expand(const Tensor& x, const Dims& shape);
/// x[..., start:end:step, ...] along dim; negative bounds count from the end; bounds outside
/// [-size, size] are errors (use vitrine::kEnd for "to the end"); step >= 1
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
/// x[..., start:start+length, ...] along dim (must be in range)
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
/// x[..., index, ...]: removes dim
Tensor select(const Tensor& x, int64_t dim, int64_t index);
/// Copies into a contiguous tensor when not already; differentiable.
Tensor contiguous(const Tensor& x);
/// Concatenates along dim (other dims must match).
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
/// Stacks along a new dim.
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
/// Constant padding, PyTorch order: pads = {last_lo, last_hi, prev_lo, prev_hi, ...}.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0);

// ---- indexing (index.cpp) ------------------------------------------------------------------
/// y = x indexed by int64 index (1-D) along dim; gradient scattered back with index_add
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// y[i][j] = x[i][index[i][j]] (dim = 1); gradient scattered back with scatter_add
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// ---- neural network (nn_ops.cpp, conv.cpp, interpolate.cpp) --------------------------------
/// y_i = e^(x_i - max) / sum_j e^(x_j - max) along dim
Tensor softmax(const Tensor& x, int64_t dim);
/// y_i = x_i - max - log sum_j e^(x_j - max) along dim
Tensor log_softmax(const Tensor& x, int64_t dim);
/// Fused multi-head self-attention (attention.cpp). qkv: [B, N, 3 * heads * Dh], laid out as
/// timm's qkv projection output ([B, N, 3, heads, Dh]); with q, k, v the [N, Dh] slices of one
/// image and head:  out[b, :, h] = softmax(scale q k^T) v,  returned as [B, N, heads * Dh].
/// probs: when given, receives the probabilities [B, heads, N, N] (values outside the graph).
/// Without probs, a backend's flash attention runs where it has one (CUDA: float32 under matmul
/// precision "medium", or bfloat16 qkv, which needs it), keeping no probabilities for backward.
Tensor attention(const Tensor& qkv, int64_t heads, double scale, Tensor* probs = nullptr);
/// The same attention in two ops, with the probabilities a tensor of the graph (for their
/// gradient, or dropout on them); attention(qkv) = attention_apply(attention_probs(qkv), qkv).
///   attention_probs: P = softmax(scale q k^T) per image and head, [B, heads, N, N]
///   attention_apply: out[b, :, h] = P[b, h] v, [B, N, heads * Dh] (P: any [B, heads, N, N])
Tensor attention_probs(const Tensor& qkv, int64_t heads, double scale);
Tensor attention_apply(const Tensor& probs, const Tensor& qkv);
/// y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims of normalized_shape
/// (biased var); weight/bias may be undefined
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);
enum class Reduction { None, Mean, Sum };
/// loss_n = -sum_c q_nc log softmax(logits_n)_c with q = (1 - s) onehot(target_n) + s / C;
/// logits [N, C] (or [C]), target int64 [N]; or logits [N, C, d1, ..., dk] with target
/// [N, d1, ..., dk] (a loss per position, PyTorch's K-dimensional case: a sequence model's
/// [B, vocab, T]); mean divides by the count of non-ignored targets
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::Mean, double label_smoothing = 0,
                     int64_t ignore_index = -100);
/// train: y = x * mask / (1 - p), mask ~ Bernoulli(1 - p) from gen; eval: y = x
Tensor dropout(const Tensor& x, double p, bool train, Generator& gen = default_generator());
/// PyTorch's F.conv2d (conv.cpp): x [B, Cin, H, W], weight [Cout, Cin / groups, kh, kw], bias
/// [Cout] or undefined -> [B, Cout, OH, OW], OH = (H + 2 pad_h - dil_h (kh - 1) - 1) / stride_h +
/// 1:
///   y[b, co, oh, ow] = bias[co] + sum_{c in co's group, i, j} weight[co, c, i, j]
///                      x[b, c, oh stride_h - pad_h + i dil_h, ow stride_w - pad_w + j dil_w]
/// (zero padding; channel group gi is input channels gi Cin / groups .. and output channels
/// gi Cout / groups ..). On the CPU groups of images at once: 3x3s of 64 channels and more by
/// Winograd's F(2x2, 3x3), others as an implicit GEMM over the padded input where that wastes
/// little, else im2col + GEMM; depthwise (groups = Cin) by direct loops.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              std::pair<int64_t, int64_t> stride = {1, 1},
              std::pair<int64_t, int64_t> padding = {0, 0},
              std::pair<int64_t, int64_t> dilation = {1, 1}, int64_t groups = 1);
/// relu(conv2d(x, weight, bias) + residual) (residual [B, Cout, OH, OW] or undefined; relu false:
/// no clamp), the composition's bits. Where nothing needs a gradient (inference) and the backend
/// writes it as one pass (the CPU's batched convolution, float32, groups = 1), the residual and
/// the clamp are applied as the convolution writes y, not as two more passes over it; else
/// conv2d, add and relu. A ResNet's blocks call it in inference with their batch norm folded
/// into the convolution (nn::fuse_conv_bn_weights).
Tensor conv2d_add_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& residual, bool relu,
                       std::pair<int64_t, int64_t> stride = {1, 1},
                       std::pair<int64_t, int64_t> padding = {0, 0},
                       std::pair<int64_t, int64_t> dilation = {1, 1}, int64_t groups = 1);
/// Resizes x [B, C, H, W] (or [C, H, W]) to size, or by scale_factor (PyTorch's semantics: the
/// output size is floor(in * scale) and, when recompute_scale_factor is false, the given scale
/// maps output to input coordinates). mode: "nearest", "bilinear", "bicubic" (A = -0.75).
struct InterpolateOptions {
  std::optional<std::pair<int64_t, int64_t>> size;
  std::optional<std::pair<double, double>> scale_factor;
  std::string mode = "nearest";
  bool align_corners = false;
  bool recompute_scale_factor = false;
};
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

// ---- pooling, batch norm, embedding, masked attention: compositions of the ops above -------
/// Max over each kernel window (pool.cpp): x [B, C, H, W] -> [B, C, OH, OW] with
/// OH = (H + 2 pad_h - k_h) / stride_h + 1; padding counts as -inf; the gradient goes to the
/// first maximum of each window (row-major), as PyTorch's max_pool2d.
Tensor max_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                  std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding = {0, 0});
/// Mean over each kernel window (pool.cpp), zero padding; divides by k_h k_w, or by the number of
/// the window's elements inside the image when count_include_pad is false.
Tensor avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                  std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding = {0, 0},
                  bool count_include_pad = true);
/// y[..., i, j] = mean of x over rows [floor(i H / OH), ceil((i + 1) H / OH)) and the columns
/// likewise (pool.cpp), PyTorch's adaptive bins; output_size {1, 1} is the global average.
Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size);
/// A batch split across processes, for batch_norm (nn::SyncBatchNorm): all_gather(t [k], float64)
/// returns [P, k], row p process p's t (a collective: every process calls it, in the same order).
/// In training the statistics are then the whole batch's, N = sum_p n_p values per channel:
///   mu = sum_p n_p mu_p / N,  s2 = sum_p n_p (s2_p + (mu_p - mu)^2) / N
/// the running variance is unbiased by N / (N - 1), and dx takes sum dy and sum dy (x - mu) summed
/// over the processes; dweight and dbias are this process's share (DDP averages them).
struct BatchNormSync {
  std::function<Tensor(const Tensor&)> all_gather;  // empty: this process's batch only
};
/// relu(batch_norm(x, ...) + residual) in one op (batch_norm.cpp): the ResNet's BN-ReLU
/// (residual undefined) and its block's last BN + shortcut + ReLU; one pass forward, the ReLU's
/// mask applied to dy inside the backward. Equals the composition, which the tests check.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const Tensor& residual = Tensor(),
                       const BatchNormSync& sync = {});
/// PyTorch's F.batch_norm (batch_norm.cpp), x [B, C, ...], statistics per channel over the rest:
/// y = (x - mu) / sqrt(s2 + eps) * weight + bias with the batch's mean and biased variance when
/// training (updating running_mean/var by momentum m: r = (1 - m) r + m stat, the variance
/// unbiased), else the running ones. weight, bias, running_* may be undefined (not training).
/// sync: the batch is split across processes (above).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5, const BatchNormSync& sync = {});
/// y[..., :] = weight[indices[...], :] (index.cpp): indices int64 of any shape -> shape + [dim];
/// the gradient adds each row's gradients back into weight (index_add).
Tensor embedding(const Tensor& weight, const Tensor& indices);
/// PyTorch's F.scaled_dot_product_attention (attention.cpp) as matmul, softmax, matmul:
///   y = dropout(softmax(q k^T * scale + M), dropout_p) v,
///   q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]
/// scale defaults to 1 / sqrt(E). attn_mask (broadcast to [..., L, S]): bool, true where a query
/// may attend (M = 0 there, -inf elsewhere), or float, added to the scores. is_causal: query i
/// attends to keys j <= i (top-left aligned, as PyTorch). A row that may attend to nothing is
/// NaN, as PyTorch's. dropout_p > 0 drops probabilities with gen (as PyTorch, whatever the
/// mode: pass 0 in eval). probs: when given, receives the probabilities before dropout, a tensor
/// of the graph (a hook on it sees their gradient).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator& gen = default_generator(), Tensor* probs = nullptr);

}  // namespace vitrine::ops
