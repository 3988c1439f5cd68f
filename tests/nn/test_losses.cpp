// Losses (nn/loss.h) against PyTorch 1.13's torch.nn.functional (tests/fixtures/losses.json, made
// by make_loss_fixtures.py): each case's value and input gradient for every reduction in float64
// (1e-10) and a few in float32 (1e-5 relative); a float64 gradcheck per loss; the modules; bad
// inputs and their messages.
#include <cmath>

#include "nn/loss.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "losses.json";

ops::Reduction reduction_of(const std::string& r) {
  if (r == "none") return ops::Reduction::None;
  if (r == "sum") return ops::Reduction::Sum;
  REQUIRE(r == "mean");
  return ops::Reduction::Mean;
}

nn::KLDivReduction kl_reduction_of(const std::string& r) {
  if (r == "batchmean") return nn::KLDivReduction::BatchMean;
  if (r == "none") return nn::KLDivReduction::None;
  if (r == "sum") return nn::KLDivReduction::Sum;
  REQUIRE(r == "mean");
  return nn::KLDivReduction::Mean;
}

/// A case's tensors in dtype (nll_loss's target int64); the inputs require grad.
struct Inputs {
  Tensor input, target, input2, weight, pos_weight;
};
Inputs load(const json& c, DType dtype) {
  auto opt = [&](const char* k) { return c.contains(k) ? fixture_tensor(c[k], dtype) : Tensor(); };
  Inputs in;
  in.input = fixture_tensor(c["input"], dtype).requires_grad_();
  in.target = fixture_tensor(c["target"], c["loss"] == "nll_loss" ? kInt64 : dtype);
  in.input2 = opt("input2");
  if (in.input2.defined()) in.input2.requires_grad_();
  in.weight = opt("weight");
  in.pos_weight = opt("pos_weight");
  return in;
}

/// The case's loss with its options and the given reduction ("none", "mean", ...).
Tensor run(const json& c, const Inputs& in, const std::string& red) {
  const std::string loss = c["loss"];
  const json& o = c["options"];
  if (loss == "nll_loss")
    return nn::nll_loss(in.input, in.target, in.weight, o.value("ignore_index", int64_t{-100}),
                        reduction_of(red));
  if (loss == "binary_cross_entropy")
    return nn::binary_cross_entropy(in.input, in.target, in.weight, reduction_of(red));
  if (loss == "binary_cross_entropy_with_logits")
    return nn::binary_cross_entropy_with_logits(in.input, in.target, in.weight, reduction_of(red),
                                                in.pos_weight);
  if (loss == "l1_loss") return nn::l1_loss(in.input, in.target, reduction_of(red));
  if (loss == "smooth_l1_loss")
    return nn::smooth_l1_loss(in.input, in.target, reduction_of(red), o.value("beta", 1.0));
  if (loss == "huber_loss")
    return nn::huber_loss(in.input, in.target, reduction_of(red), o.value("delta", 1.0));
  if (loss == "kl_div")
    return nn::kl_div(in.input, in.target, kl_reduction_of(red), o.value("log_target", false));
  REQUIRE(loss == "cosine_embedding_loss");
  return nn::cosine_embedding_loss(in.input, in.input2, in.target, o.value("margin", 0.0),
                                   reduction_of(red));
}

/// Every reduction of one case: value and gradient(s) against PyTorch's.
void check_case(const std::string& name, DType dtype, double atol, double rtol) {
  const json& c = fixture_case(kFile, name);
  for (const char* red : {"none", "mean", "sum", "batchmean"}) {
    if (!c.contains(red)) continue;
    INFO(name << ", reduction " << std::string(red) << ", " << dtype_name(dtype));
    Inputs in = load(c, dtype);
    Tensor y = run(c, in, red);
    CHECK(y.dtype() == dtype);
    Tensor want = fixture_tensor(c[red]["output"]);
    REQUIRE(y.shape() == want.shape());
    check_close(y, want.to_vector<double>(), atol, rtol);
    (std::string(red) == "none" ? ops::sum(y * fixture_tensor(c["r"], dtype)) : y).backward();
    check_close(in.input.grad(), fixture_tensor(c[red]["grad"]).to_vector<double>(), atol, rtol);
    if (in.input2.defined())
      check_close(in.input2.grad(), fixture_tensor(c[red]["grad2"]).to_vector<double>(), atol,
                  rtol);
  }
}

