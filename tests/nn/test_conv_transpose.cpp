// Transposed and 1-D convolutions and the convolutions' padding modes (nn/conv.h,
// ops/conv_transpose.h) against PyTorch 1.13 (tests/fixtures/conv_transpose.json, made by
// make_conv_transpose_fixtures.py): each case's output and the input, weight and bias gradients
// of sum(y * r) in float64 at 1e-10 and in float32 at 1e-5 under every convolution algorithm;
// conv_transpose2d against zero-stuffing and a flipped kernel (an independent reference) on
// shapes that reach the CPU's fast input-gradient paths; float64 gradchecks; bad arguments and
// their messages; and (no assertion) ConvTranspose2d's time against the conv2d it is the
// gradient of.
#include <chrono>
#include <memory>

#include "backends/conv_algorithm.h"
#include "nn/conv.h"
#include "ops/conv_transpose.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "conv_transpose.json";

int64_t get(const json& o, const char* key, int64_t fallback) {
  return o.contains(key) ? o[key].get<int64_t>() : fallback;
}

/// An int-or-pair option as a Size2.
nn::Size2 size2(const json& o, const char* key, int64_t fallback) {
  if (!o.contains(key)) return fallback;
  const json& v = o[key];
  if (v.is_number()) return v.get<int64_t>();
  return {v[0].get<int64_t>(), v[1].get<int64_t>()};
}

/// The case's module from its torch.nn class name and keyword options.
std::shared_ptr<nn::Module> make(const json& c) {
  const std::string m = c["module"];
  const json& o = c["options"];
  const int64_t in = o["in_channels"], out = o["out_channels"];
  const bool bias = o.value("bias", true);
  const int64_t groups = get(o, "groups", 1);
  const std::string mode = o.value("padding_mode", std::string("zeros"));
  if (m == "ConvTranspose2d")
    return std::make_shared<nn::ConvTranspose2d>(
        nn::ConvTranspose2dOptions(in, out, size2(o, "kernel_size", 1))
            .stride(size2(o, "stride", 1))
            .padding(size2(o, "padding", 0))
            .output_padding(size2(o, "output_padding", 0))
            .groups(groups)
            .bias(bias)
            .dilation(size2(o, "dilation", 1)));
  if (m == "ConvTranspose1d")
    return std::make_shared<nn::ConvTranspose1d>(
        in, out, o["kernel_size"].get<int64_t>(), get(o, "stride", 1), get(o, "padding", 0),
        get(o, "output_padding", 0), groups, bias, get(o, "dilation", 1));
  if (m == "Conv1d") {
    const nn::ConvPadding padding = o.contains("padding") && o["padding"].is_string()
                                        ? nn::ConvPadding(o["padding"].get<std::string>())
                                        : nn::ConvPadding(get(o, "padding", 0));
    return std::make_shared<nn::Conv1d>(in, out, o["kernel_size"].get<int64_t>(),
                                        get(o, "stride", 1), padding, get(o, "dilation", 1), groups,
                                        bias, mode);
  }
  REQUIRE(m == "Conv2d");
  nn::Conv2dOptions opt(in, out, size2(o, "kernel_size", 1));
  opt.stride(size2(o, "stride", 1)).dilation(size2(o, "dilation", 1)).groups(groups).bias(bias);
  opt.padding_mode(mode);
  if (o.contains("padding") && o["padding"].is_string())
    opt.padding(o["padding"].get<std::string>().c_str());
  else
    opt.padding(size2(o, "padding", 0));
  return std::make_shared<nn::Conv2d>(opt);
}

