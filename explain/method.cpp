// The method registry (method.h): the list of explain/methods/*.cpp that the build generates
// (explain_methods.inc, one X(stem) per file), sorted by each spec's order key, and what every
// method's compute is wrapped in.
#include "explain/method.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "explain/explain.h"

namespace vitrine::explain {

// Each method file's registering function (VT_EXPLAIN_METHOD(stem)).
#define X(stem) const MethodSpec& vitrine_explain_method_##stem();
#include "explain_methods.inc"
#undef X

namespace {

/// The registry: every file's spec as a Method, by order key (then name).
struct Registry {
  std::vector<Method> all;
  std::vector<const Method*> pointers;
  Registry() {
#define X(stem) all.emplace_back(&vitrine_explain_method_##stem());
#include "explain_methods.inc"
#undef X
    std::sort(all.begin(), all.end(), [](const Method& a, const Method& b) {
      return a.order() != b.order() ? a.order() < b.order() : a.name() < b.name();
    });
    std::set<std::string_view> names;
    for (const Method& m : all) {
      VT_CHECK(!m.name().empty() && m.spec()->compute != nullptr,
               "explain: a method file registers a method without a name or a compute");
      VT_CHECK(names.insert(m.name()).second, "explain: two method files register the method '{}'",
               m.name());
      pointers.push_back(&m);
    }
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

Method named(std::string_view name) {
  const Method* m = find_method(name);
  VT_CHECK(m != nullptr, "explain: no method '{}' is registered", name);
  return *m;
}

}  // namespace

// ---- a method --------------------------------------------------------------------------------

std::string_view Method::name() const { return spec_ ? std::string_view(spec_->name) : ""; }
std::string_view Method::help() const { return spec_ ? std::string_view(spec_->help) : ""; }
int Method::order() const { return spec_ ? spec_->order : 0; }
const Needs& Method::needs() const {
  static const Needs none{};
  return spec_ ? spec_->needs : none;
}
const std::vector<std::string>& Method::options() const {
  static const std::vector<std::string> none;
  return spec_ ? spec_->options : none;
}
bool Method::extra() const { return spec_ && spec_->extra; }

Explanation Method::compute(const MethodContext& c) const {
  VT_CHECK(spec_ != nullptr, "explain: compute of an empty Method");
  if (spec_->needs.vit && c.vit == nullptr)
    fail("explain: {} reads a Vision Transformer (explain_method); this {} is not one", name(),
         c.model.type_name());
  Explanation e = spec_->compute(c);
  e.method = *this;
  if (e.picture.defined()) return e;  // a picture, no map
  if (!e.raw.defined())
    e.raw = upsample(e.grid, c.images.size(2), c.images.size(3), c.options.upsample);
  e.map = minmax(e.raw);
  return e;
}

const Method Method::Attention = named("attention");
const Method Method::Rollout = named("rollout");
const Method Method::GradRollout = named("grad-rollout");
const Method Method::Chefer = named("chefer");
const Method Method::GradCam = named("gradcam");
const Method Method::Saliency = named("saliency");
const Method Method::SmoothGrad = named("smoothgrad");
const Method Method::IntegratedGradients = named("integrated-gradients");
const Method Method::ActivationMax = named("activation-max");
const Method Method::Qkv = named("qkv");

// ---- the registry ----------------------------------------------------------------------------

const std::vector<const Method*>& methods() { return registry().pointers; }

const Method* find_method(std::string_view name) {
  for (const Method* m : methods())
    if (m->name() == name) return m;
  return nullptr;
}

std::vector<std::string> method_names(bool include_extras) {
  std::vector<std::string> out;
  for (const Method* m : methods())
    if (include_extras || !m->extra()) out.emplace_back(m->name());
  return out;
}

std::string method_name(const Method& m) { return std::string(m.name()); }

std::vector<Method> all_methods() {
  std::vector<Method> out;
  for (const Method* m : methods())
    if (!m->extra()) out.push_back(*m);
  return out;
}

std::vector<Method> extra_methods() {
  std::vector<Method> out;
  for (const Method* m : methods())
    if (m->extra()) out.push_back(*m);
  return out;
}

std::vector<Method> parse_methods(const std::string& list) {
  std::vector<Method> out;
  auto add = [&out](const Method& m) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    start = end + 1;
    if (name == "all") {
      for (const Method& m : all_methods()) add(m);
      continue;
    }
    const Method* m = find_method(name);
    VT_CHECK(m != nullptr, "explain: unknown method '{}' (known: {}, or all)", name,
             fmt::join(method_names(), ", "));
    add(*m);
  }
  return out;
}

bool is_input_gradient(const Method& m) { return m.needs().input_gradient; }

bool needs_gradients(const Method& m) { return m.needs().gradients; }

bool needs_class_score(const Method& m) { return m.needs().class_score; }

}  // namespace vitrine::explain