/// Every case of one loss in float64 at 1e-10.
void check_loss(const std::string& loss) {
  int n = 0;
  for (const auto& [name, c] : fixture_json(kFile).at("cases").items())
    if (c["loss"] == loss) {
      check_case(name, kFloat64, 1e-10, 1e-10);
      ++n;
    }
  CHECK(n >= 3);
}

Tensor i64(const std::vector<int64_t>& v, const Dims& shape = {}) {
  return ops::from_vector(v, shape);
}
Tensor f64(const std::vector<double>& v, const Dims& shape = {}) {
  return ops::from_vector(v, shape, kFloat64);
}
/// A float64 leaf with values in (0, 1).
Tensor probs64(const Dims& shape, uint64_t seed) {
  return ops::sigmoid(rand64(shape, seed)).detach().requires_grad_();
}

constexpr ops::Reduction kReductions[] = {ops::Reduction::None, ops::Reduction::Mean,
                                          ops::Reduction::Sum};

}  // namespace

TEST_CASE("losses: nll_loss against PyTorch (class weights, ignore_index, [N, C, d...], [C])") {
  check_loss("nll_loss");
}

TEST_CASE("losses: binary_cross_entropy against PyTorch (weights, inputs and targets at 0 and 1)") {
  check_loss("binary_cross_entropy");
}

TEST_CASE("losses: binary_cross_entropy_with_logits against PyTorch (large logits, pos_weight)") {
  check_loss("binary_cross_entropy_with_logits");
}

TEST_CASE("losses: l1, smooth_l1 (beta 0, 0.5, 1, 2) and huber (delta) against PyTorch") {
  check_loss("l1_loss");
  check_loss("smooth_l1_loss");
  check_loss("huber_loss");
}

TEST_CASE("losses: kl_div against PyTorch (mean, batchmean, sum, none, log_target, zeros)") {
  check_loss("kl_div");
}

TEST_CASE("losses: cosine_embedding_loss against PyTorch (margins, a zero row, [D] inputs)") {
  check_loss("cosine_embedding_loss");
}

TEST_CASE("losses: float32 against PyTorch's float64 at 1e-5") {
  for (const char* name :
       {"nll_weight", "bce_basic", "bcel_basic", "smooth_l1_basic", "kl_basic", "cos_basic"})
    check_case(name, kFloat32, 1e-6, 1e-5);
}

TEST_CASE("losses: nll_loss's mean is NaN when every target is ignored, as PyTorch") {
  Tensor x = rand64({2, 3}, 1);
  Tensor y = nn::nll_loss(x, i64({-100, -100}, {2}));
  CHECK(std::isnan(y.item()));
  CHECK(nn::nll_loss(x, i64({-100, -100}, {2}), Tensor(), -100, ops::Reduction::Sum).item() == 0);
}

TEST_CASE("losses: float64 gradcheck of each loss and reduction") {
  for (ops::Reduction red : kReductions) {
    INFO("reduction " << static_cast<int>(red));
    Tensor t = i64({0, 2, -100, 1, 2, 1}, {2, 3});
    check_grad(  // input [2, 3, 3] (N, C, d), class weights too
        [&](const std::vector<Tensor>& in) { return nn::nll_loss(in[0], t, in[1], -100, red); },
        {rand64({2, 3, 3}, 1), rand64({3}, 2, 0.2, 1.0)});
    check_grad(  // input, target and weight (PyTorch's gradient rule)
        [&](const std::vector<Tensor>& in) {
          return nn::binary_cross_entropy(in[0], in[1], in[2], red);
        },
        {probs64({3, 4}, 3), probs64({3, 4}, 4), rand64({4}, 5, 0.3, 1.0)});
    check_grad(
        [&](const std::vector<Tensor>& in) {
          return nn::binary_cross_entropy_with_logits(in[0], in[1], in[2], red, in[3]);
        },
        {rand64({3, 4}, 6, 3.0), probs64({3, 4}, 7), rand64({4}, 8, 0.3, 1.0),
         rand64({4}, 9, 0.5, 2.0)});
    check_grad([&](const std::vector<Tensor>& in) { return nn::l1_loss(in[0], in[1], red); },
               {rand64({3, 4}, 10), rand64({3, 4}, 11)});
    for (double beta : {1.0, 0.4})
      check_grad(
          [&](const std::vector<Tensor>& in) {
            return nn::smooth_l1_loss(in[0], in[1], red, beta);
          },
          {rand64({3, 4}, 12), rand64({3, 4}, 13)});
    check_grad(
        [&](const std::vector<Tensor>& in) { return nn::huber_loss(in[0], in[1], red, 0.7); },
        {rand64({3, 4}, 14, 2.0), rand64({3, 4}, 15)});
    for (bool log_target : {false, true})
      check_grad(
          [&](const std::vector<Tensor>& in) { return nn::kl_div(in[0], in[1], red, log_target); },
          {rand64({3, 4}, 16), log_target ? rand64({3, 4}, 17) : probs64({3, 4}, 17)});
    Tensor y = f64({1, -1, 1, -1});
    check_grad(
        [&](const std::vector<Tensor>& in) {
          return nn::cosine_embedding_loss(in[0], in[1], y, -0.2, red);
        },
        {rand64({4, 3}, 18), rand64({4, 3}, 19)});
  }
  check_grad(
      [](const std::vector<Tensor>& in) {
        return nn::kl_div(in[0], in[1], nn::KLDivReduction::BatchMean);
      },
      {rand64({3, 4}, 20), probs64({3, 4}, 21)});
}