/// One case in dtype: output and every gradient against PyTorch's.
void check_case(const std::string& name, DType dtype, double tol) {
  INFO(name << ", " << dtype_name(dtype) << ", " << static_cast<int>(conv_algorithm()));
  const json& c = fixture_case(kFile, name);
  auto m = make(c);
  m->to(dtype);
  json state = {{"weight", c["weight"]}};
  if (c.contains("bias")) state["bias"] = c["bias"];
  load_fixture_state(*m, state);
  Tensor x = fixture_tensor(c["input"], dtype).requires_grad_();
  Tensor y = (*m)(x);
  CHECK(y.dtype() == dtype);
  Tensor want = fixture_tensor(c["output"]);
  REQUIRE(y.shape() == want.shape());
  check_close(y, want.to_vector<double>(), tol, tol);
  ops::sum(y * fixture_tensor(c["r"], dtype)).backward();
  check_close(x.grad(), fixture_tensor(c["grad"]).to_vector<double>(), tol, tol);
  const auto params = m->named_parameters();
  for (const auto& item : params) {
    const auto& pname = item.first;
    const auto& p = item.second;
    INFO(pname);
    check_close(p.grad(), fixture_tensor(c[pname + "_grad"]).to_vector<double>(), tol, tol);
  }
}

/// Every fixture case whose name starts with prefix, in dtype; returns how many ran.
int check_cases(const std::string& prefix, DType dtype, double tol) {
  int n = 0;
  for (const auto& [name, c] : fixture_json(kFile).at("cases").items())
    if (name.rfind(prefix, 0) == 0) {
      check_case(name, dtype, tol);
      ++n;
    }
  return n;
}

/// Every convolution algorithm in turn (ConvAlgorithm), Auto again at the end.
template <class F>
void for_each_algorithm(F&& f) {
  for (const char* a : {"auto", "batched", "direct", "implicit", "per-image"}) {
    set_conv_algorithm(a);
    f();
  }
  set_conv_algorithm("auto");
}

/// x [B, C, H, W] with stride - 1 zeros between its pixels: [B, C, (H - 1) s + 1, (W - 1) s + 1]
/// (ops, so gradients flow).
Tensor stuff(const Tensor& x, int64_t s) {
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  Tensor x6 = ops::reshape(x, {B, C, H, 1, W, 1});
  x6 = ops::pad(x6, {0, s - 1, 0, 0, 0, s - 1});
  Tensor z = ops::reshape(x6, {B, C, H * s, W * s});
  return ops::slice(ops::slice(z, 2, 0, (H - 1) * s + 1), 3, 0, (W - 1) * s + 1);
}

/// conv_transpose2d (groups 1) by zero-stuffing: conv2d of the stuffed, padded x with the kernel
/// flipped and its channel dims swapped (needs dilation (k - 1) >= padding).
Tensor transpose_by_stuffing(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s,
                             int64_t p, int64_t op, int64_t d) {
  const int64_t k = w.size(2), e = d * (k - 1) - p;
  std::vector<int64_t> rev;
  for (int64_t i = k - 1; i >= 0; --i) rev.push_back(i);
  const Tensor idx = ops::from_vector(rev);
  Tensor wf = ops::index_select(ops::index_select(w, 2, idx), 3, idx);
  wf = ops::transpose(wf, 0, 1);
  Tensor z = ops::pad(stuff(x, s), {e, e + op, e, e + op});
  return ops::conv2d(z, wf, b, {1, 1}, {0, 0}, {d, d});
}

