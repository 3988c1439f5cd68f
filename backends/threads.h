// How many threads the CPU backend uses: OpenMP's parallel regions and OpenBLAS's (the same
// pool: OpenBLAS is its OpenMP build), as torch.set_num_threads / torch.get_num_threads.
#pragma once

namespace vitrine {

/// Sets the threads of later CPU kernels (n >= 1; an Error otherwise).
void set_num_threads(int n);
/// The threads a CPU kernel will use now.
int get_num_threads();

}  // namespace vitrine
