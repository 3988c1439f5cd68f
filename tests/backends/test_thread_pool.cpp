// The CPU backend's threads (backends/cpu/thread_pool.h): every item of a parallel loop runs
// exactly once, whatever the chunk and thread counts; nested loops and a second caller run on
// their own thread; an exception in any chunk reaches the caller and leaves the pool usable.
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/thread_pool.h"
#include "test_util.h"

using namespace vitrine;

namespace {

/// Runs a loop of n items in chunks of `chunk` on `threads` threads and returns how many times
/// each item ran.
std::vector<int> visits(int64_t n, int64_t chunk, int threads) {
  std::vector<std::atomic<int>> count(static_cast<size_t>(n));
  cpu::run_chunks_of(n, chunk, threads, [&](int64_t begin, int64_t end) {
    CHECK(begin < end);
    for (int64_t i = begin; i < end; ++i) count[static_cast<size_t>(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (auto& c : count) out.push_back(c.load());
  return out;
}

}  // namespace

TEST_CASE("thread pool: every item runs exactly once, for any chunk and thread count") {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : {1, 2, 7, 64, 1000, 100003}) {
      for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{64}, n}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(chunk);
        const std::vector<int> v = visits(n, chunk, threads);
        CHECK(std::all_of(v.begin(), v.end(), [](int c) { return c == 1; }));
      }
    }
  }
  CHECK(visits(0, 1, 2).empty());
}

TEST_CASE("thread pool: a chunk knows it is one, and a nested loop runs on its thread") {
  CHECK_FALSE(cpu::in_parallel_chunk());
  std::atomic<int> outside{0}, inner_total{0};
  cpu::run_chunks_of(16, 1, 2, [&](int64_t begin, int64_t end) {
    if (!cpu::in_parallel_chunk()) outside.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) {
      const auto me = std::this_thread::get_id();
      cpu::run_chunks_of(100, 7, 2, [&](int64_t b, int64_t e) {
        CHECK(std::this_thread::get_id() == me);  // nested: the same thread
        inner_total.fetch_add(static_cast<int>(e - b));
      });
    }
  });
  CHECK(outside.load() == 0);
  CHECK(inner_total.load() == 16 * 100);
  CHECK_FALSE(cpu::in_parallel_chunk());
}

TEST_CASE("thread pool: two callers at once both get every item (the second on its own thread)") {
  std::vector<int> a, b;
  std::thread other([&] {
    for (int r = 0; r < 50; ++r) a = visits(5000, 10, 2);
  });
  for (int r = 0; r < 50; ++r) b = visits(5000, 10, 2);
  other.join();
  CHECK(std::all_of(a.begin(), a.end(), [](int c) { return c == 1; }));
  CHECK(std::all_of(b.begin(), b.end(), [](int c) { return c == 1; }));
}

TEST_CASE("thread pool: an exception in a chunk reaches the caller, and the pool goes on") {
  for (int64_t bad : {int64_t{0}, int64_t{63}}) {  // the caller's first chunk, and a late one
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(cpu::run_chunks_of(64, 1, 2,
                                            [&](int64_t begin, int64_t) {
                                              if (begin == bad) throw std::runtime_error("chunk");
                                            }),
                         "chunk", std::runtime_error);
  }
  const std::vector<int> v = visits(1000, 1, 2);
  CHECK(std::all_of(v.begin(), v.end(), [](int c) { return c == 1; }));
}

TEST_CASE("thread pool: parallel_for over the backend's thread count visits every index once") {
  const int before = get_num_threads();
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> count(40000);
    cpu::parallel_for(40000, 100, [&](int64_t i) { count[static_cast<size_t>(i)].fetch_add(1); });
    CHECK(
        std::all_of(count.begin(), count.end(), [](const std::atomic<int>& c) { return c == 1; }));
  }
  set_num_threads(before);
}

TEST_CASE("thread pool: back-to-back small jobs on more threads than cores never mix two jobs") {
  // Each job marks its own items with its number, jobs of different sizes in turn; a late worker
  // that took a chunk of the next job with the last job's function (or counted a chunk twice)
  // shows up as a wrong count or mark. More threads than cores, so workers are often put aside in
  // the middle of a claim.
  constexpr int kJobs = 200000;
  std::vector<std::atomic<int>> mark(64);
  int64_t wrong = 0;
  for (int job = 1; job <= kJobs; ++job) {
    const int64_t n = 2 + job % 37;
    std::vector<int> own(static_cast<size_t>(n), 0);  // the caller's locals, as a kernel's are
    cpu::run_chunks_of(n, 1, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        own[static_cast<size_t>(i)] += 1;
        mark[static_cast<size_t>(i)].store(job);
      }
    });
    for (int64_t i = 0; i < n; ++i)
      wrong += own[static_cast<size_t>(i)] != 1 || mark[static_cast<size_t>(i)].load() != job;
  }
  CHECK(wrong == 0);
}