double seconds_of(const std::function<void()>& f, int reps) {
  f();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

TEST_CASE("conv transpose: ConvTranspose2d and ConvTranspose1d against PyTorch in float64") {
  CHECK(check_cases("ct2d_", kFloat64, 1e-10) == 6);
  CHECK(check_cases("ct1d_", kFloat64, 1e-10) == 2);
  set_conv_algorithm("batched");  // the backend's batched float64 kernels
  CHECK(check_cases("ct", kFloat64, 1e-10) == 8);
  set_conv_algorithm("auto");
}

TEST_CASE("conv transpose: Conv1d, padding modes and same or valid against PyTorch in float64") {
  CHECK(check_cases("c1d_", kFloat64, 1e-10) == 9);
  CHECK(check_cases("c2d_", kFloat64, 1e-10) == 6);
}

TEST_CASE("conv transpose: every case in float32 at 1e-5 under every convolution algorithm") {
  for_each_algorithm([] { CHECK(check_cases("", kFloat32, 1e-5) == 23); });
}

TEST_CASE("conv transpose: conv_transpose2d against zero-stuffing on the fast paths") {
  struct Shape {
    int64_t B, Cin, Cout, H, k, s, p, op, d;
  };
  // A DCGAN layer (k 4, s 2, p 1), a 3x3 of 64 channels at stride 1 (Winograd's input gradient),
  // odd sizes with output_padding and dilation.
  for (const Shape& sh : {Shape{2, 32, 16, 5, 4, 2, 1, 0, 1}, Shape{2, 64, 64, 6, 3, 1, 1, 0, 1},
                          Shape{3, 5, 7, 7, 3, 3, 2, 2, 1}, Shape{2, 6, 4, 5, 3, 2, 1, 1, 2}}) {
    INFO(sh.Cin << "->" << sh.Cout << " " << sh.H << " k" << sh.k << " s" << sh.s << " p" << sh.p
                << " op" << sh.op << " d" << sh.d);
    Generator gen(7);
    const Tensor x0 = ops::randn({sh.B, sh.Cin, sh.H, sh.H + 1}, gen);
    const Tensor w0 = ops::randn({sh.Cin, sh.Cout, sh.k, sh.k}, gen);
    const Tensor b0 = ops::randn({sh.Cout}, gen);
    // The reference in float64.
    Tensor xr = ops::to_dtype(x0, kFloat64).requires_grad_();
    Tensor wr = ops::to_dtype(w0, kFloat64).requires_grad_();
    Tensor br = ops::to_dtype(b0, kFloat64).requires_grad_();
    set_conv_algorithm("per-image");
    Tensor yr = transpose_by_stuffing(xr, wr, br, sh.s, sh.p, sh.op, sh.d);
    const Tensor r = ops::randn(yr.shape(), gen, kFloat64);
    ops::sum(yr * r).backward();
    for_each_algorithm([&] {
      Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(),
             b = b0.detach().requires_grad_();
      Tensor y = ops::conv_transpose2d(x, w, b, {sh.s, sh.s}, {sh.p, sh.p}, {sh.op, sh.op}, 1,
                                       {sh.d, sh.d});
      REQUIRE(y.shape() == yr.shape());
      ops::sum(y * ops::to_dtype(r, kFloat32)).backward();
      check_close(ops::to_dtype(y, kFloat64), yr, 1e-4, 1e-4);
      check_close(ops::to_dtype(x.grad(), kFloat64), xr.grad(), 1e-4, 1e-4);
      check_close(ops::to_dtype(w.grad(), kFloat64), wr.grad(), 1e-3, 1e-4);
      check_close(ops::to_dtype(b.grad(), kFloat64), br.grad(), 1e-3, 1e-4);
    });
  }
}

TEST_CASE("conv transpose: float64 gradchecks") {
  // conv_transpose2d: stride, padding, output_padding past the stride (below the dilation),
  // groups, bias; its second derivative through dx (a conv2d) as well.
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::conv_transpose2d(in[0], in[1], in[2], {2, 1}, {1, 0}, {1, 2}, 2, {1, 3});
      },
      {rand64({2, 4, 3, 2}, 1), rand64({4, 3, 2, 2}, 2), rand64({6}, 3)});
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::conv_transpose1d(in[0], in[1], Tensor(), 3, 1, 2, 1, 1);
      },
      {rand64({2, 3, 4}, 4), rand64({3, 2, 3}, 5)});
  check_grad(
      [](const std::vector<Tensor>& in) { return ops::conv1d(in[0], in[1], in[2], 2, 1, 2, 1); },
      {rand64({2, 3, 9}, 6), rand64({4, 3, 3}, 7), rand64({4}, 8)});
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::circular_pad(in[0], {2, 1, 1, 3});
      },
      {rand64({2, 3, 4}, 9)});
  for (const char* mode : {"zeros", "reflect", "replicate", "circular"}) {
    INFO(mode);
    nn::Conv1d c1(3, 2, 4, 1, "same", 1, 1, true, mode);
    c1.to(kFloat64);
    check_grad([&](const std::vector<Tensor>& in) { return c1(in[0]); }, {rand64({2, 3, 7}, 10)});
    nn::Conv2d c2(nn::Conv2dOptions(2, 3, {3, 2}).padding({1, 2}).stride(2).padding_mode(mode));
    c2.to(kFloat64);
    check_grad([&](const std::vector<Tensor>& in) { return c2(in[0]); },
               {rand64({1, 2, 5, 4}, 11)});
  }
  // dx = conv2d(dy, W) differentiates again: the gradient of a gradient.
  check_grad(
      [](const std::vector<Tensor>& in) {
        Tensor y = ops::conv_transpose2d(in[0], in[1], Tensor(), {2, 2}, {1, 1});
        const auto g = vitrine::grad({ops::sum(ops::mul(y, y))}, {in[0]}, {}, false, true);
        return g[0];
      },
      {rand64({1, 2, 3, 3}, 12), rand64({2, 2, 3, 3}, 13)});
}

