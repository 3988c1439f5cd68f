// Checked size arithmetic (see checked.h).
#include "backends/checked.h"

#include <algorithm>

#include "backends/error.h"

namespace vitrine {

int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  VT_CHECK(a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &r),
           "{}: {} x {} is out of range (sizes must be non-negative and their product fit in 64 "
           "bits)",
           what, a, b);
  return r;
}

int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  VT_CHECK(a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, &r),
           "{}: {} + {} is out of range (sizes must be non-negative and their sum fit in 64 bits)",
           what, a, b);
  return r;
}

int64_t checked_numel(std::span<const int64_t> shape, std::string_view what) {
  VT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "{}: {} dims; at most {} are supported",
           what, shape.size(), kMaxDims);
  int64_t count = 1, stride = 1;
  for (int64_t d : shape) {
    VT_CHECK(d >= 0, "{}: shape [{}] has a negative size", what, fmt::join(shape, ", "));
    VT_CHECK(!__builtin_mul_overflow(count, d, &count) &&
                 !__builtin_mul_overflow(stride, std::max<int64_t>(d, 1), &stride),
             "{}: shape [{}] is too large (its element count overflows 64 bits)", what,
             fmt::join(shape, ", "));
  }
  return count;
}

int64_t checked_bytes(std::span<const int64_t> shape, int64_t element_size, std::string_view what) {
  const int64_t n = checked_numel(shape, what);
  int64_t bytes = 0;
  VT_CHECK(!__builtin_mul_overflow(n, element_size, &bytes),
           "{}: shape [{}] of {}-byte elements needs more bytes than fit in 64 bits", what,
           fmt::join(shape, ", "), element_size);
  return bytes;
}

}  // namespace vitrine
