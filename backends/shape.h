// Dims: a shape or a stride list, at most 8 entries, stored inline (no heap allocation).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backends/error.h"

namespace vitrine {

constexpr int kMaxDims = 8;
/// Pass as `end` to slice() to slice to the end of a dim.
constexpr int64_t kEnd = INT64_MAX;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit Dims(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }
  static Dims filled(int n, int64_t value) {
    Dims d;
    d.resize(n, value);
    return d;
  }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  /// Python-style: back(0) is the last entry.
  int64_t back(int i = 0) const { return d_[n_ - 1 - i]; }
  int64_t* begin() { return d_.data(); }
  int64_t* end() { return d_.data() + n_; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }

  void push_back(int64_t v) {
    VT_CHECK(n_ < kMaxDims, "shape: at most {} dims are supported", kMaxDims);
    d_[n_++] = v;
  }
  void resize(int n, int64_t value = 0) {
    VT_CHECK(n >= 0 && n <= kMaxDims, "shape: {} dims given, at most {} supported", n, kMaxDims);
    for (int i = n_; i < n; ++i) d_[i] = value;
    n_ = static_cast<uint8_t>(n);
  }
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  bool operator==(const Dims& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[i] != o.d_[i]) return false;
    return true;
  }

  /// Product of the entries (the element count of a shape).
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  /// "[2, 3, 4]"
  std::string str() const;

 private:
  template <typename It>
  void assign(It b, It e) {
    n_ = 0;
    for (; b != e; ++b) push_back(*b);
  }
  std::array<int64_t, kMaxDims> d_{};
  uint8_t n_ = 0;
};

/// Row-major (C-contiguous) strides of a shape.
Dims contiguous_strides(const Dims& shape);
/// Normalises a possibly negative dim into [0, ndim); names op in the error.
int wrap_dim(int64_t dim, int ndim, const char* op);
/// NumPy broadcast of two shapes; names op in the error.
Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op);

}  // namespace vitrine

template <>
struct fmt::formatter<vitrine::Dims> : fmt::formatter<std::string> {
  auto format(const vitrine::Dims& d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(d.str(), ctx);
  }
};