TEST_CASE("conv transpose: module shapes, parameters, init bounds and repr") {
  Generator gen(3);
  nn::ConvTranspose2d ct(16, 8, 4, 2, 1, 0, 2, true, 1, gen);
  CHECK(ct.weight.shape() == Dims{16, 4, 4, 4});
  CHECK(ct.bias.shape() == Dims{8});
  // fan_in = weight.size(1) kh kw = 64: |w| <= 1 / sqrt(64), as PyTorch's _ConvNd.
  CHECK(ops::max(ops::abs(ct.weight)).item<double>() <= 0.125 + 1e-7);
  CHECK(ops::max(ops::abs(ct.bias)).item<double>() <= 0.125 + 1e-7);
  CHECK(ct(ops::zeros({2, 16, 8, 8})).shape() == Dims{2, 8, 16, 16});
  CHECK(ct.extra_repr() == "16, 8, kernel_size=4x4, stride=2x2, padding=1x1, groups=2");
  nn::ConvTranspose1d ct1(4, 6, 3, 2, 1, 1);
  CHECK(ct1.weight.shape() == Dims{4, 6, 3});
  CHECK(ct1(ops::zeros({1, 4, 5})).shape() == Dims{1, 6, 10});
  nn::Conv1d c1(4, 6, 5, 1, nn::kSame, 1, 2, false, "reflect");
  CHECK(c1.weight.shape() == Dims{6, 2, 5});
  CHECK(!c1.bias.defined());
  CHECK(c1(ops::zeros({2, 4, 11})).shape() == Dims{2, 6, 11});
  CHECK(c1.extra_repr() ==
        "4, 6, kernel_size=5, stride=1, groups=2, bias=False, padding=same, padding_mode=reflect");
  nn::Conv1d valid(nn::Conv1dOptions(2, 3, 3).padding("valid"));
  CHECK(valid(ops::zeros({1, 2, 7})).shape() == Dims{1, 3, 5});
  nn::Conv2d same(
      nn::Conv2dOptions(3, 4, {3, 4}).dilation(2).padding("same").padding_mode("circular"));
  CHECK(same(ops::zeros({1, 3, 9, 10})).shape() == Dims{1, 4, 9, 10});
  CHECK(same.type_name() == "Conv2d");
  CHECK(same.named_parameters().size() == 2);
}

