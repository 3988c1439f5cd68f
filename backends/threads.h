// How many threads the CPU backend uses: its own parallel loops (backends/cpu/thread_pool.h) and
// OpenBLAS's (its OpenMP build), as torch.set_num_threads / torch.get_num_threads.
#pragma once
#include <cstdint>
#include <functional>
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

/// Runs f(i) for i in [0, n) on the CPU backend's threads (the caller and the pool's workers,
/// get_num_threads() in all), each item on one thread, taken as a thread comes free; returns when
/// all are done, rethrowing the first exception an item threw. The CPU kernels that f calls run
/// on f's thread alone (a parallel loop inside an item is not split further). Grad mode is per
/// thread: f sets its own.
void parallel_items(int64_t n, const std::function<void(int64_t)>& f);

/// The size of one core's L2 cache in bytes (sysconf, else /sys; 1 MiB when neither says).
int64_t l2_cache_bytes();

}  // namespace vitrine
