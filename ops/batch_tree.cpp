// The fixed tree of batch sums (see batch_tree.h).
#include "ops/batch_tree.h"

#include <algorithm>
#include <atomic>

#include "backends/env_switch.h"
#include "backends/threads.h"
#include "ops/batch_invariant.h"
#include "ops/helpers.h"

namespace vitrine::ops::detail {

namespace {
std::atomic<int> g_mode{-1};  // -1: not read from the environment yet

/// The mode: VITRINE_BATCH_TREE=1 read at first use, or set_batch_tree's.
bool mode_on() {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode < 0) {
    int expected = -1;
    g_mode.compare_exchange_strong(expected, env_value("VITRINE_BATCH_TREE") == "1" ? 1 : 0);
    mode = g_mode.load();
  }
  return mode == 1;
}
}  // namespace

bool batch_invariant(const Tensor& like) {
  return mode_on() && like.device().type == DeviceType::CPU;
}

void set_batch_tree(bool on) { g_mode.store(on ? 1 : 0); }

void for_each_leaf(int64_t n, const std::function<void(int64_t begin, int64_t count)>& f) {
  const int64_t L = (n + kBatchLeaf - 1) / kBatchLeaf;
  parallel_items(L, [&](int64_t l) {
    NoGradGuard no_grad;
    const int64_t begin = l * kBatchLeaf;
    f(begin, std::min(kBatchLeaf, n - begin));
  });
}

Tensor tree_sum_partials(Tensor parts) {
  const int64_t L = parts.size(0), N = L > 0 ? parts.numel() / L : 0;
  Backend& be = parts.backend();
  const Tensor flat = parts.contiguous().reshape({L, N});
  char* base = static_cast<char*>(flat.data_ptr());
  const int64_t esize = static_cast<int64_t>(dtype_size(flat.dtype()));
  /// elements [e0, e0 + n) of partial i, as a kernel operand
  const auto row = [&](int64_t i, int64_t e0, int64_t n) {
    return Strided{base + (i * N + e0) * esize, flat.dtype(), Dims{n}, Dims{1}};
  };
  // Each element's tree is its own, so the elements go in chunks, in parallel: a chunk's partials
  // (16 leaves of 4096 floats: 256 KiB) stay in cache through the tree's levels, where adding
  // whole partials level by level read them from memory log2(L) times.
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  parallel_items(chunks, [&](int64_t c) {
    const int64_t e0 = c * kChunk, n = std::min(kChunk, N - e0);
    for (int64_t s = 1; s < L; s *= 2)
      for (int64_t i = 0; i + s < L; i += 2 * s) {
        const Strided a = row(i, e0, n);
        be.binary(BinaryOp::Add, a, row(i + s, e0, n), a);  // parts[i] += parts[i + s]
      }
  });
  Dims shape = parts.shape();
  shape.erase(0);
  return narrow(flat, 0, 0, 1).reshape(shape);
}

std::vector<Tensor> batch_tree_sum(
    const Tensor& like, int64_t n, const std::vector<Dims>& shapes, DType dtype,
    const std::function<void(int64_t begin, int64_t count, std::vector<Tensor>& parts)>& leaf,
    bool zeroed) {
  NoGradGuard no_grad;
  const int64_t L = (n + kBatchLeaf - 1) / kBatchLeaf;
  std::vector<Tensor> all;
  for (const Dims& s : shapes) {
    Dims ls = s;
    ls.insert(0, L);
    all.push_back(zeroed ? zeros(ls, dtype, like.device()) : empty_on(like, ls, dtype));
  }
  for_each_leaf(n, [&](int64_t begin, int64_t count) {
    std::vector<Tensor> parts;
    for (size_t i = 0; i < shapes.size(); ++i)
      parts.push_back(narrow(all[i], 0, begin / kBatchLeaf, 1).reshape(shapes[i]));
    leaf(begin, count, parts);
  });
  std::vector<Tensor> out;
  for (Tensor& t : all) out.push_back(tree_sum_partials(t));
  return out;
}

}  // namespace vitrine::ops::detail

namespace vitrine {

void set_batch_invariant(bool on) { ops::detail::set_batch_tree(on); }

bool is_batch_invariant() { return ops::detail::mode_on(); }

}  // namespace vitrine
