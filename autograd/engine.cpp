// The backward engine. Given output tensors and their gradients:
//  1. collect the graph reachable from the outputs' nodes with an explicit stack (no recursion)
//     and count, for every node, how many edges point at it;
//  2. run nodes in Kahn order: a node runs once all gradients that can reach it have arrived
//     (their sum is its dL/d(output)), so each node's rule runs exactly once;
//  3. each rule returns dL/d(input) per edge; a broadcast gradient is summed back to the input's
//     shape here (the one place that does it); non-leaves accumulate into the pending sum of
//     their node, leaves into a sum of their own, which goes into .grad() (through the leaf's
//     hooks, then its post-accumulate hooks) as soon as the last edge into the leaf has run,
//     while the rest of the graph is still ahead (where DistributedDataParallel overlaps its
//     all-reduce with backward).
// Rules run with grad mode = create_graph, so with create_graph the gradients are themselves
// differentiable. Without retain_graph each rule is freed after it runs (its saved tensors go).
#include "autograd/engine.h"

#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace vitrine {

namespace {

struct Targets {  // for grad(): where to capture instead of accumulating
  std::unordered_map<const Node*, size_t> nodes;
  std::unordered_map<const TensorImpl*, size_t> leaves;
  std::vector<Tensor>* results = nullptr;
  bool active() const { return results != nullptr; }
};

/// Whether nothing but the caller's reference holds t or its memory, so that it may be
/// overwritten: a fresh result of a backward rule, not one that add's rule hands to both of its
/// inputs, nor a view of a saved tensor.
bool exclusive(const Tensor& t) {
  return t.is_contiguous() && t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1;
}

/// a + b, the sum of two gradients that reach the same place (a may be undefined: then b).
/// Without create_graph the sum goes into whichever of the two is exclusive, as PyTorch's
/// InputBuffer accumulates in place: no new buffer, one pass fewer over memory. Float addition
/// is commutative, so b + a there is a + b, bit for bit.
Tensor sum_grads(Tensor a, Tensor b) {
  if (!a.defined()) return b;
  if (!GradMode::is_enabled() && a.shape() == b.shape() && a.dtype() == b.dtype()) {
    if (exclusive(a)) return a.add_(b);
    if (exclusive(b)) return b.add_(a);
  }
  return ops::add(a, b);
}

Tensor apply_hooks(const std::vector<GradHook>& hooks, Tensor g) {
  for (const GradHook& h : hooks) {
    Tensor r = h(g);
    if (r.defined()) {
      VT_CHECK(r.shape() == g.shape() && r.dtype() == g.dtype(),
               "gradient hook: returned shape {} ({}), expected {} ({})", r.shape(),
               dtype_name(r.dtype()), g.shape(), dtype_name(g.dtype()));
      g = r;
    }
  }
  return g;
}

/// Stores g as (or adds it to) a tensor's .grad(): detached and private unless create_graph.
/// A gradient may alias other tensors (add passes dy to both inputs; expand's rule returns a
/// view; a hook may keep it), so the first one stored must own its memory: with create_graph a
/// clone that stays in the graph (as PyTorch's AccumulateGrad); otherwise g itself when nothing
/// else holds its storage (the usual case: a fresh result of a backward rule), else a copy.
void accumulate(TensorImpl& t, Tensor g, bool create_graph) {
  if (!t.grad) {
    if (create_graph) {
      t.grad = g.clone().impl_ptr();
      return;
    }
    t.grad = (exclusive(g) ? g.detach() : g.detach().clone()).impl_ptr();
    return;
  }
  Tensor cur(t.grad);
  if (create_graph || cur.requires_grad()) {  // never modify a gradient that is in a graph
    t.grad = ops::add(cur, g).impl_ptr();
  } else {
    NoGradGuard ng;
    cur.add_(g);
  }
}

/// Gradients reaching a leaf are summed first; hooks then see the total once (as PyTorch's
/// AccumulateGrad), after which it goes into .grad() (or, for grad(), into the results) and the
/// post-accumulate hooks run. `pending` counts the edges into each leaf that have not run yet: a
/// leaf is finished when it reaches 0 (finish_all takes the leaves that are outputs themselves).
struct LeafSums {
  struct Entry {
    std::shared_ptr<TensorImpl> leaf;
    Tensor sum;
  };
  std::vector<TensorImpl*> order;
  std::unordered_map<const TensorImpl*, Entry> sums;
  std::unordered_map<const TensorImpl*, int> pending;
  void add(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    auto [it, fresh] = sums.try_emplace(leaf.get(), Entry{leaf, Tensor()});
    if (fresh) order.push_back(leaf.get());
    it->second.sum = sum_grads(std::move(it->second.sum), std::move(g));
  }
};

void finish_leaf(LeafSums& leaves, const TensorImpl* leaf, bool create_graph, Targets& targets) {
  auto it = leaves.sums.find(leaf);
  if (it == leaves.sums.end() || !it->second.sum.defined()) return;  // none reached it (yet)
  const std::shared_ptr<TensorImpl> impl = it->second.leaf;
  Tensor g = apply_hooks(impl->hooks, std::move(it->second.sum));
  it->second.sum = Tensor();
  if (targets.active()) {
    auto t = targets.leaves.find(leaf);
    if (t != targets.leaves.end()) (*targets.results)[t->second] = g;
    return;
  }
  accumulate(*impl, std::move(g), create_graph);
  const Tensor self(impl);
  for (const PostAccumulateHook& h : impl->post_accumulate_hooks) h(self);
}

void finish_all(LeafSums& leaves, bool create_graph, Targets& targets) {
  for (const TensorImpl* leaf : leaves.order) finish_leaf(leaves, leaf, create_graph, targets);
}

void run(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads_in, bool retain_graph,
         bool create_graph, Targets& targets) {
  VT_CHECK(grads_in.empty() || grads_in.size() == outputs.size(),
           "backward: {} gradients given for {} outputs", grads_in.size(), outputs.size());
  GradModeGuard mode(create_graph);
  retain_graph = retain_graph || create_graph;  // as PyTorch: create_graph implies retain_graph

  // Seed gradients.
  std::unordered_map<Node*, Tensor> pending;
  std::vector<Node*> roots;
  LeafSums leaves;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& y = outputs[i];
    VT_CHECK(y.defined() && y.requires_grad(),
             "backward: output {} does not require grad and has no grad_fn (did you forget "
             "requires_grad_(), or compute it under no_grad?)",
             i);
    Tensor g = i < grads_in.size() ? grads_in[i] : Tensor();
    if (!g.defined()) {
      VT_CHECK(y.numel() == 1,
               "backward: a gradient can be left out only for a one-element output; output {} "
               "has shape {} (pass grad with that shape)",
               i, y.shape());
      g = ops::ones_like(y.detach());
    }
    VT_CHECK(g.shape() == y.shape(), "backward: gradient of shape {} for output {} of shape {}",
             g.shape(), i, y.shape());
    VT_CHECK(g.dtype() == y.dtype(), "backward: gradient dtype {} for output {} of dtype {}",
             dtype_name(g.dtype()), i, dtype_name(y.dtype()));
    if (y.is_leaf()) {
      leaves.add(y.impl_ptr(), std::move(g));
      continue;
    }
    Node* n = y.grad_fn().get();
    if (!pending.count(n)) roots.push_back(n);
    pending[n] = sum_grads(std::move(pending[n]), std::move(g));
  }