TEST_CASE("losses: binary_cross_entropy's gradient is differentiable again (gradcheck)") {
  Tensor t = probs64({5}, 2).detach();
  check_grad(
      [&](const std::vector<Tensor>& in) {
        Tensor loss = nn::binary_cross_entropy(in[0], t);
        return vitrine::grad({loss}, {in[0]}, {}, false, true)[0];
      },
      {probs64({5}, 1)});
}

TEST_CASE("losses: kl_div's batchmean divides the sum by the batch size, mean by every element") {
  Tensor x = rand64({3, 4}, 1), p = probs64({3, 4}, 2);
  double sum = nn::kl_div(x, p, ops::Reduction::Sum).item();
  CHECK(nn::kl_div(x, p, nn::KLDivReduction::BatchMean).item() == doctest::Approx(sum / 3));
  CHECK(nn::kl_div(x, p).item() == doctest::Approx(sum / 12));
  CHECK(nn::KLDivLoss(ops::Reduction::Sum).reduction == nn::KLDivReduction::Sum);
}

TEST_CASE("losses: the modules call their functions with PyTorch's options and keep weights") {
  const json& c = fixture_case(kFile, "nll_ignore_class");
  Inputs in = load(c, kFloat64);
  nn::NLLLoss nll(in.weight, 3);
  check_close(nll.forward(in.input, in.target), fixture_tensor(c["mean"]["output"]), 1e-10, 1e-10);
  CHECK(nll.type_name() == "NLLLoss");
  REQUIRE(nll.named_buffers().size() == 1);
  CHECK(nll.named_buffers()[0].first == "weight");
  CHECK(nn::NLLLoss().named_buffers().empty());

  const json& b = fixture_case(kFile, "bcel_weight_pos_weight");
  Inputs bin = load(b, kFloat64);
  nn::BCEWithLogitsLoss bcel(bin.weight, ops::Reduction::Sum, bin.pos_weight);
  check_close(bcel.forward(bin.input, bin.target), fixture_tensor(b["sum"]["output"]), 1e-10,
              1e-10);
  CHECK(bcel.state_dict().size() == 2);
  bcel.to(kFloat32);  // the buffers follow the module
  CHECK(bcel.weight.dtype() == kFloat32);
  check_close(bcel.forward(bin.input.to(kFloat32), bin.target.to(kFloat32)),
              fixture_tensor(b["sum"]["output"]), 1e-5, 1e-5);

  const json& e = fixture_case(kFile, "bce_weight");
  Inputs ein = load(e, kFloat64);
  check_close(nn::BCELoss(ein.weight, ops::Reduction::None).forward(ein.input, ein.target),
              fixture_tensor(e["none"]["output"]), 1e-10, 1e-10);

  const json& s = fixture_case(kFile, "smooth_l1_beta_half");
  Inputs sl1_in = load(s, kFloat64);
  check_close(nn::SmoothL1Loss(ops::Reduction::Sum, 0.5).forward(sl1_in.input, sl1_in.target),
              fixture_tensor(s["sum"]["output"]), 1e-10, 1e-10);
  check_close(nn::L1Loss(ops::Reduction::Sum).forward(sl1_in.input, sl1_in.target),
              fixture_tensor(fixture_case(kFile, "smooth_l1_beta_zero")["sum"]["output"]), 1e-10,
              1e-10);

  const json& h = fixture_case(kFile, "huber_delta_small");
  Inputs hin = load(h, kFloat64);
  check_close(nn::HuberLoss(ops::Reduction::Mean, 0.3).forward(hin.input, hin.target),
              fixture_tensor(h["mean"]["output"]), 1e-10, 1e-10);

  const json& k = fixture_case(kFile, "kl_log_target");
  Inputs kin = load(k, kFloat64);
  check_close(nn::KLDivLoss(nn::KLDivReduction::BatchMean, true).forward(kin.input, kin.target),
              fixture_tensor(k["batchmean"]["output"]), 1e-10, 1e-10);

  const json& m = fixture_case(kFile, "cos_margin");
  Inputs cos_in = load(m, kFloat64);
  nn::CosineEmbeddingLoss cel(0.2);
  CHECK(cel.type_name() == "CosineEmbeddingLoss");
  check_close(cel.forward(cos_in.input, cos_in.input2, cos_in.target),
              fixture_tensor(m["mean"]["output"]), 1e-10, 1e-10);
  // An int64 target of 1 and -1 works as the float one.
  check_close(cel.forward(cos_in.input, cos_in.input2, cos_in.target.to(kInt64)),
              fixture_tensor(m["mean"]["output"]), 1e-10, 1e-10);
}

