#include "nn/chunks.h"

#include <algorithm>
#include <vector>

#include "autograd/grad_mode.h"
#include "backends/error.h"
#include "backends/threads.h"
#include "ops/ops.h"

namespace vitrine::nn {

Tensor forward_in_chunks(const Tensor& x, int64_t chunks,
                         const std::function<Tensor(const Tensor&)>& f) {
  VT_CHECK(x.defined() && x.dim() >= 1, "forward_in_chunks: expected a batch [B, ...], got {}",
           x.defined() ? x.shape() : Dims{});
  const int64_t B = x.size(0);
  VT_CHECK(chunks >= 1 && chunks <= B, "forward_in_chunks: {} chunks for a batch of {}", chunks, B);
  VT_CHECK(!GradMode::is_enabled(),
           "forward_in_chunks: grad mode must be off (inference only: no graph is recorded)");
  std::vector<Tensor> out(static_cast<size_t>(chunks));
  parallel_items(chunks, [&](int64_t c) {
    const NoGradGuard no_grad;  // (grad mode is per thread; a worker's starts on)
    out[static_cast<size_t>(c)] = f(x.slice(0, c * B / chunks, (c + 1) * B / chunks));
  });
  return chunks == 1 ? out[0] : ops::cat(out, 0);
}

int64_t inference_chunks(int64_t batch, int64_t bytes_per_sample) {
  // Nothing to gain when one sample's activations already overflow the cache (ViT-S/16's MLP:
  // 197 x 1536 floats, 1.2 MB): then the products are large enough to keep every core busy.
  if (batch <= 1 || bytes_per_sample > l2_cache_bytes()) return 1;
  const int64_t threads = get_num_threads();
  const int64_t per_chunk =
      std::max<int64_t>(1, l2_cache_bytes() / std::max<int64_t>(1, bytes_per_sample));
  int64_t chunks = (batch + per_chunk - 1) / per_chunk;
  chunks = (chunks + threads - 1) / threads * threads;
  return std::min(chunks, batch);
}

}  // namespace vitrine::nn
