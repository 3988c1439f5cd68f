// The CPU backend's own threads: every parallel loop of Vitrine's kernels runs here (OpenBLAS
// keeps its OpenMP threads for the products it computes).
//
// Why not OpenMP's parallel for: an OpenMP region ends at a barrier that every thread of the team
// must reach, even one that found no work. On a busy machine the operating system puts threads
// aside for milliseconds, and a training step runs a few hundred regions of tens to hundreds of
// microseconds each, so most regions waited for a thread that was not running: with two busy
// processes beside it on 2 cores, fmnist training ran at 148 images/s on 2 threads, against 200 on
// one (docs/performance.md). Here the calling thread takes chunks of the loop itself, the
// workers take chunks as they arrive, and the call returns as soon as every chunk is done: a
// worker that never ran is not waited for, and one that arrives late finds nothing left.
//
//   caller:  publish job g (fn, n chunks) -> wake sleeping workers -> take chunks -> wait until
//            the chunks others took are done
//   worker:  spin for a while (thread_wait.h), then sleep, until a new job appears -> take chunks
//            (a chunk is claimed by one compare-and-swap of the word (g, chunk count, next
//            index)) -> back to waiting
//
// Every chunk is computed by one thread in the same way whoever takes it, so results do not
// depend on the thread count or on the schedule.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

namespace vitrine::cpu {

/// The body of a parallel loop: fn(ctx, begin, end) over one chunk [begin, end).
using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);

/// Runs fn over [0, n) in chunks of `chunk` items on up to `threads` threads (the caller and
/// threads - 1 workers), returning when all are done. Runs on the calling thread alone when
/// threads <= 1, when there is one chunk, or when called from inside a parallel loop.
void run_chunks(int64_t n, int64_t chunk, int threads, ChunkFn fn, void* ctx);

/// Whether the calling thread is running a chunk of a parallel loop (a nested loop then runs on it
/// alone).
bool in_parallel_chunk();

/// The threads a parallel loop uses: vitrine::set_num_threads / OMP_NUM_THREADS.
int pool_threads();

/// run_chunks for any callable f(begin, end), on `threads` threads.
template <typename F>
void run_chunks_of(int64_t n, int64_t chunk, int threads, F&& f) {
  using Fn = std::remove_reference_t<F>;
  run_chunks(
      n, chunk, threads,
      [](void* ctx, int64_t begin, int64_t end) { (*static_cast<Fn*>(ctx))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

/// run_chunks for any callable f(begin, end), on pool_threads() threads.
template <typename F>
void parallel_chunks(int64_t n, int64_t chunk, F&& f) {
  run_chunks_of(n, chunk, pool_threads(), std::forward<F>(f));
}

}  // namespace vitrine::cpu
