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
  const Tensor flat = parts.contiguous().reshape({L, N});
  if (L > 1) flat.backend().tree_sum(flat.strided());
  Dims shape = parts.shape();
  shape.erase(0);
  return narrow(flat, 0, 0, 1).reshape(shape);
}

std::vector<Tensor> batch_tree_sum(
    const Tensor& like, int64_t n, const std::vector<Dims>& shapes, DType dtype,
    const std::function<void(int64_t begin, int64_t count, std::vector<Tensor>& parts)>& leaf) {
  NoGradGuard no_grad;
  const int64_t L = (n + kBatchLeaf - 1) / kBatchLeaf;
  std::vector<Tensor> all;  // [L, shape] each: the leaves' partials, then the tree's nodes
  for (const Dims& s : shapes) {
    Dims ls = s;
    ls.insert(0, L);
    all.push_back(empty_on(like, ls, dtype));  // (each leaf writes all of its partials)
  }
  // The tree's nodes are added as soon as both children are done, by the thread that finished
  // the second one (its partial still in that core's cache), not in a pass of their own after
  // the leaves: node (i, s) = node (i, s/2) + node (i + s, s/2), for i a multiple of 2s with
  // i + s < L, kept in partial i (Backend::tree_sum's adds, in its order). arrived[level L + i]
  // counts the children of node (i, 2^level) that are done.
  int levels = 0;
  while ((int64_t{1} << levels) < L) ++levels;
  std::vector<std::atomic<int>> arrived(static_cast<size_t>(levels * L));
  Backend& be = like.backend();
  const auto row = [&](const Tensor& t, int64_t i) { return narrow(t, 0, i, 1).strided(); };
  for_each_leaf(n, [&](int64_t begin, int64_t count) {
    int64_t l = begin / kBatchLeaf;
    std::vector<Tensor> parts;
    for (size_t i = 0; i < shapes.size(); ++i)
      parts.push_back(narrow(all[i], 0, l, 1).reshape(shapes[i]));
    leaf(begin, count, parts);
    for (int level = 0; level < levels; ++level) {  // up the tree from leaf l
      const int64_t s = int64_t{1} << level, node = l & ~(2 * s - 1);
      if (node + s < L) {  // two children: the first done leaves the add to the second
        if (arrived[level * L + node].fetch_add(1, std::memory_order_acq_rel) == 0) return;
        for (const Tensor& t : all)
          be.binary(BinaryOp::Add, row(t, node), row(t, node + s), row(t, node));
      }
      l = node;
    }
  });
  std::vector<Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i)
    out.push_back(narrow(all[i], 0, 0, 1).reshape(shapes[i]));
  return out;
}

}  // namespace vitrine::ops::detail

namespace vitrine {

void set_batch_invariant(bool on) { ops::detail::set_batch_tree(on); }

bool is_batch_invariant() { return ops::detail::mode_on(); }

}  // namespace vitrine
