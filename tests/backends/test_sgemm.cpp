// Vitrine's own float32 GEMM (backends/cpu/sgemm.cpp) against a float64 reference: every edge of
// its tiling (rows not a multiple of 12, columns not a multiple of 32 or over one 512 block,
// depth over one 256 slice, threads' runs that split a strip), both layouts of A and of B, row
// strides wider than the rows, accumulation, bias, and the shapes it declines.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/sgemm.h"
#include "backends/gemm_info.h"
#include "test_util.h"

using namespace vitrine;

namespace {
struct Case {
  int64_t M, N, K;
  bool b_trans, accumulate;
  int64_t pad;        // extra floats at the end of each row of A, B and C
  bool bias = false;  // C = bias + A B (accumulate ignored)
  bool a_trans = false;
  // The rest of the epilogue: 1 a residual R (C = A B (+ bias) + R), 2 GELU into G (G = gelu(C),
  // C kept), 3 GELU's gradient (C = (A B) gelu'(P)), 4 A's row sums beside C (A transposed).
  int epilogue = 0;
  Activation act = Activation::GELU;  // what epilogues 2 and 3 apply
};

/// act(x) and act'(x) in double (GELUTanh: PyTorch's tanh formula).
double act_ref(Activation act, double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  switch (act) {
    case Activation::GELUTanh:
      return 0.5 * x * (1 + std::tanh(u));
    case Activation::ReLU:
      return x > 0 ? x : 0;
    case Activation::SiLU:
      return x / (1 + std::exp(-x));
    default:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  }
}
double act_grad_ref(Activation act, double x) {
  const double t = std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
  const double s = 1 / (1 + std::exp(-x));
  switch (act) {
    case Activation::GELUTanh:
      return 0.5 * (1 + t) +
             0.5 * x * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
    case Activation::ReLU:
      return x > 0 ? 1 : 0;
    case Activation::SiLU:
      return s * (1 + x * (1 - s));
    default:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  }
}

/// Runs one case; returns the largest |own - reference| / (1 + |reference|), or -1 when the
/// product was declined.
double run_case(const Case& t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t lda = (t.a_trans ? t.M : t.K) + t.pad, ldc = t.N + t.pad;
  const int64_t arows = t.a_trans ? t.K : t.M;
  const int64_t ldb = (t.b_trans ? t.K : t.N) + t.pad, brows = t.b_trans ? t.N : t.K;
  std::vector<float> a(arows * lda), b(brows * ldb), c(t.M * ldc), bias(t.N);
  // R, G and P: [M, N] with row stride N + 2 (another layout than C's)
  const int64_t lde = t.N + 2;
  std::vector<float> extra(t.M * lde), g(t.M * lde, 7.0f);
  for (float& v : extra) v = 2 * u(rng);
  for (float& v : bias) v = u(rng);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  for (float& v : c) v = u(rng);
  const std::vector<float> c0 = c;
  cpu::SgemmEpilogue ep;
  ep.bias = t.bias ? bias.data() : nullptr;
  if (t.epilogue == 1) ep.add = extra.data(), ep.ld_add = lde;
  if (t.epilogue == 2) ep.gelu_out = g.data(), ep.ld_gelu = lde;
  if (t.epilogue == 3) ep.gelu_pre = extra.data(), ep.ld_pre = lde;
  ep.act = t.act;
  std::vector<float> sums(t.M, 9.0f);
  if (t.epilogue == 4) ep.a_row_sums = sums.data();
  const bool starts_from_c = t.accumulate && !t.bias && t.epilogue != 1;
  if (!cpu::own_sgemm(t.M, t.N, t.K, a.data(), lda, t.a_trans, b.data(), ldb, t.b_trans, c.data(),
                      ldc, t.accumulate, ep))
    return -1;
  double worst = 0;
  for (int64_t m = 0; m < t.M; ++m) {
    for (int64_t n = 0; n < t.N; ++n) {
      double ref = (t.bias ? bias[n] : 0.0) + (starts_from_c ? c0[m * ldc + n] : 0.0) +
                   (t.epilogue == 1 ? extra[m * lde + n] : 0.0);
      for (int64_t k = 0; k < t.K; ++k) {
        const double bkn = t.b_trans ? b[n * ldb + k] : b[k * ldb + n];
        const double amk = t.a_trans ? a[k * lda + m] : a[m * lda + k];
        ref += amk * bkn;
      }
      const double got = c[m * ldc + n];
      if (t.epilogue == 2) {  // G = gelu(C), from the C that was written (C is checked too)
        worst =
            std::max(worst, std::abs(g[m * lde + n] - act_ref(t.act, got)) / (1 + std::abs(got)));
      }
      if (t.epilogue == 3) ref *= act_grad_ref(t.act, extra[m * lde + n]);
      if (t.epilogue == 4 && n == 0) {
        double sum = 0;
        for (int64_t k = 0; k < t.K; ++k) sum += a[k * lda + m];
        worst = std::max(worst, std::abs(sums[m] - sum) / (1 + std::abs(sum)));
      }
      worst = std::max(worst, std::abs(got - ref) / (1 + std::abs(ref)));
    }
    // The padding after each row of C is never written.
    for (int64_t n = t.N; n < ldc; ++n) REQUIRE(c[m * ldc + n] == c0[m * ldc + n]);
    for (int64_t n = t.N; n < lde; ++n) REQUIRE(g[m * lde + n] == 7.0f);
  }
  return worst;
}

bool own_gemm_on() { return cpu::gemm_policy() != cpu::GemmPolicy::Off; }
}  // namespace

