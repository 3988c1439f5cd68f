// Helpers of the convolution tests (test_conv_paths.cpp, test_conv_winograd.cpp,
// test_conv_add_relu.cpp): the algorithm set for a scope, and a bit-for-bit comparison (the
// thread count for a scope is test_util.h's Threads).
#pragma once
#include <cstring>
#include <vector>

#include "backends/conv_algorithm.h"
#include "test_util.h"

namespace vt_test {

/// Sets the convolution algorithm for a scope.
struct Algorithm {
  explicit Algorithm(vitrine::ConvAlgorithm a) : before(vitrine::conv_algorithm()) {
    vitrine::set_conv_algorithm(a);
  }
  ~Algorithm() { vitrine::set_conv_algorithm(before); }
  vitrine::ConvAlgorithm before;
};

/// The same shape, dtype and bits (NaNs included).
inline void check_equal_bits(const vitrine::Tensor& a, const vitrine::Tensor& b);

/// A random float32 input of the given shape, or with sliced channels 8 .. 8 + C of a wider one
/// (a view: the batch stride is not C H W).
inline vitrine::Tensor conv_input(const vitrine::Dims& shape, uint64_t& seed, bool sliced) {
  if (!sliced) return rand64(shape, seed++).to(vitrine::kFloat32);
  vitrine::Dims wide = shape;
  wide[1] += 16;
  return vitrine::ops::narrow(rand64(wide, seed++).to(vitrine::kFloat32), 1, 8, shape[1]);
}

/// run() (tensors: an output and its gradients) on 1 and on 2 threads gives the same bits.
template <typename F>
void check_same_bits_on_1_and_2_threads(F&& run) {
  std::vector<vitrine::Tensor> one, two;
  {
    Threads t(1);
    one = run();
  }
  {
    Threads t(2);
    two = run();
  }
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) check_equal_bits(one[i], two[i]);
}

/// The same shape, dtype and bits (NaNs included).
inline void check_equal_bits(const vitrine::Tensor& a, const vitrine::Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.dtype() == b.dtype());
  const vitrine::Tensor ac = a.contiguous(), bc = b.contiguous();
  CHECK(std::memcmp(ac.strided().data, bc.strided().data,
                    static_cast<size_t>(a.numel()) * vitrine::dtype_size(a.dtype())) == 0);
}

}  // namespace vt_test
