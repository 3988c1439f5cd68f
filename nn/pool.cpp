#include "nn/pool.h"

#include <fmt/format.h>

#include "ops/ops.h"

namespace vitrine::nn {

namespace {
std::string pair_repr(std::pair<int64_t, int64_t> p) {
  return p.first == p.second ? fmt::format("{}", p.first)
                             : fmt::format("({}, {})", p.first, p.second);
}
}  // namespace

MaxPool2d::MaxPool2d(Size2 k, std::optional<Size2> s, Size2 p)
    : kernel(k.pair()), stride(s.value_or(k).pair()), padding(p.pair()) {}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, kernel, stride, padding); }

ops::ValuesIndices MaxPool2d::forward_with_indices(const Tensor& x) {
  return ops::max_pool2d_with_indices(x, kernel, stride, padding);
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", pair_repr(kernel), pair_repr(stride),
                     pair_repr(padding));
}

MaxUnpool2d::MaxUnpool2d(Size2 k, std::optional<Size2> s, Size2 p)
    : kernel(k.pair()), stride(s.value_or(k).pair()), padding(p.pair()) {}

Tensor MaxUnpool2d::forward(const Tensor& x, const Tensor& indices, const Dims& output_size) {
  return ops::max_unpool2d(x, indices, kernel, stride, padding, output_size);
}

Tensor MaxUnpool2d::forward(const Tensor&) {
  fail(
      "MaxUnpool2d: forward needs the indices that MaxPool2d::forward_with_indices returned: "
      "call forward(x, indices) or forward(x, indices, output_size)");
}

std::string MaxUnpool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", pair_repr(kernel), pair_repr(stride),
                     pair_repr(padding));
}

AvgPool2d::AvgPool2d(Size2 k, std::optional<Size2> s, Size2 p, bool count_include_pad)
    : kernel(k.pair()),
      stride(s.value_or(k).pair()),
      padding(p.pair()),
      count_include_pad(count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return ops::avg_pool2d(x, kernel, stride, padding, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}{}", pair_repr(kernel),
                     pair_repr(stride), pair_repr(padding),
                     count_include_pad ? "" : ", count_include_pad=false");
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size.pair()) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  return ops::adaptive_avg_pool2d(x, output_size);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size={}", pair_repr(output_size));
}

Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim);
}

}  // namespace vitrine::nn
