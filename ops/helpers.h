// Helpers shared by the op files (not public API): argument checks with the op's name in the
// message, output allocation, and broadcast views for kernels.
#pragma once
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace vitrine::ops::detail {

/// A defined tensor, or an error naming op and the argument.
void check_defined(const Tensor& t, const char* op, const char* arg);
/// float32 or float64, or an error naming op.
void check_float(const Tensor& t, const char* op);
/// Same dtype and device, or an error naming op and both.
void check_same(const Tensor& a, const Tensor& b, const char* op);
/// The kernel view of t broadcast (stride 0) to shape (t's shape must broadcast to it).
Strided broadcast_view(const Tensor& t, const Dims& shape);
/// A new contiguous tensor on t's device.
inline Tensor empty_on(const Tensor& like, const Dims& shape, DType dtype) {
  return Tensor::empty(shape, dtype, like.device());
}
/// t's values, contiguous, without graph (t itself when already contiguous); undefined stays so.
/// What a fused kernel reads.
Tensor plain(const Tensor& t);
/// Records a node whose backward refuses (for outputs of fused backward kernels), so that a
/// second derivative through them is an error instead of a silent zero.
Tensor no_double_backward(Tensor y, std::string_view op, const std::vector<Tensor>& inputs);
/// The reduced dims as a sorted list of distinct non-negative dims (empty dims = all).
Dims reduce_dims(const Dims& dims, int ndim, const char* op);
/// The shape with the reduced dims set to 1.
Dims keepdim_shape(const Dims& shape, const Dims& rdims);
/// The attention kernels' view of a contiguous qkv [B, N, 3 D] as [B, N, 3, heads, D / heads].
Strided view5(const Tensor& t, int64_t heads);
/// Removes the reduced dims from a keepdim-shaped result.
Dims squeezed_shape(const Dims& shape, const Dims& rdims);
/// zeros(shape) with src scatter-added at index along dim: the adjoint of gather (ops/index.cpp),
/// whose own gradient is the gather again.
Tensor scatter_add_into(const Dims& shape, int dim, const Tensor& index, const Tensor& src);

// bfloat16 operands (ops/bf16_operands.cpp, docs/cuda.md): under matmul precision "medium" on
// CUDA, linear layers multiply bfloat16 copies of their float32 inputs and weights, made once.
/// Whether x's linear layers take bfloat16 operands: float32 on a CUDA device, precision
/// "medium", and VITRINE_BF16_OPERANDS not 0.
bool bf16_operands(const Tensor& x);
/// Tests only: the CPU takes bfloat16 operands too under "medium" (its products multiply float32
/// copies of them), so that the CPU suite checks the layers' bfloat16 path without a GPU.
void set_bf16_operands_on_cpu(bool on);
/// x's values rounded to bfloat16, contiguous, without graph.
Tensor bf16_copy(const Tensor& x);
/// The bfloat16 copy of a weight, made once per version of it (an optimizer step bumps the
/// version) and kept while the weight lives.
Tensor bf16_weight(const Tensor& w);

}  // namespace vitrine::ops::detail
