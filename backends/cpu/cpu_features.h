// What this CPU's vector units can run, as the loader's ifuncs see it (__builtin_cpu_supports):
// the kernels that are compiled for AVX-512 or AVX2 + FMA (the own GEMM, the direct and Winograd
// convolutions, im2col's rows, simd.h's row kernels, the flash attention's micro-kernel) ask here
// before they run. Nothing in the environment forces these answers: VITRINE_GEMM picks the own
// GEMM's policy (sgemm.h), not what the CPU has.
#pragma once

namespace vitrine::cpu {

/// Whether this CPU runs AVX-512 (AVX512F). false off x86-64.
bool cpu_has_avx512();
/// Whether this CPU runs AVX2 and FMA (both). false off x86-64.
bool cpu_has_avx2_fma();

}  // namespace vitrine::cpu
