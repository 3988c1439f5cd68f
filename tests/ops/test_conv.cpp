// conv2d: forward and gradients against PyTorch (tests/fixtures/conv_interp.json, made by
// make_conv_interp_fixtures.py), hand-worked values, float64 gradchecks, and argument errors.
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {

const char* kFile = "conv_interp.json";

const nlohmann::json& case_json(const std::string& name) { return fixture_case(kFile, name); }

/// conv2d with the case's stride and padding; inputs are [x, weight] or [x, weight, bias].
Fn conv_fn(const std::string& name) {
  const auto& p = case_json(name).at("params");
  std::pair<int64_t, int64_t> stride{p.at("stride")[0], p.at("stride")[1]};
  std::pair<int64_t, int64_t> padding{p.at("padding")[0], p.at("padding")[1]};
  std::pair<int64_t, int64_t> dilation{1, 1};
  if (p.contains("dilation")) dilation = {p.at("dilation")[0], p.at("dilation")[1]};
  const int64_t groups = p.value("groups", 1);
  return [stride, padding, dilation, groups](const V& in) {
    return ops::conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), stride, padding, dilation,
                       groups);
  };
}

/// Backward of sum(fn(inputs) * r) against PyTorch's gradients for every input.
void check_backward(const std::string& name) {
  RefCase c = load_case(kFile, name);
  for (Tensor& t : c.inputs) t.requires_grad_();
  Tensor r = fixture_tensor(case_json(name).at("r"));
  ops::sum(conv_fn(name)(c.inputs) * r).backward();
  const auto& grads = case_json(name).at("grads");
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    INFO("input " << i);
    check_close(c.inputs[i].grad(), fixture_tensor(grads[i]), 1e-10, 1e-10);
  }
}

}  // namespace

TEST_CASE("conv2d: forward") {
  check_forward(kFile, "conv2d_1x1", conv_fn("conv2d_1x1"), 1e-10, 1e-5);
  check_forward(kFile, "conv2d_patch4", conv_fn("conv2d_patch4"), 1e-10, 1e-5);
  // Hand-worked: a 3x3 box filter of ones over ones with padding 1 counts each pixel's neighbours.
  Tensor y =
      ops::conv2d(ops::ones({1, 1, 3, 3}), ops::ones({1, 1, 3, 3}), Tensor(), {1, 1}, {1, 1});
  CHECK(y.shape() == Dims{1, 1, 3, 3});
  check_close(y, {4, 6, 4, 6, 9, 6, 4, 6, 4});
  // Bias is added once per output channel.
  Tensor yb = ops::conv2d(ops::ones({1, 1, 3, 3}), ops::ones({2, 1, 3, 3}), ops::tensor({10, -1}));
  check_close(yb, {19, 8});
}

TEST_CASE("conv2d: stride and padding") {
  check_forward(kFile, "conv2d_s2_p1", conv_fn("conv2d_s2_p1"), 1e-10, 1e-5);
  check_forward(kFile, "conv2d_rect_nobias", conv_fn("conv2d_rect_nobias"), 1e-10, 1e-5);
  // Stride 2 over the padded 3x3 box: the four corner windows each see 4 pixels.
  Tensor y =
      ops::conv2d(ops::ones({1, 1, 3, 3}), ops::ones({1, 1, 3, 3}), Tensor(), {2, 2}, {1, 1});
  check_close(y, {4, 4, 4, 4});
  // out = (in + 2 pad - k) / stride + 1 per dim.
  Tensor z =
      ops::conv2d(ops::zeros({2, 1, 7, 6}), ops::zeros({4, 1, 3, 2}), Tensor(), {2, 3}, {1, 0});
  CHECK(z.shape() == Dims{2, 4, 4, 2});
  check_grad_at(kFile, "conv2d_rect_nobias", conv_fn("conv2d_rect_nobias"));
}

TEST_CASE("conv2d: backward matches PyTorch") {
  for (const char* name : {"conv2d_s2_p1", "conv2d_patch4", "conv2d_rect_nobias", "conv2d_1x1"}) {
    INFO(name);
    check_backward(name);
  }
}

TEST_CASE("conv2d: gradcheck") {
  auto fn = [](const V& in) { return ops::conv2d(in[0], in[1], in[2], {1, 1}, {1, 1}); };
  check_grad(fn, {rand64({2, 2, 4, 4}, 1), rand64({3, 2, 3, 3}, 2), rand64({3}, 3)});
  // Degenerate GEMM shapes: one output position (L = 1) and one output channel; K = 1.
  auto valid = [](const V& in) { return ops::conv2d(in[0], in[1], in[2]); };
  check_grad(valid, {rand64({2, 3, 3, 3}, 4), rand64({1, 3, 3, 3}, 5), rand64({1}, 6)});
  check_grad(valid, {rand64({2, 1, 3, 2}, 7), rand64({4, 1, 1, 1}, 8), rand64({4}, 9)});
  check_grad_at(kFile, "conv2d_s2_p1", conv_fn("conv2d_s2_p1"));
  check_grad_at(kFile, "conv2d_patch4", conv_fn("conv2d_patch4"));
  // Output maps of 12x12 = 144 positions go image by image (L >= 128), the smaller ones above
  // side by side (ops/conv.cpp): both ways are checked, and agree with each other.
  check_grad(fn, {rand64({2, 2, 12, 12}, 10), rand64({3, 2, 3, 3}, 11), rand64({3}, 12)});
  Tensor x = rand64({3, 2, 12, 12}, 13).detach(), w = rand64({4, 2, 3, 3}, 14).detach();
  Tensor b = rand64({4}, 15).detach();
  Tensor whole = ops::conv2d(x, w, b, {1, 1}, {1, 1});  // L = 144: image by image
  Tensor top = ops::conv2d(ops::slice(x, 2, 0, 7), w, b, {1, 1}, {1, 1});  // L = 84: side by side
  check_close(ops::slice(whole, 2, 0, 6), ops::slice(top, 2, 0, 6), 1e-12, 1e-12);
}