TEST_CASE("conv transpose: bad arguments name the op, what was given and what was expected") {
  const Tensor x = ops::zeros({1, 4, 5, 5}), w = ops::zeros({4, 2, 3, 3});
  CHECK_ERROR_CONTAINS(ops::conv_transpose2d(x, w, Tensor(), {2, 2}, {0, 0}, {2, 0}),
                       "conv_transpose2d", "output_padding (2, 0)", "stride (2, 2)",
                       "dilation (1, 1)");
  CHECK_ERROR_CONTAINS(ops::conv_transpose2d(x, w, Tensor(), {1, 1}, {0, 0}, {0, 1}, 1, {1, 1}),
                       "output_padding (0, 1)", "smaller than either stride");
  CHECK_ERROR_CONTAINS(ops::conv_transpose2d(ops::zeros({1, 3, 5, 5}), w), "conv_transpose2d",
                       "input has 3 channels", "[4, 2, 3, 3]");
  CHECK_ERROR_CONTAINS(ops::conv_transpose2d(x, w, Tensor(), {1, 1}, {0, 0}, {0, 0}, 3),
                       "groups (3)", "input channels (4");
  CHECK_ERROR_CONTAINS(ops::conv_transpose2d(ops::zeros({4, 5, 5}), w), "conv_transpose2d", "4-D",
                       "[4, 5, 5]");
  CHECK_ERROR_CONTAINS(ops::conv_transpose2d(x, w, ops::zeros({3})), "bias", "[2]", "[3]");
  CHECK_ERROR_CONTAINS(ops::conv1d(ops::zeros({4, 5}), ops::zeros({2, 4, 3})), "conv1d", "3-D",
                       "[4, 5]");
  CHECK_ERROR_CONTAINS(ops::conv_transpose1d(ops::zeros({1, 4, 5}), ops::zeros({4, 2})),
                       "conv_transpose1d", "weight", "[Cin, Cout / groups, k]");
  CHECK_ERROR_CONTAINS(nn::ConvTranspose2d(5, 4, 3, 1, 0, 0, 2), "ConvTranspose2d",
                       "in_channels (5)", "divisible by groups (2)");
  CHECK_ERROR_CONTAINS(nn::ConvTranspose2d(4, 5, 3, 1, 0, 0, 2), "out_channels (5)");
  CHECK_ERROR_CONTAINS(nn::ConvTranspose2d(4, 4, 3, 2, 0, 2), "ConvTranspose2d",
                       "output_padding (2, 2)", "stride (2, 2)");
  CHECK_ERROR_CONTAINS(nn::ConvTranspose1d(4, 4, 3, 1, 0, 1), "ConvTranspose1d",
                       "output_padding (1)");
  CHECK_ERROR_CONTAINS(nn::Conv1d(4, 4, 3, 2, "same"), "Conv1d", "padding='same'",
                       "strided convolutions", "stride [2]");
  CHECK_ERROR_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 4, 3).stride(2).padding(nn::kSame)),
                       "Conv2d", "padding='same'");
  CHECK_ERROR_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 4, 3).padding("full")),
                       "invalid padding string 'full'");
  CHECK_ERROR_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 4, 3).padding_mode("mirror")), "Conv2d",
                       "padding_mode", "'mirror'");
  CHECK_ERROR_CONTAINS(nn::Conv1d(4, 4, 3, 1, "full"), "invalid padding string 'full'", "same");
  CHECK_ERROR_CONTAINS(nn::Conv1d(4, 4, 3, 1, 1, 1, 1, true, "mirror"), "padding_mode", "'mirror'",
                       "circular");
  CHECK_ERROR_CONTAINS(ops::circular_pad(ops::zeros({1, 2, 3}), {4, 0}), "circular_pad", "(4, 0)",
                       "size 3");
  nn::Conv1d c(3, 2, 3);
  CHECK_ERROR_CONTAINS(c(ops::zeros({3, 7})), "conv1d", "3-D");
}

TEST_CASE("conv transpose: ConvTranspose2d's time against the conv2d it is the gradient of") {
  // A DCGAN generator layer: batch 64, 128 -> 64 channels, 8x8 -> 16x16, kernel 4, stride 2,
  // padding 1; its forward is the input gradient of Conv2d(64, 128, 4, 2, 1) on 16x16 images.
  // Printed, not asserted (the suite's machines vary).
  Generator gen(1);
  nn::ConvTranspose2d ct(128, 64, 4, 2, 1, 0, 1, true, 1, gen);
  nn::Conv2d conv(64, 128, 4, 2, 1, true, gen);
  const Tensor x = ops::randn({64, 128, 8, 8}, gen), z = ops::randn({64, 64, 16, 16}, gen);
  NoGradGuard no_grad;
  const double t_ct = seconds_of([&] { (void)ct(x); }, 5);
  const double t_conv = seconds_of([&] { (void)conv(z); }, 5);
  MESSAGE("ConvTranspose2d(128, 64, 4, 2, 1) on [64, 128, 8, 8]: "
          << t_ct * 1e3 << " ms; Conv2d(64, 128, 4, 2, 1) on [64, 64, 16, 16]: " << t_conv * 1e3
          << " ms; ratio " << t_ct / t_conv);
  CHECK(t_ct > 0);
}
