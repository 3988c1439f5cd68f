// The 1-D convolutions as the 2-D ones on [N, C, 1, L], and the padding that torch.nn.Conv*d's
// padding_mode and padding="same" put before a convolution (ops/conv_transpose.h).
#include "ops/conv_transpose.h"
#include "ops/helpers.h"
#include "ops/padding.h"

namespace vitrine::ops {

using namespace detail;

namespace {

/// conv1d's and conv_transpose1d's checks of rank (the 2-D ops check the rest).
void check_1d(const Tensor& x, const Tensor& weight, const char* op, const char* weight_layout) {
  check_defined(x, op, "input");
  check_defined(weight, op, "weight");
  VT_CHECK(x.dim() == 3, "{}: input must be 3-D [B, Cin, L], got shape {}", op, x.shape());
  VT_CHECK(weight.dim() == 3, "{}: weight must be 3-D {}, got shape {}", op, weight_layout,
           weight.shape());
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  check_1d(x, weight, "conv1d", "[Cout, Cin / groups, k]");
  return squeeze(conv2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, {1, stride}, {0, padding},
                        {1, dilation}, groups),
                 2);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                        int64_t padding, int64_t output_padding, int64_t groups, int64_t dilation) {
  check_1d(x, weight, "conv_transpose1d", "[Cin, Cout / groups, k]");
  return squeeze(conv_transpose2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, {1, stride},
                                  {0, padding}, {0, output_padding}, groups, {1, dilation}),
                 2);
}

Tensor circular_pad(const Tensor& x, const std::vector<int64_t>& pads) {
  check_defined(x, "circular_pad", "input");
  VT_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) / 2 <= x.dim(),
           "circular_pad: pads must come in (low, high) pairs, at most one per dim of the input "
           "(shape {}), got {} values",
           x.shape(), pads.size());
  Tensor y = x;
  for (size_t p = 0; p < pads.size(); p += 2) {
    const int64_t dim = x.dim() - 1 - static_cast<int64_t>(p / 2);
    const int64_t n = x.size(dim), lo = pads[p], hi = pads[p + 1];
    VT_CHECK(lo >= 0 && hi >= 0 && lo <= n && hi <= n,
             "circular_pad: pads ({}, {}) of dim {} must be between 0 and its size {} (input {}): "
             "a larger one would wrap around more than once",
             lo, hi, dim, n, x.shape());
    if (lo == 0 && hi == 0) continue;
    // y = [the last lo of dim, y, the first hi of dim]
    std::vector<Tensor> parts;
    if (lo > 0) parts.push_back(slice(y, dim, n - lo, n));
    parts.push_back(y);
    if (hi > 0) parts.push_back(slice(y, dim, 0, hi));
    y = cat(parts, dim);
  }
  return y;
}

Tensor pad_for_conv(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode) {
  if (mode == "zeros") return pad(x, pads);
  if (mode == "reflect") return reflection_pad(x, pads);
  if (mode == "replicate") return replication_pad(x, pads);
  if (mode == "circular") return circular_pad(x, pads);
  fail("padding_mode must be one of 'zeros', 'reflect', 'replicate' or 'circular', got '{}'", mode);
}

std::pair<int64_t, int64_t> same_padding(int64_t kernel, int64_t dilation) {
  const int64_t total = dilation * (kernel - 1);
  return {total / 2, total - total / 2};
}

}  // namespace vitrine::ops
