// record() builds the graph; Saved checks versions; ~Node tears long graphs down iteratively.
#include "autograd/node.h"

#include "autograd/grad_mode.h"

namespace vitrine {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor y, std::string_view name, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) return y;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->fn = std::move(fn);
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.is_leaf())
        e.leaf = t.impl_ptr();
      else
        e.node = t.grad_fn();
      e.shape = t.shape();
      e.dtype = t.dtype();
    }
    node->inputs.push_back(std::move(e));
  }
  y.impl().grad_fn = std::move(node);
  y.impl().requires_grad = true;
  return y;
}

const Tensor& Saved::get() const {
  VT_CHECK(!t_.defined() || t_.version() == version_,
           "a tensor saved for backward (shape {}, {}) was modified by an in-place operation "
           "(saved at version {}, now version {}); use an out-of-place op instead, or clone() "
           "the tensor before modifying it",
           t_.shape(), dtype_name(t_.dtype()), version_, t_.version());
  return t_;
}

// Destroying a chain head would destroy its input node, and that one the next, recursively (and
// through closures that captured Saved tensors holding grad_fn's). Instead every dying node moves
// its edges and closure into a thread-local queue, and only the outermost destructor drains it.
namespace {
struct Teardown {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<BackwardFn> fns;
  bool draining = false;
};
thread_local Teardown t_teardown;
}  // namespace

Node::~Node() {
  Teardown& td = t_teardown;
  for (Edge& e : inputs) {
    if (e.node) td.nodes.push_back(std::move(e.node));
  }
  if (fn) td.fns.push_back(std::move(fn));
  if (td.draining) return;
  td.draining = true;
  while (!td.nodes.empty() || !td.fns.empty()) {
    if (!td.fns.empty()) {
      BackwardFn f = std::move(td.fns.back());
      td.fns.pop_back();
      f = nullptr;  // may destroy Saved tensors, whose nodes enqueue their own edges
    } else {
      std::shared_ptr<Node> n = std::move(td.nodes.back());
      td.nodes.pop_back();
      n.reset();  // if this was the last owner, ~Node enqueues its edges and returns
    }
  }
  td.draining = false;
}

}  // namespace vitrine
