// Inference over a batch a few samples at a time, the chunks side by side on the CPU's threads.
//
// A batched forward runs each layer over the whole batch before the next one starts. Every
// intermediate goes out to memory and comes back for the next layer (fmnist's qkv output for 128
// images is 9.8 MB, against 1 MiB of L2 cache per core), and every layer is a parallel loop
// whose threads start and wait together. Split into chunks of a few samples, one chunk's
// intermediates fit one core's L2 cache, and a chunk runs whole on one thread, its kernels
// single-threaded:
//
//   batched:  layer 1 (B samples, 2 threads) | layer 2 (B samples, 2 threads) | ...
//   chunked:  thread 0: chunk 0 layers 1..L, chunk 2 layers 1..L, ...
//             thread 1: chunk 1 layers 1..L, chunk 3 layers 1..L, ...
//
// Only for inference (no graph can be recorded across threads) of models whose samples do not
// interact: eval mode (no batch statistics, no dropout masks) and no shared state written.
#pragma once
#include <functional>

#include "autograd/tensor.h"

namespace vitrine::nn {

/// y = cat(f(x[c_0 : c_1]), f(x[c_1 : c_2]), ..., dim 0), with c_i = i B / chunks (chunks of
/// sizes that differ by one at most), the chunks run on the CPU backend's threads
/// (parallel_items), each whole on one thread, with grad mode off. For f that treats samples
/// independently, y equals f(x) up to float rounding: a kernel may sum in another order for
/// fewer rows (a GEMM of a few rows goes to OpenBLAS rather than Vitrine's own; layer norm,
/// softmax, GELU and attention compute each row alike whatever the batch). An exception that f
/// throws in a chunk is rethrown here. Needs grad mode off and 1 <= chunks <= B (an Error naming
/// what was given otherwise).
Tensor forward_in_chunks(const Tensor& x, int64_t chunks,
                         const std::function<Tensor(const Tensor&)>& f);

/// How many chunks forward_in_chunks should cut a batch into when one sample's largest
/// intermediate takes bytes_per_sample: as few as keep a chunk's within one core's L2 cache
/// (l2_cache_bytes()), rounded up to a multiple of the thread count so that the threads finish
/// together, and at most batch. 1 means "run the batch whole": for one sample, or when one
/// sample's intermediate alone overflows the cache.
int64_t inference_chunks(int64_t batch, int64_t bytes_per_sample);

}  // namespace vitrine::nn
