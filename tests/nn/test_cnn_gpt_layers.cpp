// The layers of a CNN and a GPT: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, BatchNorm2d, Embedding,
// scaled_dot_product_attention and masked MultiheadSelfAttention. Each against PyTorch
// (tests/fixtures/nn_modules.json, made by tests/fixtures/make_nn_fixtures.py) and by a float64
// gradcheck; the bad-input cases with their messages.
#include <cmath>

#include "module_parity.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {
/// Copies a fixture's buffers into m's (by name).
void load_buffers(nn::Module& m, const nlohmann::json& buffers) {
  for (auto& item : m.named_buffers()) {
    auto& n = item.first;
    auto& b = item.second;
    INFO("buffer " << n);
    REQUIRE(buffers.contains(n));
    NoGradGuard ng;
    b.copy_(fixture_tensor(buffers.at(n), b.dtype()));
  }
}
void check_buffers(nn::Module& m, const nlohmann::json& buffers, double tol = 1e-12) {
  for (auto& item : m.named_buffers()) {
    auto& n = item.first;
    auto& b = item.second;
    INFO("buffer " << n);
    check_close(b.to(kFloat64), fixture_tensor(buffers.at(n)), tol, tol);
  }
}
}  // namespace

TEST_CASE("pooling modules: PyTorch parity (max, average, adaptive) and gradcheck") {
  nn::MaxPool2d max_pool(3, 2, 1);
  check_parity(max_pool, "max_pool2d");
  nn::MaxPool2d ties(2);  // stride = kernel, as PyTorch
  CHECK(ties.stride == std::pair<int64_t, int64_t>{2, 2});
  check_parity(ties, "max_pool2d_ties");  // the gradient goes to the first maximum
  nn::AvgPool2d avg(3, 2, 1);
  check_parity(avg, "avg_pool2d");
  nn::AvgPool2d avg_exclude(3, 2, 1, false);
  check_parity(avg_exclude, "avg_pool2d_exclude_pad");
  nn::AdaptiveAvgPool2d adaptive({3, 2});  // 7x5 -> 3x2: overlapping, unequal bins
  check_parity(adaptive, "adaptive_avg_pool2d");
  nn::AdaptiveAvgPool2d global(1);
  check_parity(global, "adaptive_avg_pool2d_1");
  CHECK(max_pool.extra_repr() == "kernel_size=3, stride=2, padding=1");
  CHECK(adaptive.extra_repr() == "output_size=(3, 2)");

  Tensor x = rand64({2, 2, 5, 6}, 7);
  check_grad(
      [](const std::vector<Tensor>& v) {
        return ops::max_pool2d(v[0], {3, 2}, {2, 1}, {1, 1});
      },
      {x});
  check_grad(
      [](const std::vector<Tensor>& v) {
        return ops::avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, false);
      },
      {x});
  check_grad(
      [](const std::vector<Tensor>& v) {
        return ops::adaptive_avg_pool2d(v[0], {2, 4});
      },
      {x});
  // equal bins take the reshape path: the same as the general one
  Tensor y = ops::adaptive_avg_pool2d(x, {5, 3});
  CHECK(y.shape() == Dims{2, 2, 5, 3});
  check_close(ops::select(y, 3, 1), ops::mean(ops::slice(x, 3, 2, 4), {3}), 1e-12, 1e-12);

  CHECK_ERROR_CONTAINS(ops::max_pool2d(ops::zeros({2, 3, 4}), {2, 2}, {2, 2}), "max_pool2d",
                       "expected x [B, C, H, W]", "[2, 3, 4]");
  CHECK_ERROR_CONTAINS(ops::max_pool2d(x, {3, 3}, {1, 1}, {2, 2}), "max_pool2d",
                       "padding must be between 0 and half the kernel");
  CHECK_ERROR_CONTAINS(ops::avg_pool2d(x, {7, 2}, {1, 1}), "avg_pool2d", "7x2 kernel is larger",
                       "5x6");
  CHECK_ERROR_CONTAINS(nn::MaxPool2d(2, 0)(x), "max_pool2d", "stride must be positive");
  CHECK_ERROR_CONTAINS(ops::adaptive_avg_pool2d(x, {0, 2}), "adaptive_avg_pool2d",
                       "must be positive", "0x2");
}

