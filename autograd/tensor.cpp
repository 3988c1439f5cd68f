// Tensor: storage views, metadata, element access, printing, and the autograd accessors.
// (Methods that compute are in ops/tensor_methods.cpp.)
#include "autograd/tensor.h"

#include <cmath>
#include <span>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "backends/checked.h"

namespace vitrine {

TensorImpl& Tensor::impl() const {
  VT_CHECK(impl_ != nullptr,
           "tensor: this Tensor is undefined (default-constructed or empty grad)");
  return *impl_;
}

Tensor Tensor::empty(const Dims& shape, DType dtype, Device device) {
  const int64_t bytes = checked_bytes(std::span<const int64_t>(shape.begin(), shape.end()),
                                      static_cast<int64_t>(dtype_size(dtype)), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = backend_for(device).allocate(static_cast<size_t>(bytes));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::as_strided_view(const Dims& shape, const Dims& strides, int64_t offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const { return strided().is_contiguous(); }

void* Tensor::data_ptr() const {
  return static_cast<char*>(storage()->data) + offset() * static_cast<int64_t>(dtype_size(dtype()));
}

template <typename T>
T* Tensor::data() const {
  VT_CHECK(dtype() == dtype_of<T>(), "data: tensor has dtype {}, asked for {}", dtype_name(dtype()),
           dtype_name(dtype_of<T>()));
  VT_CHECK(device().is_cpu(), "data: tensor is on {}, expected cpu (use to(kCPU))", device().str());
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

Strided Tensor::strided() const { return Strided{data_ptr(), dtype(), shape(), strides()}; }

Tensor& Tensor::requires_grad_(bool on) {
  VT_CHECK(is_leaf(),
           "requires_grad_: only leaf tensors can change requires_grad (this one was made "
           "by {}); use detach() first",
           grad_fn() ? grad_fn()->name : "?");
  VT_CHECK(!on || is_floating_point(dtype()),
           "requires_grad_: only floating-point tensors can require gradients (got {})",
           dtype_name(dtype()));
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(impl().grad); }

void Tensor::set_grad(const Tensor& g) const {
  VT_CHECK(!g.defined() || g.shape() == shape(),
           "set_grad: gradient of shape {} for a tensor of shape {}",
           g.defined() ? g.shape() : Dims{}, shape());
  impl().grad = g.impl_ptr();
}

void Tensor::backward(const Tensor& grad, bool retain_graph, bool create_graph) const {
  vitrine::backward({*this}, {grad}, retain_graph, create_graph);
}

Tensor Tensor::detach() const { return as_strided_view(shape(), strides(), offset()); }

void Tensor::retain_grad() const {
  VT_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep their grad anyway
  impl().retains_grad = true;
  grad_fn()->retained = impl_;
}

void Tensor::add_hook(GradHook hook) const {
  VT_CHECK(requires_grad(),
           "register_hook: cannot register a hook on a tensor that does not "
           "require grad");
  if (is_leaf())
    impl().hooks.push_back(std::move(hook));
  else
    grad_fn()->hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook f) const {
  VT_CHECK(requires_grad() && is_leaf(),
           "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad "
           "(a parameter); got {}",
           requires_grad() ? "a non-leaf" : "a tensor that does not require grad");
  impl().post_accumulate_hooks.push_back(std::move(f));
}

// ---- values ----------------------------------------------------------------------------------
double Tensor::item() const {
  VT_CHECK(numel() == 1, "item: the tensor has {} elements (shape {}), expected exactly one",
           numel(), shape());
  return to_vector<double>()[0];
}

template <typename T>
T Tensor::item() const {
  VT_CHECK(numel() == 1, "item: the tensor has {} elements (shape {}), expected exactly one",
           numel(), shape());
  return to_vector<T>()[0];
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

double Tensor::at(std::initializer_list<int64_t> index) const {
  VT_CHECK(static_cast<int>(index.size()) == dim(), "at: {} indices for a tensor with {} dims",
           index.size(), dim());
  int64_t off = offset();
  int d = 0;
  for (int64_t i : index) {
    int64_t n = shape()[d];
    VT_CHECK(i >= -n && i < n, "at: index {} is out of range for dim {} of size {}", i, d, n);
    off += (i < 0 ? i + n : i) * strides()[d];
    ++d;
  }
  return as_strided_view({}, {}, off).to_vector<double>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  // Convert on the tensor's device into a contiguous T tensor, then copy the bytes to the host.
  Tensor src = detach();
  Tensor tmp = Tensor::empty(shape(), dtype_of<T>(), device());
  backend().copy(src.strided(), tmp.strided());
  std::vector<T> out(static_cast<size_t>(numel()));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<char> raw(out.size());
    backend().to_host(tmp.data_ptr(), raw.data(), raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = raw[i] != 0;
  } else {
    backend().to_host(tmp.data_ptr(), out.data(), out.size() * sizeof(T));
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

Tensor Tensor::to(const Device& d) const {
  if (d == device()) return *this;
  Tensor src = contiguous();
  Tensor out = Tensor::empty(shape(), dtype(), d);
  size_t nbytes = static_cast<size_t>(numel()) * dtype_size(dtype());
  if (device().is_cpu()) {
    out.backend().from_host(src.data_ptr(), out.data_ptr(), nbytes);
  } else if (d.is_cpu()) {
    backend().to_host(src.data_ptr(), out.data_ptr(), nbytes);
  } else {
    std::vector<char> host(nbytes);
    backend().to_host(src.data_ptr(), host.data(), nbytes);
    out.backend().from_host(host.data(), out.data_ptr(), nbytes);
  }
  out.impl().requires_grad = false;
  return out;
}

// ---- printing --------------------------------------------------------------------------------
namespace {
constexpr int64_t kPrintThreshold = 1000;  // as PyTorch: summarise above this many elements
constexpr int64_t kEdgeItems = 3;

void separator(std::string& out, int newlines, int spaces) {
  out.append(static_cast<size_t>(newlines), '\n');
  out.append(static_cast<size_t>(spaces), ' ');
}

void print_rec(std::string& out, const std::vector<double>& v, const Dims& shape, int d,
               int64_t off, bool summarise, const std::function<std::string(double)>& fmt_one,
               int indent) {
  const int nd = shape.size();
  if (nd == 0) {
    out += fmt_one(v[0]);
    return;
  }
  int64_t stride = 1;
  for (int i = d + 1; i < nd; ++i) stride *= shape[i];
  out += '[';
  const int64_t n = shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += "...,";
      if (d == nd - 1)
        out += ' ';
      else
        separator(out, nd - d - 1, indent + d + 1);
      i = n - kEdgeItems - 1;
      continue;
    }
    if (d == nd - 1)
      out += fmt_one(v[off + i * stride]);
    else
      print_rec(out, v, shape, d + 1, off + i * stride, summarise, fmt_one, indent);
    if (i + 1 < n) {  // rows end with a newline; a blank line between matrices, as PyTorch
      out += ',';
      if (d == nd - 1)
        out += ' ';
      else
        separator(out, nd - d - 1, indent + d + 1);
    }
  }
  out += ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> v;
  if (dtype() == kBool) {
    auto b = to_vector<bool>();
    v.assign(b.begin(), b.end());
  } else {
    v = to_vector<double>();
  }
  bool sci = false;
  for (double x : v) {
    double a = std::fabs(x);
    if (std::isfinite(a) && a != 0 && (a >= 1e8 || a < 1e-4)) sci = true;
  }
  std::function<std::string(double)> fmt_one;
  if (dtype() == kBool)
    fmt_one = [](double x) { return std::string(x != 0 ? "True" : "False"); };
  else if (dtype() == kInt64)
    fmt_one = [](double x) { return fmt::format("{}", static_cast<int64_t>(x)); };
  else if (sci)
    fmt_one = [](double x) { return fmt::format("{:.4e}", x); };
  else
    fmt_one = [](double x) { return fmt::format("{:.4f}", x); };
  std::string out = "tensor(";
  print_rec(out, v, shape(), 0, 0, numel() > kPrintThreshold, fmt_one, 7);
  out += fmt::format(", shape={}, dtype={}", shape(), dtype_name(dtype()));
  if (!device().is_cpu()) out += ", device=" + device().str();
  if (grad_fn())
    out += fmt::format(", grad_fn={}", grad_fn()->name);
  else if (requires_grad())
    out += ", requires_grad=true";
  return out + ")";
}

}  // namespace vitrine
