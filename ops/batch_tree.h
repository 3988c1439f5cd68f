// Sums over a batch in one fixed tree (issue 63, docs/distributed.md "The same bits on any number
// of ranks"). Not public API: the ops whose backward sums over dim 0 (linear's dW and db,
// conv2d's dW, layer_norm's dW and db) and sum/mean over dim 0 call it.
//
// The batch (dim 0, n entries) is cut into leaves of kBatchLeaf consecutive entries (the last may
// be shorter). Each leaf's partial is computed whole on one thread (so its own order of additions
// does not depend on the thread count), the leaves in parallel, and the partials are added in a
// pairwise tree, bottom up:
//
//   level 1: p0 + p1, p2 + p3, ...      level 2: (p0 + p1) + (p2 + p3), ...      (an odd last
//   partial goes up unchanged)
//
// A rank that holds a power-of-two number of leaves, aligned, computes exactly one node of the
// whole batch's tree; adding the ranks' nodes pairwise in rank order then gives the one-process
// sum bit for bit. The same holds for gradient accumulation's micro-batches.
#pragma once
#include <cstdint>
#include <functional>

#include "autograd/tensor.h"

namespace vitrine::ops::detail {

/// Entries of dim 0 per leaf.
inline constexpr int64_t kBatchLeaf = 8;

/// Whether ops on tensors like `like` are batch-invariant: a CPU tensor, with the mode on
/// (VITRINE_BATCH_TREE=1, or set_batch_tree(true); off by default: ops/batch_invariant.h).
bool batch_invariant(const Tensor& like);
/// Turns the mode on or off for the whole process (the tests; VITRINE_BATCH_TREE sets the start).
void set_batch_tree(bool on);
/// Whether a sum over n entries of dim 0 of tensors like `like` goes through the tree.
inline bool use_batch_tree(const Tensor& like, int64_t n) { return n > 0 && batch_invariant(like); }

/// Runs f(begin, count) for each leaf of n entries of dim 0, in parallel, each leaf whole on one
/// thread: a product or a convolution then gives each image the same bits whatever the thread
/// count and wherever the image sits in a batch whose leaves are aligned.
void for_each_leaf(int64_t n, const std::function<void(int64_t begin, int64_t count)>& f);

/// The tree sum of one or more results: leaf(begin, count, parts) writes every element of the
/// partials of entries [begin, begin + count) into parts (one tensor per result, of shapes[i] and
/// dtype; they start uninitialised), and the partials are added in the tree, each node as soon
/// as both its children are done (by the thread that finished the second). Returns the sums,
/// one per shape.
std::vector<Tensor> batch_tree_sum(
    const Tensor& like, int64_t n, const std::vector<Dims>& shapes, DType dtype,
    const std::function<void(int64_t begin, int64_t count, std::vector<Tensor>& parts)>& leaf);

/// Adds partials [L, ...] (dim 0: the leaves, in order) in the pairwise tree; returns the sum
/// (parts[0] afterwards).
Tensor tree_sum_partials(Tensor parts);

}  // namespace vitrine::ops::detail
