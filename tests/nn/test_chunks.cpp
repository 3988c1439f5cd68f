// nn::forward_in_chunks and nn::inference_chunks: chunks cut evenly and put back in order, run
// on the pool's threads with grad mode off, errors for what they cannot do, an exception in a
// chunk rethrown, and the chunk count for a given cache and thread count.
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "nn/chunks.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

TEST_CASE("forward_in_chunks: chunks in order, evenly cut, grad mode off in each, errors") {
  const int threads = get_num_threads();
  set_num_threads(2);
  const Tensor x = ops::arange(0, 30, 1, kFloat64).reshape({10, 3});
  const NoGradGuard no_grad;
  std::mutex mu;
  std::multiset<int64_t> sizes;
  std::atomic<int> grad_on{0};
  const Tensor y = nn::forward_in_chunks(x, 4, [&](const Tensor& c) {
    if (GradMode::is_enabled()) ++grad_on;
    {
      const std::lock_guard lock(mu);
      sizes.insert(c.size(0));
    }
    return ops::sum(c * 2, {1}, true);  // [rows, 1], each row on its own
  });
  CHECK(grad_on == 0);
  CHECK(sizes == std::multiset<int64_t>{2, 3, 2, 3});  // i B / chunks: 0, 2, 5, 7, 10
  check_close(y, ops::sum(x * 2, {1}, true), 0, 0);
  // One chunk: f on the whole batch.
  check_close(nn::forward_in_chunks(x, 1, [](const Tensor& c) { return c + 1; }), x + 1, 0, 0);

  const auto id = [](const Tensor& c) { return c; };
  CHECK_THROWS_WITH(nn::forward_in_chunks(x, 0, id),
                    "forward_in_chunks: 0 chunks for a batch of 10");
  CHECK_THROWS_WITH(nn::forward_in_chunks(x, 11, id),
                    "forward_in_chunks: 11 chunks for a batch of 10");
  CHECK_THROWS_WITH(nn::forward_in_chunks(Tensor(), 1, id),
                    "forward_in_chunks: expected a batch [B, ...], got []");
  // An exception in a chunk (on whichever thread ran it) reaches the caller.
  CHECK_THROWS_WITH(nn::forward_in_chunks(x, 5,
                                          [](const Tensor& c) -> Tensor {
                                            if (c.size(0) > 0) throw Error("chunk failed");
                                            return c;
                                          }),
                    "chunk failed");
  {
    const GradModeGuard grad(true);
    CHECK_THROWS_WITH(
        nn::forward_in_chunks(x, 2, id),
        "forward_in_chunks: grad mode must be off (inference only: no graph is recorded)");
  }
  set_num_threads(threads);
}

TEST_CASE("inference_chunks: as few as fit the L2 cache, a multiple of the threads, at most B") {
  const int threads = get_num_threads();
  const int64_t l2 = l2_cache_bytes();
  CHECK(l2 >= 64 * 1024);
  set_num_threads(2);
  CHECK(nn::inference_chunks(1, l2) == 1);          // one sample: run whole
  CHECK(nn::inference_chunks(128, l2 / 16) == 8);   // 16 fit: 8 chunks
  CHECK(nn::inference_chunks(128, l2 / 13) == 10);  // 13 fit: 10 chunks (ceil 128 / 13)
  CHECK(nn::inference_chunks(100, l2 / 13) == 8);   // 7 chunks, rounded up to 8
  CHECK(nn::inference_chunks(8, l2) == 8);          // one fits: one sample a chunk
  CHECK(nn::inference_chunks(8, l2 + 1) == 1);      // none fits: nothing to gain, run whole
  CHECK(nn::inference_chunks(3, 16) == 2);          // all fit: one chunk a thread
  set_num_threads(1);
  CHECK(nn::inference_chunks(128, l2 / 13) == 10);  // one thread: still chunks for the cache
  CHECK(nn::inference_chunks(3, 16) == 1);
  set_num_threads(threads);
}
