// Where the CPU's flash attention runs (backends/cpu/flash_attention.cpp): its switch and the rule
// by which CpuBackend::flash_attention declines the shapes where the materialised attention
// (backends/cpu/attention.cpp, or scaled_dot_product_attention's composition) is faster.
#pragma once
#include <cstdint>

namespace vitrine::cpu {

/// Off: always decline (the materialised paths run); On: flash attention for every float32 or
/// float64 qkv; Auto: where flash_wanted says.
enum class FlashMode { Off, On, Auto };

/// This process's mode: from VITRINE_CPU_FLASH_ATTENTION at the first call ("0" Off, "1" On,
/// "auto" or unset Auto; anything else is an error), or as set_flash_mode left it.
FlashMode flash_mode();
void set_flash_mode(FlashMode mode);

/// The Auto rule, from float32 timings of forward + backward (bench/flash_attention.cpp): whether
/// flash attention is faster than the materialised path for N tokens of head dim Dh.
bool flash_wanted(int64_t N, int64_t Dh, bool causal);

/// Sets the mode for a scope (the tests and the benchmark: both paths in one process).
struct FlashModeGuard {
  explicit FlashModeGuard(FlashMode mode) : before(flash_mode()) { set_flash_mode(mode); }
  ~FlashModeGuard() { set_flash_mode(before); }
  FlashModeGuard(const FlashModeGuard&) = delete;
  FlashModeGuard& operator=(const FlashModeGuard&) = delete;
  FlashMode before;
};

}  // namespace vitrine::cpu
