// batch_norm_relu (ops/batch_norm.cpp): relu(batch_norm(x) + residual) as one op, against its
// composition (the reference), in float64 to 1e-12 and float32, training and eval, with a float64
// gradcheck; nn::BatchNorm2d::forward_relu's choice between them; a ResNet's training step fused
// and unfused; nn::fuse_conv_bn_weights (batch norm folded into a convolution, for inference).
#include "models/resnet.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {

struct BnRun {
  std::vector<Tensor> values;  // y, dx, dw, db, dresidual, running mean, running var
};

BnRun bn_run(bool fused, bool training, bool with_residual, DType dt) {
  Tensor x = rand64({3, 4, 5, 6}, 1).detach().to(dt).requires_grad_();
  Tensor w = rand64({4}, 2, 0.5, 1).detach().to(dt).requires_grad_();
  Tensor b = rand64({4}, 3).detach().to(dt).requires_grad_();
  Tensor res = with_residual ? rand64({3, 4, 5, 6}, 4).detach().to(dt).requires_grad_() : Tensor();
  Tensor rm = rand64({4}, 5).detach().to(dt), rv = rand64({4}, 6, 0.1, 1).detach().to(dt);
  Tensor y =
      fused ? ops::batch_norm_relu(x, rm, rv, w, b, training, 0.1, 1e-5, res)
            : ops::relu(with_residual ? ops::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5) + res
                                      : ops::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5));
  const Tensor r = rand64(y.shape(), 7).detach().to(dt);
  ops::sum(y * r).backward();
  return {
      {y.detach(), x.grad(), w.grad(), b.grad(), with_residual ? res.grad() : Tensor(), rm, rv}};
}

}  // namespace

TEST_CASE("batch_norm_relu: equals relu(batch_norm(x) + residual), training and eval") {
  for (const bool training : {true, false})
    for (const bool with_residual : {true, false}) {
      INFO("training " << training << ", residual " << with_residual);
      const BnRun f = bn_run(true, training, with_residual, kFloat64);
      const BnRun c = bn_run(false, training, with_residual, kFloat64);
      for (size_t i = 0; i < f.values.size(); ++i) {
        INFO("value " << i);
        if (!c.values[i].defined()) continue;
        check_close(f.values[i], c.values[i], 1e-12, 1e-12);
      }
      const BnRun f32 = bn_run(true, training, with_residual, kFloat32);
      const BnRun c32 = bn_run(false, training, with_residual, kFloat32);
      for (size_t i = 0; i < f32.values.size(); ++i)
        if (c32.values[i].defined()) check_close(f32.values[i], c32.values[i], 0, 0);
    }
}

TEST_CASE("batch_norm_relu: float64 gradcheck, with and without the residual") {
  const Tensor rm = ops::zeros({3}, kFloat64), rv = ops::ones({3}, kFloat64);
  auto with_res = [&](const V& in) {
    return ops::batch_norm_relu(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5, in[3]);
  };
  check_grad(with_res, {rand64({4, 3, 2, 3}, 10), rand64({3}, 11, 0.5, 1), rand64({3}, 12),
                        rand64({4, 3, 2, 3}, 13)});
  auto eval = [&](const V& in) {
    return ops::batch_norm_relu(in[0], rm, rv, in[1], in[2], false, 0.1, 1e-5);
  };
  check_grad(eval, {rand64({2, 3, 2, 2}, 14), rand64({3}, 15, 0.5, 1), rand64({3}, 16)});
  CHECK_ERROR_CONTAINS(ops::batch_norm_relu(ops::zeros({2, 3, 2, 2}), Tensor(), Tensor(), Tensor(),
                                            Tensor(), true, 0.1, 1e-5, ops::zeros({2, 3, 2, 1})),
                       "batch_norm_relu", "residual", "[2, 3, 2, 2]", "[2, 3, 2, 1]");
}

TEST_CASE("BatchNorm2d::forward_relu fuses unless a hook needs the batch norm's output") {
  nn::BatchNorm2d bn(3);
  const Tensor x = rand64({2, 3, 4, 4}, 20).detach().to(kFloat32);
  Tensor fused = bn.forward_relu(x);
  CHECK(fused.grad_fn()->name == "batch_norm_relu");
  int calls = 0;
  const int64_t h = bn.register_forward_hook([&calls](nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  });
  Tensor composed = bn.forward_relu(x);
  CHECK(calls == 1);  // the hook saw the batch norm's own output
  bn.remove_forward_hook(h);
  CHECK(composed.grad_fn()->name == "relu");
  check_close(fused, composed, 0, 0);  // the fused op rounds as the composition
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("ResNet: a training step with the fused BN-ReLU equals the composed one") {
  models::ResNetConfig c = models::ResNetConfig::preset("resnet8");
  c.channels = 1;
  c.image_h = c.image_w = 12;
  const Tensor x = rand64({6, 1, 12, 12}, 30).detach().to(kFloat32);
  const Tensor labels = ops::tensor({0, 1, 2, 3, 4, 5}).to(kInt64);
  auto step = [&](bool fused) {
    const bool before = nn::BatchNorm2d::fused_relu;
    nn::BatchNorm2d::fused_relu = fused;
    Generator gen(3);
    models::ResNet model(c, gen);
    Tensor loss = ops::cross_entropy(model(x), labels);
    loss.backward();
    nn::BatchNorm2d::fused_relu = before;
    std::vector<Tensor> out{loss.detach()};
    for (const Tensor& p : model.parameters()) out.push_back(p.grad());
    for (const auto& nb : model.named_buffers()) out.push_back(nb.second);
    return out;
  };
  const auto fused = step(true), composed = step(false);
  REQUIRE(fused.size() == composed.size());
  // The same bits: the fused forward rounds as the composition, and the backward is batch norm's
  // on the same masked dy.
  for (size_t i = 0; i < fused.size(); ++i) check_close(fused[i], composed[i], 0, 0);
}

TEST_CASE("fuse_conv_bn_weights: the convolution that gives bn(conv(x)) in eval mode") {
  const Tensor x = rand64({2, 3, 6, 5}, 40), w = rand64({4, 3, 3, 3}, 41);
  const Tensor rm = rand64({4}, 42), rv = rand64({4}, 43, 0.4, 1);
  const Tensor bw = rand64({4}, 44, 0.5, 1), bb = rand64({4}, 45), cb = rand64({4}, 46);
  NoGradGuard no_grad;
  for (const bool conv_bias : {true, false})
    for (const bool affine : {true, false}) {
      INFO("conv bias " << conv_bias << ", affine " << affine);
      const Tensor b = conv_bias ? cb : Tensor();
      const Tensor want =
          ops::batch_norm(ops::conv2d(x, w, b, {1, 1}, {1, 1}), rm, rv, affine ? bw : Tensor(),
                          affine ? bb : Tensor(), false, 0.1, 1e-3);
      const auto [fw, fb] = nn::fuse_conv_bn_weights(w, b, rm, rv, 1e-3, affine ? bw : Tensor(),
                                                     affine ? bb : Tensor());
      check_close(ops::conv2d(x, fw, fb, {1, 1}, {1, 1}), want, 1e-12, 1e-12);
    }
  CHECK_ERROR_CONTAINS(nn::fuse_conv_bn_weights(w, Tensor(), ops::zeros({3}), ops::ones({3}), 1e-5,
                                                Tensor(), Tensor()),
                       "fuse_conv_bn_weights", "[4, 3, 3, 3]", "[3]");
}