TEST_CASE("own sgemm: every tile edge, both layouts of A and B, strides, accumulation, epilogues") {
  const std::vector<Case> cases = {
      {48, 32, 8, false, false, 0},     // one panel, four full strips
      {50, 384, 128, true, false, 0},   // a ViT qkv: 50 rows (4 strips + 2), weight transposed
      {97, 45, 300, false, true, 3},    // short strip, short panel (45 = 32 + 13), two depth slices
      {61, 16, 513, true, true, 5},     // one 16-column half, three depth slices
      {120, 257, 64, false, false, 1},  // nine panels, the last with one column
      {300, 130, 256, true, true, 0},   // depth exactly one slice
      {50, 45, 128, true, false, 0, true},          // a linear layer's bias, short panel
      {61, 70, 300, false, true, 2, true},          // bias once, over two depth slices
      {50, 45, 600, false, false, 1, false, true},  // A transposed (dW = dy^T x), B in place
      {130, 128, 700, true, true, 0, false, true},  // A transposed, B packed, accumulating
      {60, 1100, 40, false, false, 0},              // three column blocks (512 + 512 + 76)
      // the epilogues: a residual (with and without bias, over two depth slices, where it is
      // added once), GELU (fc1: bias, weight transposed; and over 512 + 76 columns and two
      // slices), GELU's gradient (dy W2: B in place, short panel; two slices)
      {50, 45, 128, true, false, 0, true, false, 1},
      {61, 70, 300, false, true, 2, false, false, 1},
      {50, 256, 128, true, false, 0, true, false, 2},
      {97, 588, 300, true, false, 1, true, false, 2},
      {50, 45, 128, false, false, 0, false, false, 3},
      {73, 130, 520, false, false, 3, false, false, 3},
      // A's row sums (dW = dy^T x and db): one slice, and three slices over two column blocks
      {50, 45, 128, false, false, 0, false, true, 4},
      {61, 600, 520, false, false, 2, false, true, 4},
      // runs that start or end inside a strip (11 strips of 128 rows, on two threads or more):
      // a weight gradient with its row sums (44 units: the 6th strip is split 2 + 2), fc1's
      // GELU and its gradient (33 units: split 1 + 2)
      {128, 128, 640, false, false, 0, false, true, 4},
      {128, 96, 300, true, false, 0, true, false, 2},
      {128, 96, 300, false, false, 0, false, false, 3},
      // the other activations of ops::mlp: fc1's (bias, weight transposed, two slices) and the
      // gradient at its output (B in place, short panel)
      {97, 588, 300, true, false, 1, true, false, 2, Activation::GELUTanh},
      {73, 130, 520, false, false, 3, false, false, 3, Activation::GELUTanh},
      {97, 588, 300, true, false, 1, true, false, 2, Activation::ReLU},
      {73, 130, 520, false, false, 3, false, false, 3, Activation::ReLU},
      {97, 588, 300, true, false, 1, true, false, 2, Activation::SiLU},
      {73, 130, 520, false, false, 3, false, false, 3, Activation::SiLU},
  };
  uint32_t seed = 1;
  for (const Case& t : cases) {
    CAPTURE(t.M);
    CAPTURE(t.N);
    CAPTURE(t.K);
    CAPTURE(t.b_trans);
    CAPTURE(t.accumulate);
    CAPTURE(t.bias);
    CAPTURE(t.a_trans);
    CAPTURE(t.epilogue);
    CAPTURE(static_cast<int>(t.act));
    const double err = run_case(t, seed++);
    if (!own_gemm_on()) {
      CHECK(err == -1);  // declined: OpenBLAS takes it
      continue;
    }
    // float32 sums of up to 700 products of numbers in [-1, 1]: a few ulps of the sum's size.
    CHECK(err >= 0);
    CHECK(err < 2e-5 * std::sqrt(static_cast<double>(t.K)));
  }
}

