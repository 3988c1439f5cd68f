// Reflection and replication padding, as torch.nn.functional.pad's "reflect" and "replicate"
// modes, over the last pads.size() / 2 dims of any tensor (ReflectionPad2d and ReplicationPad2d
// in nn/resampling.h use two). Compositions of index_select (padding.cpp): each padded dim is one
// gather of computed indices, and the gradient sums back through index_select's index_add, so a
// border element receives the gradients of every copy of it.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace vitrine::ops {

/// pads in PyTorch's order {last_lo, last_hi, prev_lo, prev_hi, ...}; along a padded dim of size
/// n, y[..., i, ...] = x[..., r(i - lo), ...] with r(j) = -j for j < 0, 2 (n - 1) - j for
/// j > n - 1, else j (the edge is not repeated). Each pad must be less than n; a negative pad
/// crops.
Tensor reflection_pad(const Tensor& x, const std::vector<int64_t>& pads);
/// As reflection_pad with r(j) = min(max(j, 0), n - 1): the edge repeated.
Tensor replication_pad(const Tensor& x, const std::vector<int64_t>& pads);

}  // namespace vitrine::ops
