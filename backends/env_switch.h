// The environment's VITRINE_* variables, read through here alone: the on/off switches for A/B
// runs (VITRINE_FLASH_ATTENTION, VITRINE_CUDA_LT, VITRINE_BF16_OPERANDS, VITRINE_FUSED_BN_RELU,
// ...: on unless set to 0) and the ones with values (VITRINE_GEMM, VITRINE_CONV,
// VITRINE_CPU_FLASH_ATTENTION, ...). Each caller reads its variable when it is first used, never
// at static initialisation, and keeps the answer (a function-local static, or an atomic that a
// setter may overwrite), so the variable is read once per process. docs/environment.md lists
// them all.
#pragma once
#include <cstdlib>
#include <string_view>

namespace vitrine {

/// The value of the environment variable name; `unset` when it is not set (an empty value is
/// returned as it is).
inline std::string_view env_value(const char* name, std::string_view unset = {}) {
  const char* v = std::getenv(name);
  return v ? std::string_view(v) : unset;
}

/// false when the environment sets name to "0", else true.
inline bool env_switch_on(const char* name) { return env_value(name) != "0"; }

}  // namespace vitrine
