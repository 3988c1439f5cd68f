// Tests of the CPU's flash attention (backends/cpu/flash_attention.cpp): forward and all three
// gradients against the materialised paths (scaled_dot_product_attention on separate q, k, v,
// which composes matmul, softmax and matmul; ops::attention asked for its probabilities, which
// runs backends/cpu/attention.cpp), causal and not, at token counts on and off the 64-row tiles;
// float64 gradchecks through both ops; that the flash path is the one that ran (its graph node,
// "flash_attention"); and the mode switch (flash_attention.h).
//
// The measure of agreement: max |flash - materialised| / max |materialised| over a tensor
// (relative to the tensor's largest value: an element near zero has no relative error of its own
// worth bounding), at most 1e-5 in float32 and 1e-12 in float64.
#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "backends/cpu/flash_attention.h"
#include "test_util.h"

namespace {

using namespace vitrine;
using namespace vt_test;
using cpu::FlashMode;
using cpu::FlashModeGuard;

/// Whether the graph below out holds a node named name (the op sits a few views below).
bool has_node(const Tensor& out, std::string_view name) {
  std::vector<std::shared_ptr<Node>> todo{out.grad_fn()};
  for (int steps = 0; !todo.empty() && steps < 16; ++steps) {
    const std::shared_ptr<Node> n = todo.back();
    todo.pop_back();
    if (!n) continue;
    if (n->name == name) return true;
    for (const Edge& e : n->inputs) todo.push_back(e.node);
  }
  return false;
}

/// max |a - b| / max |b| (0 for two zero tensors).
double rel_err(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, big = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::fabs(x[i] - y[i]));
    big = std::max(big, std::fabs(y[i]));
  }
  return big == 0 ? err : err / big;
}

/// q, k, v [B, H, N, Dh]: views of qkv [B, N, 3 H Dh], as nn::MultiheadSelfAttention makes them.
std::array<Tensor, 3> parts_of(const Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  const Tensor t = qkv.reshape({B, N, 3, heads, D / heads}).permute({2, 0, 3, 1, 4});
  return {t.select(0, 0), t.select(0, 1), t.select(0, 2)};
}

struct Run {
  Tensor out;   // [B, H, N, Dh]
  Tensor grad;  // d/dqkv [B, N, 3 H Dh]
  bool flash;   // whether the graph holds flash_attention
};

/// scaled_dot_product_attention on the parts of one qkv tensor (the flash path, where taken),
/// then its backward from dy.
Run sdpa_on_parts(const Tensor& base, int64_t heads, bool causal, const Tensor& dy) {
  Tensor qkv = base.detach().requires_grad_();
  const auto p = parts_of(qkv, heads);
  Tensor out = ops::scaled_dot_product_attention(p[0], p[1], p[2], Tensor(), 0, causal);
  const bool flash = has_node(out, "flash_attention");
  out.backward(dy);
  return {out.detach(), qkv.grad(), flash};
}

/// The materialised path: the same on separate contiguous copies of q, k and v (no qkv tensor to
/// read in place, so sdpa composes matmul, softmax and matmul), the three gradients put back
/// together as qkv's.
Run sdpa_on_copies(const Tensor& base, int64_t heads, bool causal, const Tensor& dy) {
  const auto p = parts_of(base.detach(), heads);
  std::array<Tensor, 3> c;
  for (int i = 0; i < 3; ++i) c[i] = p[i].contiguous().requires_grad_();
  Tensor out = ops::scaled_dot_product_attention(c[0], c[1], c[2], Tensor(), 0, causal);
  const bool flash = has_node(out, "flash_attention");
  out.backward(dy);
  const int64_t B = base.size(0), N = base.size(1);
  const Tensor g = ops::stack({c[0].grad(), c[1].grad(), c[2].grad()}, 0)  // [3, B, H, N, Dh]
                       .permute({1, 3, 0, 2, 4})
                       .reshape({B, N, base.size(2)});
  return {out.detach(), g, flash};
}

/// Flash (forced on) against the materialised path for one shape, in dtype; tol as the header.
void compare_sdpa(int64_t B, int64_t N, int64_t H, int64_t Dh, bool causal, DType dtype, double tol,
                  uint64_t seed) {
  const Tensor base = rand64({B, N, 3 * H * Dh}, seed).detach().to(dtype);
  const Tensor dy = rand64({B, H, N, Dh}, seed + 1).detach().to(dtype);
  Run flash, ref;
  {
    FlashModeGuard on(FlashMode::On);
    flash = sdpa_on_parts(base, H, causal, dy);
  }
  ref = sdpa_on_copies(base, H, causal, dy);
  CHECK(flash.flash);
  CHECK_FALSE(ref.flash);
  const double e_out = rel_err(flash.out, ref.out);
  const Tensor fg = flash.grad.reshape({B, N, 3, H * Dh}), rg = ref.grad.reshape({B, N, 3, H * Dh});
  const double e_dq = rel_err(fg.select(2, 0), rg.select(2, 0));
  const double e_dk = rel_err(fg.select(2, 1), rg.select(2, 1));
  const double e_dv = rel_err(fg.select(2, 2), rg.select(2, 2));
  INFO("B=" << B << " N=" << N << " H=" << H << " Dh=" << Dh << " causal=" << causal
            << " dtype=" << dtype_name(dtype) << ": out " << e_out << ", dq " << e_dq << ", dk "
            << e_dk << ", dv " << e_dv);
  CHECK(e_out <= tol);
  CHECK(e_dq <= tol);
  CHECK(e_dk <= tol);
  CHECK(e_dv <= tol);
}

}  // namespace

