// The GPU paths written for speed that have not yet run on a GPU, and their switches
// (docs/cuda.md, "What has run where"). The rule of the house: no default that has never run on
// its hardware. So each path here is off until a GPU run has passed it, and taken only when
// turned on:
//   - by its environment variable set to 1 (read once, at the first question; 0 turns it off,
//     any other value is an Error naming the variable), or
//   - by set_gpu_path_enabled, as PyTorch's torch.backends.cuda.enable_flash_sdp(True).
// When a GPU run passes a path, its entry's default_on becomes true (the GPU issue's work), and
// docs/cuda.md's table says on which GPU and at which commit.
// Where each is read (the one place that decides whether the path runs):
//   FlashAttention      backends/cuda/cuda_attention.cpp  CudaBackend::use_flash
//   CudaLt              backends/cuda/lt_gemm.cpp         LtGemm::ready (cuBLASLt epilogues)
//   Bf16Operands        ops/bf16_operands.cpp             ops::detail::bf16_operands
//   MultiTensorAdam     nn/optim/adam.cpp                 Adam::step (Backend::adam_step_multi)
//   BatchedConv         backends/cuda/cuda_backend.h      CudaBackend::batched_conv
//   PointerLists        backends/cuda/cuda_gemm.cpp       CudaBackend::device_pointer_list
#pragma once
#include <cstdint>
#include <span>

namespace vitrine {

enum class GpuPath : uint8_t {
  FlashAttention,   // FlashAttention-2 kernels for attention without probabilities
  CudaLt,           // cuBLASLt products with the bias, residual and bias gradient in the epilogue
  Bf16Operands,     // linear layers under "medium" on bfloat16 copies made once per tensor
  MultiTensorAdam,  // one Adam/AdamW launch per 48 parameters
  BatchedConv,      // CUDA convolution: one im2col launch and one product per chunk of images
  PointerLists,     // CUDA attention: batched products' pointer lists kept on the device
};

struct GpuPathInfo {
  GpuPath path;
  const char* name;      // "flash attention"
  const char* variable;  // "VITRINE_FLASH_ATTENTION"
  bool default_on;       // true once a GPU run has passed it
  const char* where;     // the function that reads the switch
};

/// Every path, in GpuPath's order.
std::span<const GpuPathInfo> gpu_paths();
const GpuPathInfo& gpu_path_info(GpuPath path);

/// Whether path is taken in this process: set_gpu_path_enabled's last word, else its variable
/// ("1" on, "0" off), else its default.
bool gpu_path_enabled(GpuPath path);
void set_gpu_path_enabled(GpuPath path, bool on);

/// What a value of path's variable means: null (unset) or "" -> the default, "1" -> on,
/// "0" -> off; anything else is an Error naming the variable, the value and what is expected.
bool gpu_path_setting(GpuPath path, const char* value);

/// set_gpu_path_enabled(path, on) while it lives; the setting before it afterwards.
class GpuPathGuard {
 public:
  GpuPathGuard(GpuPath path, bool on);
  ~GpuPathGuard();
  GpuPathGuard(const GpuPathGuard&) = delete;
  GpuPathGuard& operator=(const GpuPathGuard&) = delete;

 private:
  GpuPath path_;
  bool before_;
};

}  // namespace vitrine
