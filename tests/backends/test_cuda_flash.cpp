// Flash attention on the GPU (backends/cuda/flash_attention.cu) against the materialised
// attention computed in float64 on the GPU from the same inputs rounded to bfloat16 (what the
// kernel reads): forward out and lse, backward dqkv, float32 qkv under matmul precision "medium"
// and bfloat16 qkv, N 197, 785 and 4801 (tiles cut at the edge), head dims 32, 64 and 128, with
// and without the causal mask. Then the op's choice of path, and a ViT step through it. Flash
// attention is opt-in until a GPU run has passed it (backends/gpu_paths.h): each case turns it on.
//
// Tolerances, as max |flash - reference| / max |reference| over a whole tensor: the kernel rounds
// P (and in the backward dS and dO) to bfloat16 before each product, a relative error of up to
// 2^-9 per element that the float32 sums average; a bfloat16 output adds its own rounding (2^-9)
// and bfloat16 dout is coarser still. The CPU reference with those roundings put in (P before
// P V; P and dS before the backward's products) gave at most 8e-4 on out and 3e-3 on each of dq,
// dk and dv at N 197 and 785, Dh 32 and 128, causal or not. Bounds, with room for float32 sums
// and bfloat16 outputs: forward 1e-2 (float32 out), 2e-2 (bfloat16 out); lse (float32 either
// way) 1e-3 absolute over values of order log N; backward 2e-2 and 3e-2. A wrong tile, mask or
// fragment layout is an error of order 1. Without a GPU every case is skipped.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "backends/gpu_paths.h"
#include "backends/matmul_precision.h"
#include "models/vit.h"
#include "ops/helpers.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

namespace {

const Device kGpu = Device::parse("cuda");

/// Sets the float32 matmul precision for a scope.
struct Precision {
  explicit Precision(const char* p) { set_float32_matmul_precision(p); }
  ~Precision() { set_float32_matmul_precision("highest"); }
};

using ops::detail::view5;  // qkv [B, N, 3 H Dh] as the kernels' [B, N, 3, H, Dh]

/// max |a - ref|, in float64 (a NaN anywhere makes it NaN, which fails any bound).
double max_err(const Tensor& a, const Tensor& ref) {
  const Tensor d = a.detach().to(kFloat64) - ref.detach().to(kFloat64);
  if (ops::sum(ops::ne(d, d).to(kFloat64)).item() > 0) return std::nan("");
  return ops::max(ops::abs(d)).item();
}
/// max |a - ref| / max |ref| (max |a - ref| where ref is all zero).
double rel_err(const Tensor& a, const Tensor& ref) {
  const double err = max_err(a, ref), top = ops::max(ops::abs(ref.detach().to(kFloat64))).item();
  return top > 0 ? err / top : err;
}

/// The materialised attention in float64 (on qkv's device): out [B, N, H Dh], lse [B, H, N]
/// and dqkv for upstream gradient dout.
struct Reference {
  Tensor out, lse, dqkv;
};
Reference materialised(const Tensor& qkv64, int64_t H, double scale, bool causal,
                       const Tensor& dout64) {
  Tensor qkv = qkv64.detach().requires_grad_();
  const int64_t B = qkv.size(0), N = qkv.size(1), Dh = qkv.size(2) / (3 * H);
  const Tensor parts = qkv.reshape({B, N, 3, H, Dh}).permute({2, 0, 3, 1, 4});
  const Tensor q = parts.select(0, 0), k = parts.select(0, 1), v = parts.select(0, 2);
  Tensor out = ops::scaled_dot_product_attention(q, k, v, Tensor(), 0, causal, scale)
                   .transpose(1, 2)
                   .reshape({B, N, H * Dh});
  out.backward(dout64);
  Reference r;
  r.out = out.detach();
  r.dqkv = qkv.grad();
  NoGradGuard no_grad;
  Tensor s = ops::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, N, N]
  if (causal) {
    const Tensor i = ops::arange(0, static_cast<double>(N), 1, kFloat64).reshape({N, 1});
    const Tensor j = ops::arange(0, static_cast<double>(N), 1, kFloat64).reshape({1, N});
    s = ops::where(ops::le(j, i).to(qkv.device()), s,
                   ops::full_like(s, -std::numeric_limits<double>::infinity()));
  }
  r.lse = ops::logsumexp(s, {-1});
  return r;
}

