// float32 matrix products on the GPU, as torch.set_float32_matmul_precision:
//   "highest"  full float32 (the default)
//   "high"     TF32 tensor cores: inputs rounded to a 10-bit mantissa, float32 accumulation
//   "medium"   bfloat16 tensor cores: inputs rounded to bfloat16 (8-bit mantissa; on CUDA
//              bfloat16 copies of them, docs/cuda.md), float32 accumulation and output; the
//              weights, their gradients and everything outside the products stay float32
//              (vitrine-train's train.precision bf16)
// The CPU always computes in full float32.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace vitrine {

enum class MatmulPrecision : uint8_t { Highest, High, Medium };

/// "highest", "high" or "medium"; anything else is an Error naming them.
void set_float32_matmul_precision(std::string_view precision);
std::string get_float32_matmul_precision();
MatmulPrecision float32_matmul_precision();
/// The precision word for a mode as vitrine-train's train.precision and vitrine-bench's
/// --precision name it: "bf16" -> "medium", "tf32" -> "high", anything else ("fp32") ->
/// "highest".
const char* float32_matmul_precision_for(std::string_view mode);

}  // namespace vitrine
