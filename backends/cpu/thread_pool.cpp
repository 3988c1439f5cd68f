// The CPU backend's own threads (see thread_pool.h for the why and the protocol).
#include "backends/cpu/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace vitrine::cpu {
namespace {

thread_local bool tl_in_chunk = false;

/// One turn of a spin loop: a pause, which frees the core's shared resources for its sibling.
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// How long an idle thread spins before it sleeps, from the same settings as libgomp's
/// (backends/cpu/thread_wait.h): OMP_WAIT_POLICY=PASSIVE sleeps at once, ACTIVE spins on,
/// GOMP_SPINCOUNT=N spins N turns, which libgomp reckons at 100 a microsecond.
std::chrono::microseconds spin_time() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  if (spins != nullptr) {
    if (std::strncmp(spins, "inf", 3) == 0) return std::chrono::hours(24);
    char* end = nullptr;
    const unsigned long long n = std::strtoull(spins, &end, 10);
    if (end != spins) return std::chrono::microseconds(static_cast<int64_t>(n / 100));
  }
  if (policy != nullptr && (policy[0] == 'p' || policy[0] == 'P')) return {};
  if (policy != nullptr && (policy[0] == 'a' || policy[0] == 'A')) return std::chrono::hours(24);
  return std::chrono::microseconds(3000);  // libgomp's 300000 turns
}

/// The job word: generation (32 bits) | chunk count (16) | next chunk (16). A claim is checked
/// against this one value: the count must not be a field of its own, which the caller rewrites
/// for the next job while a late worker may still be checking a claim on the last one (it then
/// ran a chunk of the next job with the last one's function, or ran one twice).
constexpr uint64_t kMaxChunks = 0xffff;
constexpr uint64_t job_word(uint32_t g, int64_t chunks) {
  return static_cast<uint64_t>(g) << 32 | static_cast<uint64_t>(chunks) << 16;
}

struct Pool {
  // The job: its word, claimed by compare-and-swap; the other fields are written by the caller
  // before it publishes the word, and read by a worker only once it holds a chunk of that job.
  std::atomic<uint64_t> word{0};
  std::atomic<ChunkFn> fn{nullptr};
  std::atomic<void*> ctx{nullptr};
  std::atomic<int64_t> n{0}, chunk{0};
  std::atomic<int> workers{0};    // workers that may take part in this job
  std::atomic<int64_t> done{0};   // chunks finished
  std::atomic<bool> busy{false};  // a caller is running a job
  std::atomic<uint32_t> wake{0};  // bumped at every job; sleeping workers wait on it
  std::atomic<int> sleepers{0};
  uint32_t generation = 0;  // the caller's (under busy)
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception a chunk threw, rethrown by the caller
  std::vector<std::thread> threads;
  const std::chrono::microseconds spin = spin_time();

  uint32_t current() const { return static_cast<uint32_t>(word.load() >> 32); }

  /// Claims the next chunk of job g: its index, or -1 when g is over or has no chunk left.
  int64_t claim(uint32_t g) {
    uint64_t w = word.load(std::memory_order_acquire);
    for (;;) {
      if (static_cast<uint32_t>(w >> 32) != g) return -1;
      const int64_t i = static_cast<int64_t>(w & kMaxChunks);
      if (i >= static_cast<int64_t>(w >> 16 & kMaxChunks)) return -1;
      if (word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return i;
    }
  }

  /// Runs the chunks of job g that this thread can claim.
  void work(uint32_t g) {
    tl_in_chunk = true;
    for (int64_t i = claim(g); i >= 0; i = claim(g)) {
      // A claimed chunk keeps job g alive (its caller waits for it), so these are g's fields.
      const int64_t c = chunk.load(std::memory_order_relaxed);
      const int64_t begin = i * c, end = std::min(n.load(std::memory_order_relaxed), begin + c);
      try {
        fn.load(std::memory_order_relaxed)(ctx.load(std::memory_order_relaxed), begin, end);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_release);
    }
    tl_in_chunk = false;
  }

  /// Waits for a generation other than `seen`: spins for `spin`, then sleeps.
  uint32_t wait_for_job(uint32_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + spin;
    for (int turn = 0;; ++turn) {
      if (current() != seen) return current();
      relax();
      if ((turn & 63) == 63 && std::chrono::steady_clock::now() >= deadline) break;
    }
    for (;;) {
      const uint32_t w = wake.load();
      sleepers.fetch_add(1);
      if (current() != seen) {
        sleepers.fetch_sub(1);
        return current();
      }
      wake.wait(w);
      sleepers.fetch_sub(1);
      if (current() != seen) return current();
    }
  }

  void worker(int index) {
    uint32_t seen = 0;
    for (;;) {
      seen = wait_for_job(seen);
      if (index < workers.load()) work(seen);
    }
  }

  void ensure_workers(int count) {
    while (static_cast<int>(threads.size()) < count) {
      const int index = static_cast<int>(threads.size());
      threads.emplace_back([this, index] { worker(index); });
    }
  }
};

/// The process's pool: created at the first parallel loop and never destroyed (its threads sleep
/// when idle and end with the process).
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

bool in_parallel_chunk() { return tl_in_chunk; }

int pool_threads() { return omp_get_max_threads(); }

void run_chunks(int64_t n, int64_t chunk, int threads, ChunkFn fn, void* ctx) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  // Chunk counts and indices are 16 bits wide in the job word.
  chunk = std::max<int64_t>(
      chunk, (n + static_cast<int64_t>(kMaxChunks) - 1) / static_cast<int64_t>(kMaxChunks));
  const int64_t chunks = (n + chunk - 1) / chunk;
  Pool& p = pool();
  bool expected = false;
  if (threads <= 1 || chunks <= 1 || tl_in_chunk || omp_in_parallel() ||
      !p.busy.compare_exchange_strong(expected, true)) {
    // One thread: this one (also for a loop nested in a chunk, and for a second caller while
    // the pool runs another's loop).
    struct Restore {
      bool outer = tl_in_chunk;
      ~Restore() { tl_in_chunk = outer; }
    } restore;
    tl_in_chunk = true;
    fn(ctx, 0, n);
    return;
  }
  const int workers = static_cast<int>(std::min<int64_t>(threads - 1, chunks - 1));
  p.ensure_workers(workers);
  p.fn.store(fn, std::memory_order_relaxed);
  p.ctx.store(ctx, std::memory_order_relaxed);
  p.n.store(n, std::memory_order_relaxed);
  p.chunk.store(chunk, std::memory_order_relaxed);
  p.workers.store(workers, std::memory_order_relaxed);
  p.done.store(0, std::memory_order_relaxed);
  if (++p.generation == 0) ++p.generation;  // (0 is the workers' "none seen yet")
  const uint32_t g = p.generation;
  p.word.store(job_word(g, chunks));  // publishes the job (sequentially consistent)
  p.wake.fetch_add(1);
  if (p.sleepers.load() > 0) p.wake.notify_all();
  p.work(g);
  // The chunks that workers claimed: spin briefly, then give the core away while waiting (a
  // worker holding a chunk may be waiting for it).
  for (int turn = 0; p.done.load(std::memory_order_acquire) < chunks; ++turn) {
    if (turn < 4096)
      relax();
    else
      std::this_thread::yield();
  }
  std::exception_ptr error = std::exchange(p.error, nullptr);  // (every chunk is done)
  p.busy.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

}  // namespace vitrine::cpu
