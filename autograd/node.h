// The graph. Every differentiable op that sees an input requiring grad (with grad mode on) gives
// its output a Node: the op's name, one Edge per input (where that input's gradient goes next),
// and the backward rule, a closure that maps dL/d(output) to dL/d(each input).
//
// Rules of the closure: it captures the inputs it needs as Saved (which remembers the version, so
// a later in-place change is detected), never the output (that would be a shared_ptr cycle), and
// returns one gradient per input, shaped like the op's broadcast operand; the engine sums a
// broadcast gradient back to the input's own shape. `needs[i]` says whether input i wants one.
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "autograd/tensor.h"

namespace vitrine {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;
using BackwardFn = std::function<Grads(const Tensor& dy, const Needs& needs)>;

/// Where an input's gradient goes: into its grad_fn (non-leaf) or its .grad (leaf).
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  Dims shape;  // the input's shape: the engine reduces broadcast gradients to it
  DType dtype = kFloat32;
  bool defined() const { return node || leaf; }
};

struct Node {
  std::string_view name;  // the op's name (a string literal)
  std::vector<Edge> inputs;
  BackwardFn fn;                       // empty once freed (after a backward without retain_graph)
  std::vector<GradHook> hooks;         // hooks on the output's gradient
  std::weak_ptr<TensorImpl> retained;  // the output, when it asked to retain its grad

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  /// Iterative teardown: a 100,000-node chain is freed without deep recursion.
  ~Node();
};

/// A tensor saved for backward, with the version it had when saved.
class Saved {
 public:
  Saved() = default;
  explicit Saved(const Tensor& t) : t_(t), version_(t.defined() ? t.version() : 0) {}
  /// The saved tensor; throws Error if it was modified in place since it was saved.
  const Tensor& get() const;
  bool defined() const { return t_.defined(); }

 private:
  Tensor t_;
  uint64_t version_ = 0;
};

inline Saved save(const Tensor& t) { return Saved(t); }

/// Attaches a Node to y when grad mode is on and any input requires grad; returns y.
Tensor record(Tensor y, std::string_view name, const std::vector<Tensor>& inputs, BackwardFn fn);

/// Whether record() would attach a node for these inputs.
bool any_requires_grad(const std::vector<Tensor>& inputs);

}  // namespace vitrine
