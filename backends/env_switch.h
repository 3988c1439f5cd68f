// The environment's on/off switches for A/B runs (VITRINE_FLASH_ATTENTION, VITRINE_CUDA_LT,
// VITRINE_BF16_OPERANDS, VITRINE_FUSED_BN_RELU, ...): on unless set to 0. Each caller keeps
// the answer in a static, so the variable is read once per process.
#pragma once
#include <cstdlib>
#include <string_view>

namespace vitrine {

/// false when the environment sets name to "0", else true.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::string_view(v) == "0");
}

}  // namespace vitrine