TEST_CASE("own sgemm: declines products it is not made for") {
  CHECK(run_case({47, 64, 64, false, false, 0}, 1) == -1);  // too few rows
  CHECK(run_case({64, 15, 64, false, false, 0}, 2) == -1);  // too few columns
  CHECK(run_case({64, 64, 7, false, false, 0}, 3) == -1);   // too shallow
  // row sums of a row-major A (only a transposed A's are summed as it is read)
  CHECK(run_case({64, 64, 64, false, false, 0, false, false, 4}, 5) == -1);
  // A weight over 2^20 floats: OpenBLAS's, unless OpenBLAS runs fallback kernels on this CPU
  // (or VITRINE_GEMM=own), when the own GEMM takes every shape.
  const double big = run_case({520, 2048, 520, true, false, 0}, 4);
  if (cpu::gemm_policy() == cpu::GemmPolicy::All) {
    CHECK(big >= 0);
    CHECK(big < 2e-5 * std::sqrt(520.0));
  } else {
    CHECK(big == -1);
  }
}

TEST_CASE("own sgemm: which products it takes, by VITRINE_GEMM, AVX-512 and OpenBLAS's kernels") {
  using cpu::GemmPolicy;
  // Current means made for this CPU's vector width: the AVX2 sets count only without AVX-512.
  CHECK(cpu::openblas_kernels_current("SkylakeX", true));
  CHECK(cpu::openblas_kernels_current("cooperlake", true));
  CHECK(cpu::openblas_kernels_current("SapphireRapids", true));
  CHECK(cpu::openblas_kernels_current("HASWELL", false));
  CHECK(cpu::openblas_kernels_current("Zen", false));
  CHECK_FALSE(cpu::openblas_kernels_current("Haswell", true));
  CHECK_FALSE(cpu::openblas_kernels_current("Zen", true));
  CHECK_FALSE(cpu::openblas_kernels_current("Prescott", true));
  CHECK_FALSE(cpu::openblas_kernels_current("Prescott", false));
  CHECK_FALSE(cpu::openblas_kernels_current("Zen2", false));
  CHECK_FALSE(cpu::openblas_kernels_current("", true));
  CHECK(cpu::gemm_policy_for("", true, "SkylakeX") == GemmPolicy::SmallWeights);
  CHECK(cpu::gemm_policy_for("", true, "Prescott") == GemmPolicy::All);  // OpenBLAS fell back
  CHECK(cpu::gemm_policy_for("own", true, "SkylakeX") == GemmPolicy::All);
  CHECK(cpu::gemm_policy_for("openblas", true, "Prescott") == GemmPolicy::Off);
  CHECK(cpu::gemm_policy_for("own", false, "Prescott") == GemmPolicy::Off);  // no AVX-512
  CHECK(cpu::gemm_policy_for("", false, "Haswell") == GemmPolicy::Off);
  CHECK(cpu::gemm_policy_for("", true, "Haswell") == GemmPolicy::All);  // AVX2 on AVX-512
  // This process's policy follows the same rule.
  __builtin_cpu_init();
  const char* env = std::getenv("VITRINE_GEMM");
  CHECK(cpu::gemm_policy() == cpu::gemm_policy_for(env ? env : "",
                                                   __builtin_cpu_supports("avx512f") != 0,
                                                   cpu_gemm_info().openblas_core));
}