struct Flash {
  Tensor out, lse, dqkv;
};
/// The backend's flash attention and its backward, outputs filled with NaN first (every element
/// must be written).
Flash run_flash(const Tensor& qkv, const Tensor& dout, int64_t H, double scale, bool causal) {
  const double nan = std::nan("");
  const int64_t B = qkv.size(0), N = qkv.size(1);
  Flash f;
  f.out = ops::full(dout.shape(), nan, qkv.dtype(), kGpu);
  f.lse = ops::full({B, H, N}, nan, kFloat32, kGpu);
  f.dqkv = ops::full(qkv.shape(), nan, qkv.dtype(), kGpu);
  Backend& be = qkv.backend();
  REQUIRE(be.flash_attention(view5(qkv, H), scale, causal, f.out.strided(), f.lse.strided()));
  REQUIRE(be.flash_attention_backward(view5(qkv, H), f.out.strided(), dout.strided(),
                                      f.lse.strided(), scale, causal, view5(f.dqkv, H)));
  return f;
}

}  // namespace

TEST_CASE("cuda flash attention: forward and backward against the float64 materialised one") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard flash_on(GpuPath::FlashAttention, true);  // opt-in (backends/gpu_paths.h)
  Precision medium("medium");
  for (int64_t N : {197, 785, 4801})
    for (int64_t Dh : {32, 64, 128})
      for (bool causal : {false, true})
        for (DType dtype : {kFloat32, kBFloat16}) {
          const int64_t B = N > 1000 ? 1 : 2, H = 2;
          INFO("N " << N << ", Dh " << Dh << (causal ? ", causal" : "") << ", "
                    << dtype_name(dtype));
          const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
          Generator gen(4000 + N + Dh);
          // q and k at 2x: the softmax far from uniform, some rows near one-hot.
          const Tensor qkv = (ops::randn({B, N, 3 * H * Dh}, gen) * 2.0).to(kGpu).to(dtype);
          const Tensor dout = ops::randn({B, N, H * Dh}, gen).to(kGpu).to(dtype);
          const Flash f = run_flash(qkv, dout, H, scale, causal);
          // The reference from the values the kernel multiplies (inputs rounded to bfloat16).
          const Reference r = materialised(qkv.to(kBFloat16).to(kFloat64), H, scale, causal,
                                           dout.to(kBFloat16).to(kFloat64));
          const bool bf = dtype == kBFloat16;
          CHECK(f.out.dtype() == dtype);
          CHECK(rel_err(f.out, r.out) < (bf ? 2e-2 : 1e-2));
          CHECK(max_err(f.lse, r.lse) < 1e-3);
          CHECK(rel_err(f.dqkv, r.dqkv) < (bf ? 3e-2 : 2e-2));
          // Each part of dqkv on its own (dq is the smallest; a wrong part hides in the max).
          for (int64_t part = 0; part < 3; ++part) {
            INFO("part " << part << " of dqkv (q, k, v)");
            const Tensor got = f.dqkv.reshape({B, N, 3, H * Dh}).select(2, part);
            const Tensor want = r.dqkv.reshape({B, N, 3, H * Dh}).select(2, part);
            CHECK(rel_err(got, want) < (bf ? 3e-2 : 2e-2));
          }
        }
}

TEST_CASE("cuda flash attention: ops::attention takes it under medium and for bfloat16 only") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard flash_on(GpuPath::FlashAttention, true);  // opt-in (backends/gpu_paths.h)
  const int64_t B = 2, N = 197, H = 3, Dh = 64;
  const double scale = 0.125;
  Generator gen(5);
  const Tensor x = (ops::randn({B, N, 3 * H * Dh}, gen) * 2.0).to(kGpu);
  const Tensor dy = ops::randn({B, N, H * Dh}, gen).to(kGpu);
  const Reference r =
      materialised(x.to(kBFloat16).to(kFloat64), H, scale, false, dy.to(kBFloat16).to(kFloat64));
  auto run = [&](const Tensor& values, Tensor* probs) {
    Tensor qkv = values.detach().requires_grad_();
    Tensor out = ops::attention(qkv, H, scale, probs);
    const std::string name(out.grad_fn()->name);
    out.backward(dy.to(values.dtype()));
    return std::make_tuple(name, out.detach(), qkv.grad());
  };
  {
    Precision medium("medium");
    {
      const GpuPathGuard off(GpuPath::FlashAttention, false);  // switched off: never taken
      CHECK(std::get<0>(run(x, nullptr)) == "attention");
    }
    auto [name, out, grad] = run(x, nullptr);
    CHECK(name == "flash_attention");
    CHECK(rel_err(out, r.out) < 1e-2);
    CHECK(rel_err(grad, r.dqkv) < 2e-2);
    Tensor probs;  // asked for: the materialised kernel
    CHECK(std::get<0>(run(x, &probs)) == "attention");
    CHECK(probs.defined());
  }
  {
    Precision high("high");  // its TF32 numbers are the materialised path's
    CHECK(std::get<0>(run(x, nullptr)) == "attention");
  }
  CHECK(std::get<0>(run(x, nullptr)) == "attention");  // highest
  // bfloat16 qkv, whatever the precision: out and the gradient bfloat16.
  auto [name, out, grad] = run(x.to(kBFloat16), nullptr);
  CHECK(name == "flash_attention");
  CHECK(out.dtype() == kBFloat16);
  CHECK(grad.dtype() == kBFloat16);
  CHECK(rel_err(out, r.out) < 2e-2);
  CHECK(rel_err(grad, r.dqkv) < 3e-2);
  // Head dims the kernel has no tiles for keep the materialised path.
  Precision medium("medium");
  CHECK(std::get<0>(run(ops::randn({1, 9, 3 * 2 * 8}, gen).to(kGpu), nullptr)) == "attention");
}

