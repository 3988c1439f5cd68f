// The backward engine (engine.cpp): walks the graph from the outputs in reverse topological order,
// iteratively, calling each node's rule once with the sum of the gradients that reached it.
#pragma once
#include <vector>

#include "autograd/tensor.h"

namespace vitrine {

/// Accumulates d(sum_i <outputs_i, grads_i>)/d(leaf) into every leaf's .grad().
/// grads[i] may be undefined for a one-element output (then 1). The graph is freed unless
/// retain_graph or create_graph (which implies retain_graph, as in PyTorch).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads = {},
              bool retain_graph = false, bool create_graph = false);

/// Returns d(sum_i <outputs_i, grads_i>)/d(inputs_j) without touching any .grad()
/// (torch.autograd.grad). An input the outputs do not depend on gets zeros when allow_unused,
/// else an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grads = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace vitrine