TEST_CASE("own sgemm: the OpenBLAS rule on the machines met (Zen 5's Haswell is a fallback)") {
  // What Debian 12's OpenBLAS 0.3.21 chose on each machine (openblas_get_corename()), and what
  // the rule must make of it: the own GEMM takes every product when the kernels are narrower
  // than the CPU's vectors.
  using cpu::GemmPolicy;
  struct Machine {
    const char* name;
    int family;  // lscpu's "CPU family"
    bool avx512;
    const char* openblas_core;
    bool current;
    GemmPolicy policy;
  };
  const Machine machines[] = {
      {"AMD EPYC Zen 5", 26, true, "Haswell", false, GemmPolicy::All},
      {"AMD EPYC Zen 4", 25, true, "Cooperlake", true, GemmPolicy::SmallWeights},
      {"Intel Xeon Emerald Rapids", 6, true, "Prescott", false, GemmPolicy::All},
      {"Intel Xeon Skylake-SP", 6, true, "SkylakeX", true, GemmPolicy::SmallWeights},
      {"AMD EPYC Zen 3 (AVX2)", 25, false, "Zen", true, GemmPolicy::Off},
      {"Intel Haswell (AVX2)", 6, false, "Haswell", true, GemmPolicy::Off},
  };
  for (const Machine& m : machines) {
    CAPTURE(m.name);
    CAPTURE(m.family);
    CHECK(cpu::openblas_kernels_current(m.openblas_core, m.avx512) == m.current);
    CHECK(cpu::gemm_policy_for("", m.avx512, m.openblas_core) == m.policy);
  }
}

TEST_CASE(
    "own sgemm: linear (with a residual, and its dW and db) and matmul through it agree with "
    "float64") {
  // [4, 50, 128] @ W^T + b: the shape of a ViT block's qkv, large enough for the own GEMM; and
  // the backward's dX = dY W (B row-major) and dW = dY^T X (A transposed).
  Generator gen(7);
  Tensor x = ops::randn({4, 50, 128}, gen, kFloat64), w = ops::randn({384, 128}, gen, kFloat64),
         bias = ops::randn({384}, gen, kFloat64);
  Tensor ref = ops::linear(x, w, bias);
  Tensor y = ops::linear(x.to(kFloat32), w.to(kFloat32), bias.to(kFloat32));
  CHECK(ops::max(ops::abs(y.to(kFloat64) - ref)).item() < 1e-4);
  Tensor dy = ops::randn({200, 384}, gen, kFloat64);
  Tensor dx_ref = ops::matmul(dy, w);
  Tensor dx = ops::matmul(dy.to(kFloat32), w.to(kFloat32));
  CHECK(ops::max(ops::abs(dx.to(kFloat64) - dx_ref)).item() < 1e-4);
  Tensor x2 = x.reshape({200, 128});
  Tensor dw_ref = ops::matmul(dy.mT(), x2);
  Tensor dw = ops::matmul(dy.to(kFloat32).mT(), x2.to(kFloat32));
  CHECK(ops::max(ops::abs(dw.to(kFloat64) - dw_ref)).item() < 1e-3);  // sums of 200 products
  // A residual added as the tile is written (a block's proj), from a transposed view; and the
  // backward's dW with db summed beside it (no create_graph), against float64.
  Tensor r = ops::randn({384, 4, 50}, gen, kFloat64).permute({1, 2, 0});
  Tensor yr = ops::linear(x.to(kFloat32), w.to(kFloat32), bias.to(kFloat32), r.to(kFloat32));
  CHECK(ops::max(ops::abs(yr.to(kFloat64) - (ref + r))).item() < 1e-4);
  Tensor wl = w.to(kFloat32).requires_grad_(), bl = bias.to(kFloat32).requires_grad_();
  ops::sum(ops::linear(x.to(kFloat32), wl, bl) * dy.reshape({4, 50, 384}).to(kFloat32)).backward();
  CHECK(ops::max(ops::abs(wl.grad().to(kFloat64) - dw_ref)).item() < 1e-3);
  CHECK(ops::max(ops::abs(bl.grad().to(kFloat64) - ops::sum(dy, {0}))).item() < 1e-3);
}

