#include "nn/module.h"

#include <algorithm>
#include <set>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {
void check_name(const std::string& name, const std::string& what, const std::string& owner) {
  VT_CHECK(!name.empty() && name.find('.') == std::string::npos,
           "{}: {} name '{}' is invalid (non-empty, without '.')", owner, what, name);
}
template <typename V>
bool has_name(const V& v, const std::string& name) {
  return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
}
}  // namespace

Tensor Module::forward(const Tensor&) {
  fail("{}: this module has no single-input forward (call its own forward method)", type_name());
}

Tensor Module::operator()(const Tensor& x) {
  Tensor out = forward(x);
  if (forward_hooks_.empty()) return out;
  const auto hooks = forward_hooks_;  // a hook may remove itself
  for (const auto& [handle, hook] : hooks)
    if (Tensor r = hook(*this, x, out); r.defined()) out = r;
  return out;
}

int64_t Module::register_forward_hook(ForwardHook hook) {
  forward_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

void Module::remove_forward_hook(int64_t handle) {
  std::erase_if(forward_hooks_, [handle](const auto& h) { return h.first == handle; });
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "parameter", type_name());
  VT_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name),
           "{}: '{}' is already registered", type_name(), name);
  VT_CHECK(t.defined(), "{}: parameter '{}' is an undefined tensor", type_name(), name);
  if (!t.is_leaf()) t = t.detach();
  if (requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::set_parameter(const std::string& name, Tensor t, bool requires_grad) {
  for (auto& [n, p] : params_) {
    if (n != name) continue;
    VT_CHECK(t.defined(), "{}: set_parameter('{}') got an undefined tensor", type_name(), name);
    if (!t.is_leaf()) t = t.detach();
    if (requires_grad) t.requires_grad_(true);
    p = t;
    return t;
  }
  return register_parameter(name, std::move(t), requires_grad);
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, "buffer", type_name());
  VT_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name),
           "{}: '{}' is already registered", type_name(), name);
  // A leaf without a gradient (another module's buffer) is kept as it is, so that the two modules
  // share it, as they can share a parameter; anything else loses its autograd history.
  if (t.defined() && (!t.is_leaf() || t.requires_grad())) t = t.detach();
  buffers_.emplace_back(name, t);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "module", type_name());
  VT_CHECK(m != nullptr, "{}: child module '{}' is null", type_name(), name);
  VT_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name),
           "{}: '{}' is already registered", type_name(), name);
  children_.emplace_back(name, std::move(m));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  VT_CHECK(m != nullptr, "{}: child module '{}' is null", type_name(), name);
  for (auto& [n, c] : children_)
    if (n == name) {
      c = std::move(m);
      return;
    }
  add_child(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, bool recurse,
                     NamedTensors& out) const {
  for (const auto& [n, t] : params ? params_ : buffers_)
    if (t.defined()) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, true, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all, out;
  collect("", true, recurse, all);
  // A tensor shared by two modules (weight tying) is listed once, under its first name, as in
  // PyTorch; state_dict() keeps every name.
  std::set<const TensorImpl*> seen;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl_ptr().get()).second) out.emplace_back(n, t);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, recurse, out);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    out.emplace_back(name, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(name.empty() ? it->first : name + "." + it->first, it->second.get());
  }
  return out;
}

bool Module::has_forward_hooks_below() const {
  if (has_forward_hooks()) return true;
  for (const auto& [name, c] : children_)
    if (c->has_forward_hooks_below()) return true;
  return false;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& child : children_) child.second->apply(fn);
  fn(*this);
  return *this;
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [n, c] : children_)
    if (n == name) return c;
  std::vector<std::string> names;
  for (const auto& [n, c] : children_) names.push_back(n);
  fail("{}: no child module '{}' (children: {})", type_name(), name,
       names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, true, out);
  collect("", false, true, out);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
      continue;
    }
    if (g.requires_grad() || !g.is_leaf()) {  // a create_graph gradient: drop its history
      g = g.detach();
      p.set_grad(g);
    }
    g.zero_();
  }
}

void Module::zero_grad(bool set_to_none) { nn::zero_grad(parameters(), set_to_none); }

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::requires_grad_(bool on) {
  for (Tensor& p : parameters()) p.requires_grad_(on);
}

void set_data(const Tensor& target, const Tensor& source) {
  TensorImpl& t = target.impl();
  const TensorImpl& s = source.impl();
  t.storage = s.storage;
  t.offset = s.offset;
  t.shape = s.shape;
  t.strides = s.strides;
  t.dtype = s.dtype;
  t.grad.reset();
}

void Module::to(const Device& device) {
  NoGradGuard ng;
  for (auto& [n, t] : state_dict())
    if (t.device() != device) set_data(t, t.to(device));
}

void Module::to(DType dtype) {
  VT_CHECK(is_floating_point(dtype), "{}.to: dtype {} is not a floating-point type", type_name(),
           dtype_name(dtype));
  NoGradGuard ng;
  for (auto& [n, t] : state_dict())
    if (is_floating_point(t.dtype()) && t.dtype() != dtype) set_data(t, t.to(dtype));
}

std::string Module::summary() const {
  std::string out;
  struct Item {
    const Module* m;
    std::string name;
    int depth;
  };
  std::vector<Item> stack{{this, "", 0}};
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    std::string extra = it.m->extra_repr();
    int64_t own = 0;
    for (const auto& [n, p] : it.m->params_) own += p.numel();
    out += fmt::format("{}{}{}({}){}\n", std::string(2 * it.depth, ' '),
                       it.name.empty() ? "" : it.name + ": ", it.m->type_name(), extra,
                       own ? fmt::format("  [{} params]", own) : "");
    for (auto c = it.m->children_.rbegin(); c != it.m->children_.rend(); ++c)
      stack.push_back({c->second.get(), c->first, it.depth + 1});
  }
  out +=
      fmt::format("total parameters: {} ({} trainable)\n", num_parameters(), num_parameters(true));
  return out;
}

}  // namespace vitrine::nn