TEST_CASE("max_pool2d: the kernel against a plain scan, with and without a gradient, NaN wins") {
  // backends/cpu/pool.cpp selects instead of branching, and without a gradient writes the maxima
  // only; both against the rule written out here (the first maximum in row-major order, a NaN
  // replaces it), on windows cut by the padding on every side, float32 and float64.
  const int64_t B = 2, C = 3, H = 7, W = 6, k = 3, s = 2, p = 1;
  const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
  Generator gen(21);  // (its own: the values do not depend on the tests run before)
  std::vector<double> xs = ops::randn({B, C, H, W}, gen, kFloat64).to_vector<double>();
  const auto at = [&](int64_t b, int64_t c, int64_t h, int64_t w) {
    return static_cast<size_t>(((b * C + c) * H + h) * W + w);
  };
  xs[at(0, 1, 2, 3)] = std::nan("");
  xs[at(1, 2, 0, 0)] = std::nan("");
  xs[at(1, 2, 0, 1)] = 5.0;  // after a NaN in the same window: the NaN stays
  const auto scan = [&](const std::vector<double>& xs) {
    std::vector<double> want;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double m = 0;
            bool any = false;
            for (int64_t h = oh * s - p; h < oh * s - p + k; ++h)
              for (int64_t w = ow * s - p; w < ow * s - p + k; ++w) {
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                const double v = xs[at(b, c, h, w)];
                if (!any || v > m || std::isnan(v)) m = v;
                any = true;
              }
            want.push_back(m);
          }
    return want;
  };
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    const Tensor x = ops::from_vector(xs, Dims{B, C, H, W}, dt);
    const std::vector<double> want = scan(x.to(kFloat64).to_vector<double>());
    Tensor plain;
    {
      NoGradGuard ng;
      plain = ops::max_pool2d(x, {k, k}, {s, s}, {p, p});
    }
    Tensor xg = x.detach().requires_grad_(true);
    Tensor with_grad = ops::max_pool2d(xg, {k, k}, {s, s}, {p, p});
    for (const Tensor& y : {plain, with_grad}) {
      const std::vector<double> got = y.detach().to(kFloat64).to_vector<double>();
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("output " << i);
        const double e =
            dt == kFloat32 ? static_cast<double>(static_cast<float>(want[i])) : want[i];
        CHECK((std::isnan(e) ? std::isnan(got[i]) : got[i] == e));
      }
    }
    // The gradient lands on the maxima: one per window, summed where windows share one.
    ops::sum(with_grad).backward();
    const std::vector<double> g = xg.grad().to(kFloat64).to_vector<double>();
    double total = 0;
    for (double v : g) total += v;
    CHECK(total == static_cast<double>(B * C * OH * OW));
    CHECK(g[at(1, 2, 0, 0)] == 1.0);  // the NaN of output (0, 0)'s window, not the 5 after it
  }
}

TEST_CASE("flatten module: [B, C, H, W] -> [B, C H W] as torch.nn.Flatten") {
  Tensor x = ops::arange(0, 24, 1).reshape({2, 3, 2, 2});
  nn::Flatten flatten;
  CHECK(flatten(x).shape() == Dims{2, 12});
  CHECK(nn::Flatten(0, 1)(x).shape() == Dims{6, 2, 2});
}

