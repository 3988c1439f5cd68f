// The tensor ops sequence models reach for: trigonometry and log1p/expm1, triangles and masks,
// splitting, sorting and top-k, scans, sampling, batched products, norms, flips and rolls,
// tiling, and einsum. PyTorch 1.13's names, argument order, defaults and semantics; `dim`
// arguments may be negative (counted from the end). Defined with their backward rules in
// elementwise.cpp (sin, cos, log1p, expm1), sequence.cpp, sort.cpp and einsum.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace vitrine::ops {

// ---- elementwise (elementwise.cpp) ----------------------------------------------------------
/// sin x   (d/dx = cos x)
Tensor sin(const Tensor& x);
/// cos x   (d/dx = -sin x)
Tensor cos(const Tensor& x);
/// log(1 + x), accurate for small x   (d/dx = 1 / (1 + x))
Tensor log1p(const Tensor& x);
/// e^x - 1, accurate for small x   (d/dx = e^x)
Tensor expm1(const Tensor& x);

// ---- triangles and masks (sequence.cpp) -----------------------------------------------------
/// y[..., i, j] = x[..., i, j] where j - i >= diagonal, else 0 (the last two dims; batched)
Tensor triu(const Tensor& x, int64_t diagonal = 0);
/// y[..., i, j] = x[..., i, j] where j - i <= diagonal, else 0
Tensor tril(const Tensor& x, int64_t diagonal = 0);
/// y = mask ? value : x, mask bool, broadcast with x (as Tensor.masked_fill); gradient
/// dy where mask is false, 0 where filled
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// I[i, j] = (i == j), [n, n]
Tensor eye(int64_t n, DType dtype = kFloat32, Device device = kCPU);
/// I[i, j] = (i == j), [n, m]
Tensor eye(int64_t n, int64_t m, DType dtype = kFloat32, Device device = kCPU);

// ---- splitting (sequence.cpp): views of x by narrow ----------------------------------------
/// Pieces of split_size along dim, the last one smaller when the size does not divide
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
/// Pieces of the given sizes along dim (they must add up to its size)
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes,
                          int64_t dim = 0);
/// split(x, ceil(size / chunks), dim): at most chunks pieces (fewer when they run out)
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- sorting and scans (sort.cpp) -----------------------------------------------------------
/// values = x sorted along dim, indices: values = gather(x, dim, indices); the sort is always
/// stable (equal elements keep their order; NaN sorts above every number), `stable` is accepted
/// for PyTorch's signature. dvalues scatters back: dx = scatter_add(0, dim, indices, dy)
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// sort(x, dim, descending).indices (int64, no gradient)
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// The k largest (smallest when !largest) along dim, as the first k of the stable sort: ties
/// in index order. Always sorted (with sorted = false the order is unspecified in PyTorch too).
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                   bool sorted = true);
/// y_j = sum_{i <= j} x_i along dim   (dx_i = sum_{j >= i} dy_j, the reverse cumsum)
Tensor cumsum(const Tensor& x, int64_t dim);

// ---- one-hot and sampling (sequence.cpp, sort.cpp) ------------------------------------------
/// y[..., c] = (indices[...] == c), int64 [..., num_classes]; num_classes -1: max + 1
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
/// Category indices (int64 [num_samples], or [N, num_samples] for probs [N, C]) drawn with
/// probability probs[c] / sum(probs) from gen's uniform draws u: with replacement by the inverse
/// CDF (the first c with cdf[c] > u); without, the num_samples largest keys p_c / E_c, E_c =
/// -log(1 - u_c) ~ Exp(1) (the exponential race, PyTorch's method), in order of the key.
/// Reproducible from gen's seed; not PyTorch's stream.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator& gen = default_generator());
/// A random permutation of 0 .. n-1 (argsort of n uniform keys drawn from gen)
Tensor randperm(int64_t n, Generator& gen = default_generator(), DType dtype = kInt64,
                Device device = kCPU);

// ---- products (sequence.cpp, einsum.cpp) ----------------------------------------------------
/// y[b] = a[b] @ b[b]: a [B, N, M], b [B, M, P] -> [B, N, P] (3-D only, no broadcast)
Tensor bmm(const Tensor& a, const Tensor& b);
/// y = beta input + alpha bmm(batch1, batch2), input broadcast to [B, N, P] (ignored when
/// beta = 0, as PyTorch)
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta = 1,
               double alpha = 1);
/// Sums of products over the subscripts the output leaves out, as torch.einsum: any number of
/// operands, letters a-z A-Z, "->" (or implicit: the letters seen once, alphabetically,
/// upper case first), "..." for broadcast dims, repeated letters in one operand for diagonals,
/// size-1 dims broadcast. Pairwise by permute, reshape and matmul, left to right.
/// einsum("bhqd,bhkd->bhqk", {q, k}) = q @ k^T per batch and head
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

// ---- norms (sequence.cpp); empty dims = all dims -------------------------------------------
/// ||x||_p over dims = (sum |x|^p)^(1/p), the vector norm (p = 2 is "fro"); p = inf: max |x|,
/// -inf: min |x|, 0: count of x != 0. Gradient: p = 2: x / ||x|| (0 where the norm is 0, as
/// PyTorch); 1: sign(x); +-inf: sign(x) shared evenly among the elements reaching the norm;
/// 0: none (a count); else sign(x) |x|^(p-1) / ||x||^(p-1) (0 where the norm is 0)
Tensor norm(const Tensor& x, double p = 2, const Dims& dims = {}, bool keepdim = false);

// ---- reordering and tiling (sequence.cpp) ---------------------------------------------------
/// y[..., i, ...] = x[..., n - 1 - i, ...] along each of dims (a copy, as PyTorch)
Tensor flip(const Tensor& x, const Dims& dims);
/// y[..., (i + s) mod n, ...] = x[..., i, ...] along each dim with its shift; without dims,
/// over the flattened tensor (the shape is kept)
Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims = {});
/// x tiled sizes[i] times along dim i (as Tensor.repeat); more sizes than dims adds leading
/// dims. dx = sum of dy's tiles
Tensor repeat(const Tensor& x, const Dims& sizes);

}  // namespace vitrine::ops