  // 1. Dependency counts over the reachable graph (iterative DFS).
  std::unordered_map<Node*, int> deps;
  {
    std::vector<Node*> stack(roots.begin(), roots.end());
    std::unordered_map<Node*, bool> seen;
    for (Node* r : roots) seen[r] = true;
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->inputs) {
        if (e.leaf) ++leaves.pending[e.leaf.get()];
        if (!e.node) continue;
        Node* m = e.node.get();
        ++deps[m];
        if (!seen[m]) {
          seen[m] = true;
          stack.push_back(m);
        }
      }
    }
  }

  // 2. Kahn order.
  std::vector<Node*> ready;
  for (Node* r : roots)
    if (deps[r] == 0) ready.push_back(r);
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g;
    if (auto it = pending.find(n); it != pending.end()) {
      g = std::move(it->second);
      pending.erase(it);
    }
    Grads grads;
    if (g.defined()) {
      g = apply_hooks(n->hooks, std::move(g));
      if (auto out = n->retained.lock(); out && !targets.active())
        accumulate(*out, g, create_graph);
      if (targets.active()) {
        if (auto it = targets.nodes.find(n); it != targets.nodes.end())
          (*targets.results)[it->second] = sum_grads(std::move((*targets.results)[it->second]), g);
      }
      VT_CHECK(n->fn != nullptr,
               "backward: the graph through '{}' was already freed by an earlier backward; "
               "pass retain_graph=true to the first backward to go through it twice",
               n->name);
      Needs needs(n->inputs.size());
      for (size_t i = 0; i < n->inputs.size(); ++i) needs[i] = n->inputs[i].defined();
      try {
        grads = n->fn(g, needs);
      } catch (const Error& e) {
        throw Error(fmt::format("backward of {}: {}", n->name, e.what()));
      }
      VT_ASSERT(grads.size() == n->inputs.size());
      if (!retain_graph) n->fn = nullptr;
    }
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Edge& e = n->inputs[i];
      if (!e.defined()) continue;
      if (i < grads.size() && grads[i].defined()) {
        Tensor gi = std::move(grads[i]);
        if (!(gi.shape() == e.shape)) gi = ops::sum_to(gi, e.shape);
        VT_ASSERT(gi.dtype() == e.dtype);
        if (e.leaf)
          leaves.add(e.leaf, std::move(gi));
        else
          pending[e.node.get()] = sum_grads(std::move(pending[e.node.get()]), std::move(gi));
      }
      if (e.leaf && --leaves.pending[e.leaf.get()] == 0)
        finish_leaf(leaves, e.leaf.get(), create_graph, targets);
      if (e.node && --deps[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
  finish_all(leaves, create_graph, targets);
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
              bool retain_graph, bool create_graph) {
  Targets none;
  run(outputs, grads, retain_graph, create_graph, none);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grads, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Tensor> results(inputs.size());
  Targets t;
  t.results = &results;
  for (size_t i = 0; i < inputs.size(); ++i) {
    VT_CHECK(inputs[i].defined() && inputs[i].requires_grad(),
             "grad: input {} does not require grad", i);
    if (inputs[i].is_leaf())
      t.leaves[inputs[i].impl_ptr().get()] = i;
    else
      t.nodes[inputs[i].grad_fn().get()] = i;
  }
  run(outputs, grads, retain_graph, create_graph, t);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (results[i].defined()) continue;
    VT_CHECK(allow_unused,
             "grad: input {} was not used to compute the outputs (pass "
             "allow_unused=true to get zeros)",
             i);
    results[i] = ops::zeros_like(inputs[i].detach());
  }
  return results;
}

}  // namespace vitrine
