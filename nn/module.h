// Module: the base of every layer and model, as torch.nn.Module. A module owns named parameters
// (tensors that train), buffers (tensors that do not) and child modules; names compose into
// hierarchical keys ("blocks.0.attn.qkv.weight") for state dicts and checkpoints.
//
// A subclass registers what it owns in its constructor and keeps the returned handles as members:
//   weight = register_parameter("weight", ops::empty({out, in}));
//   fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden));
// Tensor handles share their TensorImpl, so to(device) and load_state_dict update the members too.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace vitrine::nn {

/// (name, tensor) pairs in registration order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The single-input forward most layers have; modules with other signatures define their own.
  virtual Tensor forward(const Tensor& x);
  /// forward(x), then the forward hooks. Modules call their children this way, so that hooks
  /// registered on a child see every call (calling forward directly skips them, as in PyTorch).
  Tensor operator()(const Tensor& x);

  /// A forward hook, as torch's register_forward_hook: hook(module, input, output) runs after
  /// every call through operator(); a defined return value replaces the output. Explanation
  /// methods use one to keep an inner activation (and, with retain_grad, its gradient).
  using ForwardHook = std::function<Tensor(Module&, const Tensor& input, const Tensor& output)>;
  /// Returns a handle for remove_forward_hook.
  int64_t register_forward_hook(ForwardHook hook);
  /// Removes a hook by its handle (an unknown handle is ignored, so removal can be unconditional).
  void remove_forward_hook(int64_t handle);
  /// Whether any forward hook is registered here (a fused path that skips this module's call
  /// through operator() must not be taken then).
  bool has_forward_hooks() const { return !forward_hooks_.empty(); }
  /// Whether this module or any descendant has a forward hook.
  bool has_forward_hooks_below() const;
  /// The type's name, for summaries and errors ("Linear").
  virtual std::string type_name() const { return "Module"; }
  /// One line describing the hyperparameters ("in=4, out=3, bias=true").
  virtual std::string extra_repr() const { return ""; }

  // Registration (call from constructors). A leaf tensor is registered as it is: a parameter or
  // buffer of another module is then shared by the two (weight tying, convert_sync_batchnorm).
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  /// PyTorch's `module.name = parameter`: the parameter called name becomes t (registered if
  /// there was none), and the returned handle is what the member must hold. With another
  /// module's parameter it ties the two, as GPT-2's head to its token embedding
  /// (`head->weight = head->set_parameter("weight", wte->weight)`; nn::tie_weights does both):
  /// one tensor, listed once by parameters() and under both names by state_dict().
  Tensor set_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  /// Replaces the child called name (or adds it), e.g. a new head for transfer learning.
  template <typename M>
  std::shared_ptr<M> set_module(const std::string& name, std::shared_ptr<M> m) {
    replace_child(name, m);
    return m;
  }

  // Access. recurse = true walks children depth-first in registration order. A parameter shared
  // by two modules appears once in named_parameters()/parameters() and under both names in
  // state_dict().
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// This module ("") and every descendant, with their prefixed names.
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// Calls fn on every descendant, then on this module (children before parents, as
  /// torch.nn.Module.apply), and returns this module: DCGAN's `net.apply(weights_init)`, with
  /// fn looking at type_name() or dynamic_cast-ing to the layer it initialises.
  Module& apply(const std::function<void(Module&)>& fn);
  /// A child by name; throws Error naming the module and the children it has.
  std::shared_ptr<Module> child(const std::string& name) const;
  /// Parameters then buffers under their full names (what checkpoints store).
  NamedTensors state_dict() const;

  /// Sets training mode here and in every descendant (dropout and drop-path act only in training).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Clears (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  /// Number of parameter elements (only those with requires_grad when trainable_only).
  int64_t num_parameters(bool trainable_only = false) const;
  /// Freezes (false) or unfreezes (true) every parameter of this module and its descendants.
  void requires_grad_(bool on);
  /// Moves every parameter and buffer to a device / converts floating ones to a dtype, in place.
  void to(const Device& device);
  void to(DType dtype);

  /// A printable tree: type, hyperparameters, children, parameter counts.
  std::string summary() const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void replace_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out) const;
  bool training_ = true;
  std::vector<std::pair<int64_t, ForwardHook>> forward_hooks_;
  int64_t next_hook_ = 0;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

/// Clears (set_to_none) or zeroes the gradients of params; a gradient made with create_graph is
/// detached first (so zeroing never writes into a graph). Module and Optimizer zero_grad call it.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);

/// Replaces a tensor's storage and layout with another's (dtype and device may change), keeping
/// its identity: every handle to it sees the new data (libtorch's set_data).
void set_data(const Tensor& target, const Tensor& source);

}  // namespace vitrine::nn