TEST_CASE("conv2d: a batch in several side-by-side chunks equals the images one at a time") {
  // K = 49 * 9 = 441 and L = 100: two images per chunk (ops/conv.cpp's kWideBudget), so a batch
  // of 5 goes in chunks of 2, 2 and 1.
  Tensor x = rand64({5, 49, 10, 10}, 16).detach().requires_grad_();
  Tensor w = rand64({3, 49, 3, 3}, 17).detach().requires_grad_();
  Tensor b = rand64({3}, 18).detach().requires_grad_();
  Tensor dy = rand64({5, 3, 10, 10}, 19).detach();
  Tensor y = ops::conv2d(x, w, b, {1, 1}, {1, 1});
  auto g = grad({y}, {x, w, b}, {dy});
  Tensor dw_sum = ops::zeros_like(w), db_sum = ops::zeros_like(b);
  for (int64_t i = 0; i < 5; ++i) {
    Tensor xi = ops::slice(x, 0, i, i + 1).detach().requires_grad_();
    Tensor wi = w.detach().requires_grad_(), bi = b.detach().requires_grad_();
    Tensor yi = ops::conv2d(xi, wi, bi, {1, 1}, {1, 1});
    auto gi = grad({yi}, {xi, wi, bi}, {ops::slice(dy, 0, i, i + 1)});
    check_close(ops::slice(y, 0, i, i + 1), yi, 1e-12, 1e-12);
    check_close(ops::slice(g[0], 0, i, i + 1), gi[0], 1e-12, 1e-12);
    dw_sum = dw_sum + gi[1];
    db_sum = db_sum + gi[2];
  }
  check_close(g[1], dw_sum, 1e-10, 1e-10);
  check_close(g[2], db_sum, 1e-10, 1e-10);
}

TEST_CASE("conv2d: patch embedding (input without grad) gets weight and bias gradients only") {
  RefCase c = load_case(kFile, "conv2d_patch4");
  c.inputs[1].requires_grad_();
  c.inputs[2].requires_grad_();
  Tensor r = fixture_tensor(case_json("conv2d_patch4").at("r"));
  ops::sum(conv_fn("conv2d_patch4")(c.inputs) * r).backward();
  CHECK_FALSE(c.inputs[0].grad().defined());
  const auto& grads = case_json("conv2d_patch4").at("grads");
  check_close(c.inputs[1].grad(), fixture_tensor(grads[1]), 1e-10, 1e-10);
  check_close(c.inputs[2].grad(), fixture_tensor(grads[2]), 1e-10, 1e-10);
}

TEST_CASE("conv2d: non-contiguous input") {
  Tensor x = rand64({2, 4, 5, 3}, 4).detach();  // permuted to [2, 3, 4, 5]
  Tensor xp = x.permute({0, 3, 1, 2});
  Tensor w = rand64({2, 3, 2, 2}, 5).detach();
  check_close(ops::conv2d(xp, w, Tensor(), {1, 2}, {1, 1}),
              ops::conv2d(xp.contiguous(), w, Tensor(), {1, 2}, {1, 1}), 1e-12, 1e-12);
}

TEST_CASE("conv2d: double backward is refused with a clear message") {
  Tensor x = rand64({1, 1, 3, 3}, 6), w = rand64({1, 1, 2, 2}, 7);
  Tensor y = ops::sum(ops::conv2d(x, w, Tensor()));
  auto g = grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  CHECK_ERROR_CONTAINS(ops::sum(g[0]).backward(), "conv2d_backward", "double backward");
}

TEST_CASE("conv2d: bad input") {
  Tensor x = ops::zeros({1, 2, 5, 5}), w = ops::zeros({3, 2, 3, 3});
  CHECK_ERROR_CONTAINS(ops::conv2d(ops::zeros({2, 5, 5}), w, Tensor()), "conv2d", "4-D",
                       "[2, 5, 5]");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, ops::zeros({3, 2, 3}), Tensor()), "conv2d", "weight",
                       "[3, 2, 3]");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, ops::zeros({3, 4, 3, 3}), Tensor()), "conv2d", "2 channels",
                       "expects 4", "[1, 2, 5, 5]", "[3, 4, 3, 3]");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, ops::zeros({3, 2, 7, 3}), Tensor()), "conv2d",
                       "larger than the padded input", "7x3");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, ops::zeros({3, 2, 8, 3}), Tensor(), {1, 1}, {1, 0}), "conv2d",
                       "8x3", "7x5");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w.to(kFloat64), Tensor()), "conv2d", "float32", "float64");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w, Tensor(), {0, 1}), "conv2d", "stride", "(0, 1)");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w, Tensor(), {1, 1}, {-1, 0}), "conv2d", "padding");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w, ops::zeros({2})), "conv2d", "bias", "[3]", "[2]");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w, ops::zeros({3}, kFloat64)), "conv2d", "float64");
  CHECK_ERROR_CONTAINS(
      ops::conv2d(ops::zeros({1, 2, 5, 5}, kInt64), ops::zeros({3, 2, 3, 3}, kInt64), Tensor()),
      "conv2d", "int64");
  CHECK_ERROR_CONTAINS(ops::conv2d(Tensor(), w, Tensor()), "conv2d", "input");
}