TEST_CASE("losses: bad inputs name the loss, what was given and what was expected") {
  Tensor x = rand64({2, 3}, 1), p = probs64({2, 3}, 2);
  CHECK_ERROR_CONTAINS(nn::l1_loss(x, rand64({3, 2}, 2)), "l1_loss: input shape [2, 3]",
                       "target shape [3, 2] differ");
  CHECK_ERROR_CONTAINS(nn::huber_loss(x, x.to(kFloat32)), "huber_loss: target dtype float32",
                       "input dtype float64");
  CHECK_ERROR_CONTAINS(nn::smooth_l1_loss(x, x, ops::Reduction::Mean, -1),
                       "smooth_l1_loss: beta must be >= 0, got -1");
  CHECK_ERROR_CONTAINS(nn::huber_loss(x, x, ops::Reduction::Mean, 0),
                       "huber_loss: delta must be > 0");
  CHECK_ERROR_CONTAINS(nn::kl_div(x, rand64({2, 3, 1}, 3)), "kl_div: input shape [2, 3]",
                       "target shape [2, 3, 1]");

  CHECK_ERROR_CONTAINS(nn::nll_loss(x, f64({0, 1}, {2})),
                       "nll_loss: target must hold int64 class indices, got float64");
  CHECK_ERROR_CONTAINS(nn::nll_loss(x, i64({0, 1, 2}, {3})), "nll_loss: target shape [3]",
                       "input shape [2, 3]", "expected target shape [2]");
  CHECK_ERROR_CONTAINS(nn::nll_loss(x, i64({0, 1}, {2}), f64({1, 1, 1, 1})),
                       "nll_loss: weight must have shape [3] (one per class), got [4]");
  CHECK_ERROR_CONTAINS(nn::nll_loss(x, i64({0, 3}, {2})), "nll_loss: target 3 is out of bounds",
                       "[0, 3)");
  CHECK_ERROR_CONTAINS(nn::nll_loss(rand64({3}, 4), i64({0, 1}, {2})),
                       "expects a 0-dim target, got shape [2]");

  CHECK_ERROR_CONTAINS(nn::binary_cross_entropy(x, p),
                       "binary_cross_entropy: input must hold probabilities in [0, 1]");
  CHECK_ERROR_CONTAINS(nn::binary_cross_entropy(p, p, f64({1, 1})),
                       "binary_cross_entropy: weight shape [2] does not broadcast to input "
                       "shape [2, 3]");
  CHECK_ERROR_CONTAINS(nn::binary_cross_entropy(p, i64({0, 1, 0, 1, 0, 1}, {2, 3})),
                       "target dtype int64 differs from input dtype float64");
  CHECK_ERROR_CONTAINS(
      nn::binary_cross_entropy_with_logits(x, p, Tensor(), ops::Reduction::Mean, f64({1, 2})),
      "binary_cross_entropy_with_logits: pos_weight shape [2] does not broadcast");

  Tensor y = f64({1, -1});
  CHECK_ERROR_CONTAINS(nn::cosine_embedding_loss(x, rand64({2, 4}, 5), y),
                       "cosine_embedding_loss: input1 shape [2, 3] and input2 shape [2, 4] differ");
  CHECK_ERROR_CONTAINS(nn::cosine_embedding_loss(x, x, f64({1, -1, 1})),
                       "a target of shape [3] expects inputs of shape [3, D], got [2, 3]");
  CHECK_ERROR_CONTAINS(nn::cosine_embedding_loss(x, x, f64({1, -1}, {2, 1})),
                       "target must be 0-dim or 1-D, got shape [2, 1]");
}
