// How many threads the CPU backend uses: its own parallel loops (backends/cpu/thread_pool.h) and
// OpenBLAS's (its OpenMP build), as torch.set_num_threads / torch.get_num_threads.
#pragma once
#include <string>

namespace vitrine {

/// Sets the threads of later CPU kernels (n >= 1; an Error otherwise).
void set_num_threads(int n);
/// The threads a CPU kernel will use now.
int get_num_threads();
/// How idle CPU threads wait between parallel regions, in words for reports, e.g.
/// "GOMP_SPINCOUNT=10000 (Vitrine's default)" or "OMP_WAIT_POLICY=PASSIVE (set by the user)"
/// (backends/cpu/thread_wait.h: libgomp read it when it was loaded, before main).
std::string thread_wait_policy();

}  // namespace vitrine
