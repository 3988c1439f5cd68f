// The opt-in GPU paths' table and switches (gpu_paths.h). This file is compiled in every build,
// with or without CUDA, so that the defaults are tested on any machine.
#include "backends/gpu_paths.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backends/env_switch.h"
#include "backends/error.h"

namespace vitrine {

namespace {
constexpr std::array<GpuPathInfo, 6> kPaths{{
    {GpuPath::FlashAttention, "flash attention", "VITRINE_FLASH_ATTENTION", false,
     "CudaBackend::use_flash"},
    {GpuPath::CudaLt, "cuBLASLt epilogues", "VITRINE_CUDA_LT", false, "LtGemm::ready"},
    {GpuPath::Bf16Operands, "bfloat16-operand linear layers", "VITRINE_BF16_OPERANDS", false,
     "ops::detail::bf16_operands"},
    {GpuPath::MultiTensorAdam, "multi-tensor Adam/AdamW", "VITRINE_MULTI_TENSOR_ADAM", false,
     "Adam::step"},
    {GpuPath::BatchedConv, "batched convolution (one im2col per chunk of images)",
     "VITRINE_CUDA_BATCHED_CONV", false, "CudaBackend::batched_conv"},
    {GpuPath::PointerLists, "kept pointer lists of attention's batched products",
     "VITRINE_CUDA_POINTER_LISTS", false, "CudaBackend::device_pointer_list"},
}};

// Per path: -1 not yet decided (the environment is read at the first question), else 0 or 1.
std::array<std::atomic<int>, kPaths.size()> g_state{-1, -1, -1, -1, -1, -1};

size_t index(GpuPath path) { return static_cast<size_t>(path); }
}  // namespace

std::span<const GpuPathInfo> gpu_paths() { return kPaths; }

const GpuPathInfo& gpu_path_info(GpuPath path) {
  VT_ASSERT(index(path) < kPaths.size() && kPaths[index(path)].path == path);
  return kPaths[index(path)];
}

bool gpu_path_setting(GpuPath path, const char* value) {
  const GpuPathInfo& info = gpu_path_info(path);
  const std::string_view v = value ? value : "";
  if (v.empty()) return info.default_on;
  VT_CHECK(v == "0" || v == "1",
           "{}: '{}' is not a switch value (expected 1 to turn the {} on, or 0 to turn it off)",
           info.variable, v, info.name);
  return v == "1";
}

bool gpu_path_enabled(GpuPath path) {
  std::atomic<int>& s = g_state[index(path)];
  int on = s.load(std::memory_order_relaxed);
  if (on < 0) {
    const std::string value(env_value(gpu_path_info(path).variable));  // "" when unset: default
    on = gpu_path_setting(path, value.c_str()) ? 1 : 0;
    int unset = -1;  // a set_gpu_path_enabled in between wins
    if (!s.compare_exchange_strong(unset, on)) on = unset;
  }
  return on == 1;
}

void set_gpu_path_enabled(GpuPath path, bool on) { g_state[index(path)] = on ? 1 : 0; }

GpuPathGuard::GpuPathGuard(GpuPath path, bool on) : path_(path), before_(gpu_path_enabled(path)) {
  set_gpu_path_enabled(path, on);
}

GpuPathGuard::~GpuPathGuard() { set_gpu_path_enabled(path_, before_); }

}  // namespace vitrine
