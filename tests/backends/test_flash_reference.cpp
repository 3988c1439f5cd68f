// The flash-attention tiling of backends/cuda/flash_attention.cu, in plain C++ (flash_reference.h),
// against the materialised attention in float64: the fused attention op with its probabilities
// (ops::attention, the CPU backend's attention and attention_backward) and, for the causal mask,
// scaled_dot_product_attention. N at and around the tile edges (1, 7, 197 = 3 tiles and 5 rows,
// 200), head dims 32 and 64, the kernel's 64 x 64 tiles and unequal ones. Only the order of the
// float64 sums differs, hence 1e-12.
#include <cmath>
#include <limits>
#include <string>

#include "backends/flash_reference.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

namespace {

/// The materialised attention's out [B, N, H Dh] and dqkv for upstream gradient dout.
void materialised(const Tensor& qkv_values, int64_t H, double scale, bool causal,
                  const Tensor& dout, Tensor& out, Tensor& dqkv) {
  Tensor qkv = qkv_values.detach().requires_grad_();
  const int64_t B = qkv.size(0), N = qkv.size(1), Dh = qkv.size(2) / (3 * H);
  if (causal) {
    const Tensor parts = qkv.reshape({B, N, 3, H, Dh}).permute({2, 0, 3, 1, 4});
    out = ops::scaled_dot_product_attention(parts.select(0, 0), parts.select(0, 1),
                                            parts.select(0, 2), Tensor(), 0, true, scale)
              .transpose(1, 2)
              .reshape({B, N, H * Dh});
  } else {
    Tensor probs;  // asked for: the materialised kernel, whatever the backend
    out = ops::attention(qkv, H, scale, &probs);
  }
  out.backward(dout);
  dqkv = qkv.grad();
  out = out.detach();
}

/// lse[b, h, i] = log sum_{j visible} exp(scale q_i . k_j), directly.
std::vector<double> direct_lse(const double* qkv, const flash::Shape& s, double scale,
                               bool causal) {
  std::vector<double> lse(s.B * s.H * s.N);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.N; ++i) {
        std::vector<double> row;
        for (int64_t j = 0; j < s.N; ++j) {
          if (causal && j > i) break;
          double dot = 0;
          for (int64_t d = 0; d < s.Dh; ++d)
            dot += qkv[s.qkv(b, i, 0, h) + d] * qkv[s.qkv(b, j, 1, h) + d];
          row.push_back(scale * dot);
        }
        const double m = *std::max_element(row.begin(), row.end());
        double sum = 0;
        for (double v : row) sum += std::exp(v - m);
        lse[s.stat(b, h, i)] = m + std::log(sum);
      }
  return lse;
}

}  // namespace

TEST_CASE("flash reference: the tiled forward and backward equal the materialised attention") {
  const int64_t B = 2, H = 2;
  for (int64_t N : {1, 7, 197, 200})
    for (int64_t Dh : {32, 64})
      for (bool causal : {false, true})
        for (flash::Tiles t : {flash::Tiles{64, 64}, flash::Tiles{16, 48}, flash::Tiles{48, 16}}) {
          INFO("N " << N << ", Dh " << Dh << (causal ? ", causal" : "") << ", tiles " << t.br
                    << " x " << t.bc);
          const flash::Shape s{B, N, H, Dh};
          const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
          Generator gen(1000 + N + Dh);
          // q and k at 2x so that the softmax is far from uniform.
          const Tensor qkv = (ops::randn({B, N, 3 * H * Dh}, gen, kFloat64) * 2.0).detach();
          const Tensor dout = ops::randn({B, N, H * Dh}, gen, kFloat64).detach();
          Tensor ref_out, ref_dqkv;
          materialised(qkv, H, scale, causal, dout, ref_out, ref_dqkv);

          Tensor out = ops::zeros({B, N, H * Dh}, kFloat64);
          Tensor lse = ops::zeros({B, H, N}, kFloat64);
          flash::forward(qkv.data<double>(), s, scale, causal, out.data<double>(),
                         lse.data<double>(), t);
          check_close(out, ref_out, 1e-12, 1e-12);
          check_close(lse, direct_lse(qkv.data<double>(), s, scale, causal), 1e-12, 1e-12);

          // NaN first: every element must be written.
          Tensor dqkv = ops::full({B, N, 3 * H * Dh}, std::nan(""), kFloat64);
          flash::backward(qkv.data<double>(), out.data<double>(), dout.data<double>(),
                          lse.data<double>(), s, scale, causal, dqkv.data<double>(), t);
          check_close(dqkv, ref_dqkv, 1e-12, 1e-12);
        }
}

TEST_CASE("flash reference: a causal first row sees only itself") {
  // N 3, one head, Dh 32: out[0] = v[0] exactly, and dq[0] = 0 (a softmax over one key).
  const flash::Shape s{1, 3, 1, 32};
  Generator gen(7);
  const Tensor qkv = ops::randn({1, 3, 96}, gen, kFloat64).detach();
  Tensor out = ops::zeros({1, 3, 32}, kFloat64), lse = ops::zeros({1, 1, 3}, kFloat64);
  flash::forward(qkv.data<double>(), s, 0.5, true, out.data<double>(), lse.data<double>());
  for (int64_t d = 0; d < 32; ++d) CHECK(out.data<double>()[d] == qkv.data<double>()[64 + d]);
  const Tensor dout = ops::randn({1, 3, 32}, gen, kFloat64).detach();
  Tensor dqkv = ops::zeros({1, 3, 96}, kFloat64);
  flash::backward(qkv.data<double>(), out.data<double>(), dout.data<double>(), lse.data<double>(),
                  s, 0.5, true, dqkv.data<double>());
  for (int64_t d = 0; d < 32; ++d) CHECK(std::abs(dqkv.data<double>()[d]) < 1e-15);
}

TEST_CASE("flash reference: the CPU has no flash attention, and bfloat16 qkv is the usual error") {
  // The CPU declines (backend.h's default): the materialised path, its node "attention".
  Generator gen(3);
  Tensor qkv = ops::randn({1, 9, 3 * 2 * 32}, gen).requires_grad_();
  Tensor lse = ops::zeros({1, 2, 9}), out = ops::zeros({1, 9, 64});
  Strided s = qkv.strided();
  s.shape = {1, 9, 3, 2, 32};
  s.strides = {9 * 192, 192, 64, 32, 1};
  CHECK_FALSE(qkv.backend().flash_attention(s, 0.5, false, out.strided(), lse.strided()));
  CHECK(std::string(ops::attention(qkv, 2, 0.5).grad_fn()->name) == "attention");
  CHECK_THROWS_WITH(ops::attention(qkv.detach().to(kBFloat16), 2, 0.5),
                    doctest::Contains("convert 16-bit tensors with to(kFloat32) first"));
}