TEST_CASE(
    "own sgemm, fixed rows: each row the same bits at any M (one row included), on 1 or 2 "
    "threads, with bias and GELU") {
  // Batch-invariant mode's products on a whole batch (Backend::GemmEpilogue::fixed_rows): 100
  // rows at once against each row alone, rows 3..9 as a product of 7, and 1 thread against 2.
  // N 45 (a short panel), K 300 (two depth slices), B a transposed weight; A row-major and
  // transposed.
  const int64_t M = 100, N = 45, K = 300;
  CHECK_FALSE(cpu::own_sgemm_takes_any_rows(15, K));  // (fewer columns than it is made for)
  CHECK_FALSE(cpu::own_sgemm_takes_any_rows(N, 7));
  if (cpu::gemm_policy() == cpu::GemmPolicy::SmallWeights)
    CHECK_FALSE(cpu::own_sgemm_takes_any_rows(2048, 1024));  // (over 2^20 floats)
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(M * K), b(N * K), bias(N);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  for (float& v : bias) v = u(rng);
  if (!cpu::own_sgemm_takes_any_rows(N, K)) {  // (no AVX-512, or VITRINE_GEMM=openblas)
    std::vector<float> c(M * N);
    CHECK_FALSE(
        cpu::own_sgemm_fixed_rows(M, N, K, a.data(), K, false, b.data(), K, true, c.data(), N, {}));
    return;
  }
  const auto same_bits = [&](const std::vector<float>& x, const std::vector<float>& y, int64_t m0,
                             int64_t m1) {
    return std::memcmp(x.data() + m0 * N, y.data() + m0 * N, (m1 - m0) * N * sizeof(float)) == 0;
  };
  for (bool a_trans : {false, true}) {
    CAPTURE(a_trans);
    // Row m of A: a[m * K + k], or (transposed) a[k * M + m], the same storage for every call.
    const auto product = [&](int64_t m0, int64_t rows, std::vector<float>& c,
                             std::vector<float>& g) {
      cpu::SgemmEpilogue ep;
      ep.bias = bias.data();
      ep.gelu_out = g.data() + m0 * N, ep.ld_gelu = N;
      const float* am = a_trans ? a.data() + m0 : a.data() + m0 * K;
      return cpu::own_sgemm_fixed_rows(rows, N, K, am, a_trans ? M : K, a_trans, b.data(), K, true,
                                       c.data() + m0 * N, N, ep);
    };
    std::vector<float> c2(M * N), g2(M * N), c1(M * N), g1(M * N), cr(M * N), gr(M * N), c7(M * N),
        g7(M * N);
    {
      const vt_test::Threads two(2);
      REQUIRE(product(0, M, c2, g2));
    }
    {
      const vt_test::Threads one(1);
      REQUIRE(product(0, M, c1, g1));
      for (int64_t m = 0; m < M; ++m) REQUIRE(product(m, 1, cr, gr));
      REQUIRE(product(3, 7, c7, g7));
    }
    CHECK(same_bits(c1, c2, 0, M));
    CHECK(same_bits(g1, g2, 0, M));
    CHECK(same_bits(cr, c2, 0, M));
    CHECK(same_bits(gr, g2, 0, M));
    CHECK(same_bits(c7, c2, 3, 10));
    CHECK(same_bits(g7, g2, 3, 10));
  }
}