TEST_CASE("batch_norm2d: PyTorch parity in training (running statistics) and eval") {
  nn::BatchNorm2d train(3);
  const auto& c = module_case("batch_norm2d_train");
  check_parity(train, "batch_norm2d_train", 1e-9);
  check_buffers(train, c.at("buffers"));  // momentum 0.1, unbiased running variance, count 1
  CHECK(train.num_batches_tracked.dtype() == kInt64);
  CHECK(train.num_batches_tracked.item<int64_t>() == 1);

  nn::BatchNorm2d eval(3, 1e-3);
  eval.to(kFloat64);
  load_buffers(eval, module_case("batch_norm2d_eval_buffers_in"));
  eval.eval();
  check_parity(eval, "batch_norm2d_eval", 1e-9);
  check_buffers(eval, module_case("batch_norm2d_eval").at("buffers"));  // untouched in eval

  // momentum = None: the cumulative average over the batches seen
  nn::BatchNorm2d cumulative(2, 1e-5, std::nullopt);
  cumulative.to(kFloat64);
  const auto& cc = module_case("batch_norm2d_cumulative");
  cumulative(fixture_tensor(cc.at("first_input")));
  check_parity(cumulative, "batch_norm2d_cumulative", 1e-9);
  check_buffers(cumulative, cc.at("buffers"));
  CHECK(cumulative.extra_repr() ==
        "2, eps=1e-05, momentum=None, affine=true, track_running_stats=true");

  // PyTorch's state-dict names, so its checkpoints load as they are
  nn::NamedTensors state = train.state_dict();
  std::vector<std::string> names;
  for (auto& [n, t] : state) names.push_back(n);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                          "num_batches_tracked"});

  Tensor x = rand64({3, 2, 2, 3}, 5, 1.5, 0.5);
  nn::BatchNorm2d g(2);
  g.to(kFloat64);
  check_grad([&g](const std::vector<Tensor>& v) { return g.forward(v[0]); }, {x});
  Tensor w = rand64({2}, 6), b = rand64({2}, 8);
  check_grad(
      [](const std::vector<Tensor>& v) {
        return ops::batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true, 0.1, 1e-5);
      },
      {x, w, b});
  // eval: the running statistics are constants, dx = dy w / sqrt(running_var + eps)
  Tensor rm = rand64({2}, 9), rv = rand64({2}, 10, 1.0, 0.5);
  check_grad(
      [&](const std::vector<Tensor>& v) {
        return ops::batch_norm(v[0], rm, rv, v[1], v[2], false, 0.1, 1e-5);
      },
      {x, w, b});
  // eval's backward uses the running statistics of its forward, even after a training forward
  // updated them in place
  {
    nn::BatchNorm2d bn(2);
    bn.to(kFloat64);
    bn.eval();
    Tensor xe = x.detach().requires_grad_();
    // the weight's gradient reads the mean: sum dy (x - running_mean) / sqrt(running_var + eps)
    auto ref = grad({ops::sum(ops::pow(bn.forward(xe), 2.0))}, {xe, bn.weight});
    Tensor ye = bn.forward(xe);
    bn.train();
    bn.forward(x.detach() * 3.0 + 1.0);  // moves running_mean and running_var
    auto after = grad({ops::sum(ops::pow(ye, 2.0))}, {xe, bn.weight});
    check_close(after[0], ref[0], 1e-12, 1e-12);
    check_close(after[1], ref[1], 1e-12, 1e-12);
  }
  // a second derivative is refused, not silently zero
  Tensor xg = x.detach().requires_grad_();
  Tensor gx = grad({ops::sum(ops::pow(g.forward(xg), 2.0))}, {xg}, {}, false, true)[0];
  CHECK_ERROR_CONTAINS(ops::sum(gx).backward(), "batch_norm_backward", "double backward");

  CHECK_ERROR_CONTAINS(train(ops::zeros({2, 4, 3, 3}, kFloat64)), "BatchNorm2d(3)",
                       "x has 4 channels");
  CHECK_ERROR_CONTAINS(train(ops::zeros({1, 3, 1, 1}, kFloat64)), "batch_norm",
                       "more than 1 value per channel when training");
  CHECK_ERROR_CONTAINS(nn::BatchNorm2d(3, 1e-5, 1.5), "momentum must be in [0, 1]", "1.5");
}

TEST_CASE("embedding: PyTorch parity, repeated indices accumulate their gradients") {
  const auto& c = module_case("embedding");
  nn::Embedding emb(7, 4);
  emb.to(kFloat64);
  {
    NoGradGuard ng;
    emb.weight.copy_(fixture_tensor(c.at("params").at("weight")));
  }
  const auto shape = c.at("indices_shape").get<std::vector<int64_t>>();
  Tensor idx = ops::from_vector(c.at("indices").get<std::vector<int64_t>>(), Dims(shape));
  Tensor y = emb(idx);
  CHECK(y.shape() == Dims{2, 4, 4});
  check_close(y, fixture_tensor(c.at("output")), 0, 0);
  ops::sum(y * fixture_tensor(c.at("r"))).backward();
  check_close(emb.weight.grad(), fixture_tensor(c.at("param_grads").at("weight")), 1e-12, 1e-12);
  Tensor w = rand64({7, 3}, 4);
  check_grad([&](const std::vector<Tensor>& v) { return ops::embedding(v[0], idx); }, {w});
  CHECK_ERROR_CONTAINS(emb(ops::zeros({3})), "embedding", "indices must be int64");
  CHECK_ERROR_CONTAINS(emb(ops::from_vector(std::vector<int64_t>{1, 7})), "index_select", "7");
}