TEST_CASE("flash attention (CPU): scaled_dot_product_attention equals the materialised path") {
  uint64_t seed = 100;
  for (const bool causal : {false, true})
    for (const int64_t N : {1, 7, 64, 255})
      for (const int64_t Dh : {32, 64, 128})
        compare_sdpa(2, N, 2, Dh, causal, kFloat32, 1e-5, seed += 2);
}

TEST_CASE("flash attention (CPU): 1024 tokens, and head dims off the vector width") {
  uint64_t seed = 200;
  for (const bool causal : {false, true})
    compare_sdpa(1, 1024, 2, 64, causal, kFloat32, 1e-5, seed += 2);
  // Head dims that are not a multiple of 8 take the portable loops in float32 as well.
  for (const bool causal : {false, true})
    for (const int64_t Dh : {3, 12, 40})
      compare_sdpa(2, 70, 3, Dh, causal, kFloat32, 1e-5, seed += 2);
}

TEST_CASE("flash attention (CPU): float64 equals the materialised path") {
  uint64_t seed = 300;
  for (const bool causal : {false, true})
    for (const int64_t N : {1, 7, 130})
      compare_sdpa(2, N, 2, 16, causal, kFloat64, 1e-12, seed += 2);
}

TEST_CASE("flash attention (CPU): ops::attention equals its materialised kernel") {
  for (const int64_t N : {5, 50, 197}) {
    CAPTURE(N);
    const int64_t H = 3, Dh = 32, B = 2;
    const Tensor base = rand64({B, N, 3 * H * Dh}, 400 + N).detach().to(kFloat32);
    const Tensor w = rand64({B, N, H * Dh}, 500 + N).detach().to(kFloat32);
    Tensor a = base.detach().requires_grad_(), b = base.detach().requires_grad_();
    Tensor fa;
    {
      FlashModeGuard on(FlashMode::On);
      fa = ops::attention(a, H, 0.2);
    }
    Tensor probs;  // asked for: the materialised kernel (backends/cpu/attention.cpp)
    const Tensor fb = ops::attention(b, H, 0.2, &probs);
    CHECK(has_node(fa, "flash_attention"));
    CHECK(has_node(fb, "attention"));
    (fa * w).sum().backward();
    (fb * w).sum().backward();
    CHECK(rel_err(fa, fb) <= 1e-5);
    CHECK(rel_err(a.grad(), b.grad()) <= 1e-5);
  }
}

TEST_CASE("flash attention (CPU): float64 gradcheck through sdpa and ops::attention") {
  FlashModeGuard on(FlashMode::On);
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    const auto sdpa = [causal](const std::vector<Tensor>& in) {
      const auto p = parts_of(in[0], 2);
      Tensor out = ops::scaled_dot_product_attention(p[0], p[1], p[2], Tensor(), 0, causal);
      CHECK(has_node(out, "flash_attention"));
      return out;
    };
    check_grad(sdpa, {rand64({2, 5, 18}, 600)});
    check_grad(sdpa, {rand64({1, 9, 12}, 601, 2.0)});
  }
  const auto attn = [](const std::vector<Tensor>& in) {
    Tensor out = ops::attention(in[0], 2, 0.7);
    CHECK(has_node(out, "flash_attention"));
    return out;
  };
  check_grad(attn, {rand64({2, 6, 24}, 602)});
}

TEST_CASE("flash attention (CPU): the same bits on 1 thread and on 2") {
  // Every output and gradient element is written by one task in one order of summation.
  const Tensor base = rand64({3, 130, 3 * 2 * 32}, 800).detach().to(kFloat32);
  const Tensor dy = rand64({3, 2, 130, 32}, 801).detach().to(kFloat32);
  const FlashModeGuard on(FlashMode::On);
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    Run one, two;
    {
      Threads t(1);
      one = sdpa_on_parts(base, 2, causal, dy);
    }
    {
      Threads t(2);
      two = sdpa_on_parts(base, 2, causal, dy);
    }
    CHECK(one.flash);
    CHECK(one.out.to_vector<float>() == two.out.to_vector<float>());
    CHECK(one.grad.to_vector<float>() == two.grad.to_vector<float>());
  }
}

TEST_CASE("flash attention (CPU): the mode switch and the automatic rule") {
  const Tensor base = rand64({2, 64, 3 * 2 * 64}, 700).detach().to(kFloat32);
  const Tensor dy = rand64({2, 2, 64, 64}, 701).detach().to(kFloat32);
  {
    FlashModeGuard off(FlashMode::Off);
    CHECK_FALSE(sdpa_on_parts(base, 2, true, dy).flash);
    CHECK_FALSE(
        has_node(ops::attention(base.detach().requires_grad_(), 2, 0.1), "flash_attention"));
  }
  {
    FlashModeGuard aut(FlashMode::Auto);
    // Causal attention over 64 tokens or more takes flash attention where its AVX2 kernels run
    // (half the work skipped, no N x N tensors); what the rule says elsewhere is the rule's
    // (flash_attention.cpp, flash_wanted).
#if defined(__x86_64__) && defined(__GNUC__)
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const bool avx2 = false;
#endif
    CHECK(cpu::flash_wanted(64, 64, true) == avx2);
    CHECK(cpu::flash_wanted(1024, 64, true) == avx2);
    CHECK(sdpa_on_parts(base, 2, true, dy).flash == avx2);
    CHECK_FALSE(cpu::flash_wanted(197, 64, false));  // a ViT's attention stays materialised
    for (const int64_t N : {50, 197})
      CHECK(has_node(ops::attention(rand64({1, N, 3 * 6 * 64}, 702).requires_grad_(), 6, 0.1),
                     "flash_attention") == cpu::flash_wanted(N, 64, false));
  }
  // Other dtypes are declined (the materialised path then says what it takes).
  FlashModeGuard on(FlashMode::On);
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({1, 2, 12}, kInt64), 2, 1.0), "attention",
                       "int64");
}
