// How the CPU backend's idle threads wait, and Vitrine's default for it.
//
// A training step runs a few hundred parallel loops (every GEMM, every row kernel), on the
// backend's own threads (thread_pool.h), and OpenBLAS's products run OpenMP parallel regions.
// Between two of them a thread that has finished its share waits. libgomp's default
// (OMP_WAIT_POLICY unset) is to spin for GOMP_SPINCOUNT = 300000 turns of a pause loop, about 3 ms,
// before sleeping on a futex. On a quiet machine that spin buys a few microseconds per region; on a
// busy one (other processes, a data loader's threads, several ranks of data-parallel training) the
// spinning thread holds a core that the thread it waits for, or another program, needs. Vitrine
// therefore spins for kDefaultSpinCount turns, in libgomp and in its own pool, which reads the same
// two variables (docs/performance.md gives the measurements, quiet and loaded), unless the user
// chose: OMP_WAIT_POLICY or GOMP_SPINCOUNT set in the environment is left as it is.
//
// libgomp reads both variables once, in its initialiser, and a library cannot change them
// afterwards. The default is therefore set by the initialiser of a library of its own,
// libvitrine_thread_wait.so (thread_wait_default.cpp), which needs only libc and which
// libvitrine.so lists after libgomp: the dynamic loader then initialises it before libgomp.
// tests/bench/test_bench.cpp checks that libgomp sees the value (OMP_DISPLAY_ENV). (A build
// against LLVM's libomp, as the clang sanitizer build is, reads KMP_BLOCKTIME instead: there only
// Vitrine's own pool follows the setting.)
#pragma once

namespace vitrine::cpu {

/// GOMP_SPINCOUNT that a process using Vitrine gets when neither OMP_WAIT_POLICY nor
/// GOMP_SPINCOUNT is set: spin turns before a waiting thread sleeps (libgomp counts about 100
/// turns per microsecond).
inline constexpr char kDefaultSpinCount[] = "10000";

}  // namespace vitrine::cpu

extern "C" {
/// 1 when libvitrine_thread_wait.so's initialiser set Vitrine's default in this process (neither
/// variable was set), else 0.
int vitrine_thread_wait_default_applied();
}