TEST_CASE("cuda flash attention: a ViT step through it matches the materialised attention") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard flash_on(GpuPath::FlashAttention, true);  // opt-in (backends/gpu_paths.h)
  Precision medium("medium");
  models::ViTConfig c = models::ViTConfig::preset("fmnist");  // dim 128, 4 heads: Dh 32
  c.depth = 2;
  Generator gd(61);
  const Tensor x = ops::randn({8, 1, 28, 28}, gd).to(kGpu);
  const Tensor y = ops::randint(0, 10, {8}, gd).to(kGpu);
  Generator g1(60), g2(60);
  models::VisionTransformer flash(c, g1), plain(c, g2);
  flash.to(kGpu);
  plain.to(kGpu);
  // A capture keeps the probabilities in the graph: the materialised attention.
  for (nn::MultiheadSelfAttention* a : plain.attention_layers()) a->capture(true);
  Tensor lf = ops::cross_entropy(flash.forward(x), y);
  Tensor lp = ops::cross_entropy(plain.forward(x), y);
  CHECK(lf.item() == doctest::Approx(lp.item()).epsilon(1e-2));
  lf.backward();
  lp.backward();
  auto pf = flash.named_parameters(), pp = plain.named_parameters();
  REQUIRE(pf.size() == pp.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    INFO(pf[i].first);
    // Both paths round to bfloat16 under medium, at different places: 5e-2 of each gradient's
    // largest element.
    CHECK(rel_err(pf[i].second.grad(), pp[i].second.grad()) < 5e-2);
  }
}

TEST_CASE("cuda flash attention: causal scaled_dot_product_attention on one qkv's parts takes it") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard flash_on(GpuPath::FlashAttention, true);  // opt-in (backends/gpu_paths.h)
  Precision medium("medium");
  const int64_t B = 2, N = 197, H = 2, E = 64;
  const double scale = 0.125;
  Generator gen(9);
  const Tensor x = (ops::randn({B, N, 3 * H * E}, gen) * 2.0).to(kGpu);
  const Tensor dy = ops::randn({B, N, H * E}, gen).to(kGpu);
  const Flash f = run_flash(x, dy, H, scale, true);  // the backend's own call
  // q, k, v as nn::MultiheadSelfAttention's masked forward makes them.
  Tensor qkv = x.detach().requires_grad_();
  const Tensor parts = qkv.reshape({B, N, 3, H, E}).permute({2, 0, 3, 1, 4});
  const Tensor out = ops::scaled_dot_product_attention(parts.select(0, 0), parts.select(0, 1),
                                                       parts.select(0, 2), Tensor(), 0, true, scale)
                         .transpose(1, 2)
                         .reshape({B, N, H * E});
  out.backward(dy);
  // The same kernels on the same inputs (no atomics): the same bits. The materialised path
  // under "medium" rounds elsewhere and would differ.
  CHECK(max_err(out, f.out) == 0);
  CHECK(max_err(qkv.grad(), f.dqkv) == 0);
  // q from elsewhere (not a part of one tensor): the materialised path, its numbers close.
  const Tensor q = parts.select(0, 0).detach().contiguous();
  const Tensor other = ops::scaled_dot_product_attention(
      q, parts.select(0, 1).detach(), parts.select(0, 2).detach(), Tensor(), 0, true, scale);
  const Tensor other_out = other.transpose(1, 2).reshape({B, N, H * E});
  CHECK(rel_err(other_out, f.out) < 1e-2);
  CHECK(max_err(other_out, f.out) > 0);
}
