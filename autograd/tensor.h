// Tensor: a cheap handle (shared_ptr) to a TensorImpl, which holds a view of a Storage (offset,
// shape, strides in elements), the dtype, and the autograd state: requires_grad, grad, and
// grad_fn, the graph node that made this tensor (null for leaves). Views share storage and so
// share the storage's version counter. Methods that compute are thin forwards to vitrine::ops
// (ops/tensor_methods.cpp), so the maths lives in one place.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/backend.h"
#include "backends/generator.h"

namespace vitrine {

struct Node;
class Tensor;

/// A gradient hook: receives the gradient; returns a replacement, or an undefined Tensor to keep
/// it.
using GradHook = std::function<Tensor(const Tensor&)>;
/// Runs after a backward pass has accumulated a leaf's gradient into its .grad(); receives the
/// leaf (torch's register_post_accumulate_grad_hook).
using PostAccumulateHook = std::function<void(const Tensor&)>;

struct TensorImpl {
  StoragePtr storage;
  int64_t offset = 0;  // in elements
  Dims shape;
  Dims strides;  // in elements
  DType dtype = DType::Float32;
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::vector<GradHook> hooks;    // leaf hooks (a non-leaf's hooks live on its grad_fn)
  std::vector<PostAccumulateHook> post_accumulate_hooks;  // leaves only
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// A new contiguous tensor, uninitialised.
  static Tensor empty(const Dims& shape, DType dtype = kFloat32, Device device = kCPU);
  /// A view of the same storage with other offset/shape/strides (no autograd; ops use this).
  Tensor as_strided_view(const Dims& shape, const Dims& strides, int64_t offset) const;

  bool defined() const { return impl_ != nullptr; }
  const Dims& shape() const { return impl().shape; }
  const Dims& strides() const { return impl().strides; }
  /// Size of a dim (negative counts from the end).
  int64_t size(int64_t dim) const;
  int dim() const { return impl().shape.size(); }
  int64_t numel() const { return impl().shape.numel(); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  bool is_contiguous() const;
  const StoragePtr& storage() const { return impl().storage; }
  /// Pointer to element [0, ..., 0].
  void* data_ptr() const;
  /// Typed pointer to element [0, ..., 0]; checks dtype and that the tensor is on the CPU.
  template <typename T>
  T* data() const;
  /// The kernel's view of this tensor.
  Strided strided() const;
  Backend& backend() const { return backend_for(device()); }

  // Version counter (shared by all views of a storage).
  uint64_t version() const { return impl().storage->version; }
  void bump_version() const { ++impl().storage->version; }

  // Autograd.
  bool requires_grad() const { return impl().requires_grad; }
  /// Marks a leaf as requiring grad (float dtypes only).
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  /// The accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  /// Computes d(this)/d(leaves) and accumulates into their .grad(). grad: dL/d(this); may be
  /// left out for a one-element tensor (then 1).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  /// Same data, no graph, requires_grad false.
  Tensor detach() const;
  /// Asks a non-leaf tensor to keep its .grad() after backward.
  void retain_grad() const;
  bool retains_grad() const { return impl().retains_grad; }
  /// Registers a hook on this tensor's gradient. f(grad) may return void (read it) or a Tensor
  /// (replace it; an undefined Tensor keeps it).
  template <typename F>
  void register_hook(F&& f) const {
    if constexpr (std::is_void_v<std::invoke_result_t<F, const Tensor&>>) {
      add_hook([f = std::forward<F>(f)](const Tensor& g) {
        f(g);
        return Tensor();
      });
    } else {
      add_hook(GradHook(std::forward<F>(f)));
    }
  }

  /// Registers f(leaf), run each time a backward pass has added this leaf's gradient into its
  /// .grad(): as soon as the last contribution to it arrives, while backward goes on through the
  /// rest of the graph (DistributedDataParallel starts a bucket's all-reduce there). Leaves only;
  /// torch.autograd.grad does not run it (it accumulates nothing).
  void register_post_accumulate_grad_hook(PostAccumulateHook f) const;

  // Values.
  /// The value of a one-element tensor, as double.
  double item() const;
  template <typename T>
  T item() const;
  /// Element at a full index, as double (for tests and small programs).
  double at(std::initializer_list<int64_t> index) const;
  /// All elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  /// A copy in another dtype (the same tensor when it already has it); differentiable.
  Tensor to(DType dtype) const;
  /// A copy on another device (the same tensor when it is already there). Not differentiable yet:
  /// the copy is a leaf (move parameters with Module::to, data before the forward).
  Tensor to(const Device& device) const;
  /// A contiguous tensor with the same values (this one when already contiguous).
  Tensor contiguous() const;
  /// A contiguous copy; differentiable.
  Tensor clone() const;
  /// PyTorch-like text: values (truncated past 1000 elements), shape, dtype, grad state.
  std::string str() const;

  // Shape methods (views where possible; see ops/ops.h).
  Tensor reshape(const Dims& shape) const;
  Tensor view(const Dims& shape) const;
  Tensor permute(const Dims& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  /// Transpose of the last two dims.
  Tensor mT() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Dims& shape) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;

  // Maths methods.
  Tensor matmul(const Tensor& other) const;
  Tensor sum(const Dims& dims = {}, bool keepdim = false) const;
  Tensor mean(const Dims& dims = {}, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor relu() const;
  Tensor pow(double exponent) const;
  Tensor abs() const;
  Tensor sigmoid() const;

  // In-place (bump the version; refused on tensors that require grad while grad mode is on).
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_();

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  void add_hook(GradHook hook) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Operators forward to ops (broadcasting, differentiable).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

}  // namespace vitrine

template <>
struct fmt::formatter<vitrine::Tensor> : fmt::formatter<std::string> {
  auto format(const vitrine::Tensor& t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
