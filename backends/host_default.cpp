// Kernels every backend has through the host: the data is copied to host memory, computed there
// and copied back. cumsum and sort along the last dim (backends/backend.h); used as they are by
// the CPU (its copies are memcpy) and by CUDA until it has kernels of its own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/backend.h"

namespace vitrine {

namespace {

/// A contiguous tensor's bytes on the host.
std::vector<char> host_bytes(Backend& be, const Strided& x) {
  VT_ASSERT(x.is_contiguous());
  std::vector<char> bytes(static_cast<size_t>(x.numel()) * dtype_size(x.dtype));
  if (!bytes.empty()) be.to_host(x.data, bytes.data(), bytes.size());
  return bytes;
}

void to_device(Backend& be, const std::vector<char>& bytes, const Strided& y) {
  VT_ASSERT(y.is_contiguous());
  if (!bytes.empty()) be.from_host(bytes.data(), y.data, bytes.size());
}

/// rows and columns of a [..., C] tensor seen as [R, C]
std::pair<int64_t, int64_t> rows_cols(const Strided& x) {
  const int64_t cols = x.shape.size() == 0 ? 1 : x.shape[x.shape.size() - 1];
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

template <typename T>
void cumsum_rows(T* v, int64_t rows, int64_t cols, bool reverse) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = v + r * cols;
    T acc = 0;
    if (reverse) {
      for (int64_t j = cols - 1; j >= 0; --j) row[j] = acc += row[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] = acc += row[j];
    }
  }
}

/// a before b in the sort's order; NaN is larger than every number, as PyTorch's sort.
template <typename T>
bool sorts_before(T a, T b, bool descending) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return descending ? (na && !nb) : (!na && nb);
  }
  return descending ? a > b : a < b;
}

template <typename T>
void sort_rows(T* v, int64_t* idx, int64_t rows, int64_t cols, bool descending) {
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::vector<T> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    T* row = v + r * cols;
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return sorts_before(row[a], row[b], descending);
    });
    for (int64_t j = 0; j < cols; ++j) tmp[j] = row[perm[j]];
    std::copy(tmp.begin(), tmp.end(), row);
    std::copy(perm.begin(), perm.end(), idx + r * cols);
  }
}

}  // namespace

void Backend::cumsum(const Strided& x, const Strided& y, bool reverse) {
  VT_ASSERT(x.dtype == y.dtype && x.numel() == y.numel());
  std::vector<char> bytes = host_bytes(*this, x);
  const auto rc = rows_cols(x);  // (not a structured binding: the lambda below reads them)
  const int64_t rows = rc.first, cols = rc.second;
  dispatch_numeric(x.dtype, "cumsum", [&]<typename T>() {
    cumsum_rows(reinterpret_cast<T*>(bytes.data()), rows, cols, reverse);
  });
  to_device(*this, bytes, y);
}

void Backend::sort(const Strided& x, const Strided& values, const Strided& indices,
                   bool descending) {
  VT_ASSERT(x.dtype == values.dtype && indices.dtype == DType::Int64);
  std::vector<char> bytes = host_bytes(*this, x);
  const auto rc = rows_cols(x);  // (not a structured binding: the lambda below reads them)
  const int64_t rows = rc.first, cols = rc.second;
  std::vector<char> idx(static_cast<size_t>(x.numel()) * sizeof(int64_t));
  dispatch_numeric(x.dtype, "sort", [&]<typename T>() {
    sort_rows(reinterpret_cast<T*>(bytes.data()), reinterpret_cast<int64_t*>(idx.data()), rows,
              cols, descending);
  });
  to_device(*this, bytes, values);
  to_device(*this, idx, indices);
}

}  // namespace vitrine
