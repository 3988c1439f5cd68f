// Size arithmetic on numbers that come from outside (a file's header, a config, a command line):
// every product, sum and narrowing is checked, so a hostile value becomes an Error naming where
// it came from instead of undefined behaviour. Every reader computes its sizes with these.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "backends/shape.h"

namespace vitrine {

/// a * b for sizes (a, b >= 0); throws Error "{what}: a x b overflows 64 bits" when it does not
/// fit.
int64_t checked_mul(int64_t a, int64_t b, std::string_view what);
/// a + b for sizes and offsets (a, b >= 0); throws Error when it does not fit in int64.
int64_t checked_add(int64_t a, int64_t b, std::string_view what);
/// The element count of a shape: at most kMaxDims dims, each >= 0, and both prod(d) and
/// prod(max(d, 1)) (the largest contiguous stride, which a zero dim does not bound) within int64.
/// `what` names the source ("weights.npy: shape", "model.safetensors: tensor 'w'").
int64_t checked_numel(std::span<const int64_t> shape, std::string_view what);
inline int64_t checked_numel(const Dims& shape, std::string_view what) {
  return checked_numel(std::span<const int64_t>(shape.begin(), shape.end()), what);
}
/// checked_numel(shape) * element_size: the bytes a shape's data takes.
int64_t checked_bytes(std::span<const int64_t> shape, int64_t element_size, std::string_view what);

}  // namespace vitrine