TEST_CASE("scaled_dot_product_attention: PyTorch parity (plain, causal, bool and float masks)") {
  for (const char* name : {"sdpa", "sdpa_causal", "sdpa_bool_mask", "sdpa_float_mask"}) {
    INFO(std::string(name));
    const auto& c = module_case(name);
    Tensor q = fixture_tensor(c.at("q")), k = fixture_tensor(c.at("k")),
           v = fixture_tensor(c.at("v"));
    q.requires_grad_();
    k.requires_grad_();
    v.requires_grad_();
    Tensor mask;
    if (c.contains("mask")) {
      mask = fixture_tensor(c.at("mask"));
      if (c.at("mask_is_bool").get<bool>()) mask = ops::ne(mask, ops::scalar(0, kFloat64));
    }
    const bool causal = std::string(name) == "sdpa_causal";
    std::optional<double> scale;
    if (causal) scale = 0.3;
    Tensor probs;
    Tensor y = ops::scaled_dot_product_attention(q, k, v, mask, 0, causal, scale,
                                                 default_generator(), &probs);
    check_close(y, fixture_tensor(c.at("output")), 1e-12, 1e-12);
    ops::sum(y * fixture_tensor(c.at("r"))).backward();
    check_close(q.grad(), fixture_tensor(c.at("q_grad")), 1e-12, 1e-12);
    check_close(k.grad(), fixture_tensor(c.at("k_grad")), 1e-12, 1e-12);
    check_close(v.grad(), fixture_tensor(c.at("v_grad")), 1e-12, 1e-12);
    if (causal)  // nothing above the diagonal
      CHECK(ops::sum(ops::select(ops::select(probs, 2, 1), 2, 2)).item() == 0.0);
  }
  Tensor q = rand64({2, 4, 3}, 1), k = rand64({2, 5, 3}, 2), v = rand64({2, 5, 2}, 3);
  Tensor mask =
      ops::gt(ops::rand({4, 5}, default_generator(), kFloat64), ops::scalar(0.3, kFloat64));
  mask = ops::where(ops::eq(ops::arange(5, kInt64), ops::scalar(0, kInt64)), ops::ones({5}, kBool),
                    mask);
  check_grad(
      [&](const std::vector<Tensor>& t) {
        return ops::scaled_dot_product_attention(t[0], t[1], t[2], mask);
      },
      {q, k, v});
  CHECK_ERROR_CONTAINS(ops::scaled_dot_product_attention(q, ops::zeros({2, 5, 4}, kFloat64), v),
                       "scaled_dot_product_attention", "k [..., S, 3]");
  CHECK_ERROR_CONTAINS(
      ops::scaled_dot_product_attention(q, k, v, ops::ones({4, 5}, kBool), 0, true),
      "either attn_mask or is_causal");
}

TEST_CASE("multihead self-attention: the causal mask as timm's Attention with is_causal") {
  nn::MultiheadSelfAttention attn(8, 2);
  const auto& c = module_case("attention_causal");
  attn.to(kFloat64);
  for (auto& [n, p] : attn.named_parameters()) {
    NoGradGuard ng;
    p.copy_(fixture_tensor(c.at("params").at(n)));
  }
  Tensor x = fixture_tensor(c.at("input"));
  x.requires_grad_();
  attn.capture(true, true);
  Tensor y = attn.forward(x, Tensor(), true);
  check_close(y, fixture_tensor(c.at("output")), 1e-12, 1e-12);
  ops::sum(y * fixture_tensor(c.at("r"))).backward();
  check_close(x.grad(), fixture_tensor(c.at("input_grad")), 1e-12, 1e-12);
  for (auto& [n, p] : attn.named_parameters())
    check_close(p.grad(), fixture_tensor(c.at("param_grads").at(n)), 1e-12, 1e-12);
  // the captured probabilities are causal, and their gradient arrived
  CHECK(attn.attention().shape() == Dims{2, 2, 5, 5});
  CHECK(ops::select(ops::select(attn.attention(), 2, 0), 2, 4).sum().item() == 0.0);
  CHECK(attn.attention_grad().defined());

  // A bool mask that allows everything is the unmasked attention; a padding mask hides keys.
  attn.capture(false);
  Tensor all = ops::ones({1, 1, 1, 5}, kBool);
  check_close(attn.forward(x, all), attn.forward(x), 1e-12, 1e-12);
  Tensor keep3 = ops::lt(ops::arange(5, kInt64), ops::scalar(3, kInt64)).reshape({1, 1, 1, 5});
  Tensor first3 = ops::slice(x, 1, 0, 3);
  check_close(ops::slice(attn.forward(x, keep3), 1, 0, 3), attn.forward(first3), 1e-12, 1e-12);
  check_grad([&](const std::vector<Tensor>& v) { return attn.forward(v[0], Tensor(), true); },
             {rand64({1, 4, 8}, 9)});
}
