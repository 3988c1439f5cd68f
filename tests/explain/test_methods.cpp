// The explanation methods on cases small enough to work out by hand, and their invariants on a
// tiny random ViT (IG's completeness, SmoothGrad without noise = the plain gradient, the model
// left as it was found). Parity with PyTorch on the fixture ViTs: test_parity.cpp.
#include <algorithm>
#include <cmath>

#include "explain/explain.h"
#include "explain/options_schema.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vitrine::explain;
using vt_test::check_close;

namespace {

/// A pass with one image, one layer, N = 3 tokens (the class token and a 1 x 2 patch grid).
Pass tiny_pass(const std::vector<double>& attention, int64_t heads,
               const std::vector<double>& grads = {}) {
  Pass p;
  p.attentions.push_back(ops::from_vector(attention, {1, heads, 3, 3}));
  if (!grads.empty()) p.attention_grads.push_back(ops::from_vector(grads, {1, heads, 3, 3}));
  p.prefix = 1;
  p.grid_h = 1;
  p.grid_w = 2;
  return p;
}

Tensor tiny_images(int64_t batch, uint64_t seed) {
  Generator g(seed);
  return ops::randn({batch, 2, 8, 12}, g);
}

}  // namespace

TEST_CASE("explain: method names parse, 'all' expands, unknown names are listed") {
  CHECK(parse_methods("rollout,chefer") ==
        std::vector{*find_method("rollout"), *find_method("chefer")});
  CHECK(parse_methods("all") == all_methods());
  CHECK(parse_methods("chefer,all").size() == all_methods().size());
  for (Method m : all_methods()) CHECK(parse_methods(method_name(m)) == std::vector{m});
  CHECK_ERROR_CONTAINS(parse_methods("rollout,gradcam++"), "unknown method 'gradcam++'",
                       "integrated-gradients");
}

TEST_CASE("explain: the registry lists each method file once, by order key, extras apart") {
  const auto& all = methods();
  REQUIRE(all.size() >= 10);
  for (size_t i = 1; i < all.size(); ++i) {
    INFO(all[i]->name());
    CHECK(all[i - 1]->order() < all[i]->order());  // distinct keys: the order is the files' own
  }
  // The ten methods the tool started with keep their order (the command line's, the page's).
  const std::vector<std::string> first = {
      "attention", "rollout",    "grad-rollout",         "chefer",         "gradcam",
      "saliency",  "smoothgrad", "integrated-gradients", "activation-max", "qkv"};
  std::vector<std::string> seen;
  for (const std::string& n : method_names())
    if (std::find(first.begin(), first.end(), n) != first.end()) seen.push_back(n);
  CHECK(seen == first);
  for (const Method* m : all) {
    INFO(m->name());
    CHECK(find_method(m->name()) == m);
    CHECK(!m->help().empty());
    CHECK(parse_methods("all").size() == all_methods().size());
    const auto names = method_names(false);
    CHECK((std::find(names.begin(), names.end(), m->name()) != names.end()) == !m->extra());
    // The options a method reads are request options of the schema, by their CLI names.
    for (const std::string& o : m->options()) {
      INFO(o);
      const auto* spec = find_request_option(o);
      REQUIRE(spec != nullptr);
      CHECK(spec->name == o);
    }
  }
  CHECK(find_method("gradcam++") == nullptr);
  CHECK(method_names(false).size() + extra_methods().size() == method_names().size());
}

TEST_CASE("explain: a method that reads the pass's gradients refuses a forward-only pass") {
  Generator gen(11);
  models::VisionTransformer model(vt_test::tiny_vit_config(8, 12, 2), gen);
  const Tensor x = tiny_images(1, 4);
  const Pass forward = run_pass(model, x, {-1}, -1, false);
  for (const Method* m : methods()) {
    INFO(m->name());
    if (needs_gradients(*m))
      CHECK_ERROR_CONTAINS(explain_method(model, x, forward, *m, {}),
                           std::string(m->name()) + " needs the gradients of the pass");
  }
  // attention needs no gradients: its map from the forward alone.
  CHECK(explain_method(model, x, forward, *find_method("attention"), {}).map.defined());
}

TEST_CASE("explain: rollout by hand, rows re-normalised (not columns)") {
  // One head; attention rows (CLS, p0, p1). No discarding.
  const std::vector<double> a{0.5, 0.3, 0.2,  //
                              0.1, 0.6, 0.3,  //
                              0.2, 0.2, 0.6};
  Pass p = tiny_pass(a, 1);
  // (A + I) / 2 has rows summing to 1 already, so R = (A + I) / 2 and the CLS row over the
  // patches is (0.15, 0.1).
  check_close(rollout(p, HeadFusion::Mean, 0), std::vector<double>{0.15, 0.1}, 1e-7);
  // Two layers: the CLS row of R2 R1.
  p.attentions.push_back(p.attentions[0]);
  // R = M M with M = (A + I)/2: row 0 of M is (0.75, 0.15, 0.1); times M's columns 1 and 2.
  const double m01 = 0.75 * 0.15 + 0.15 * 0.8 + 0.1 * 0.1;
  const double m02 = 0.75 * 0.1 + 0.15 * 0.15 + 0.1 * 0.8;
  check_close(rollout(p, HeadFusion::Mean, 0), std::vector<double>{m01, m02}, 1e-7);
}

TEST_CASE("explain: rollout fuses heads by mean, max or min and discards the smallest entries") {
  const std::vector<double> a{0.5, 0.3, 0.2, 0.1, 0.6, 0.3, 0.2, 0.2, 0.6,   // head 0
                              0.2, 0.4, 0.4, 0.3, 0.3, 0.4, 0.1, 0.1, 0.8};  // head 1
  Pass p = tiny_pass(a, 2);
  // max fusion, CLS row (0.5, 0.4, 0.4) + I -> (1.5, 0.4, 0.4) / 2 = (0.75, 0.2, 0.2), sum 1.15.
  check_close(rollout(p, HeadFusion::Max, 0), std::vector<double>{0.2 / 1.15, 0.2 / 1.15}, 1e-7);
  // min fusion: CLS row (0.2, 0.3, 0.2) -> (0.6, 0.15, 0.1) / 0.85.
  check_close(rollout(p, HeadFusion::Min, 0), std::vector<double>{0.15 / 0.85, 0.1 / 0.85}, 1e-7);
  // Discard 0.34: floor(9 * 0.34) = 3 smallest of the mean-fused matrix
  //   [0.35 0.35 0.3; 0.2 0.45 0.35; 0.15 0.15 0.7] -> 0.15, 0.15, 0.2 are zeroed (rows 1, 2).
  // The CLS row is untouched: (1.35, 0.35, 0.3) / 2 / 1.0 -> (0.175, 0.15).
  check_close(rollout(p, HeadFusion::Mean, 0.34), std::vector<double>{0.175, 0.15}, 1e-7);
  // Discarding never zeroes [CLS, CLS], even when it is the smallest entry.
  const std::vector<double> b{0.01, 0.5, 0.49, 0.3, 0.4, 0.3, 0.3, 0.3, 0.4};
  Pass q = tiny_pass(b, 1);
  // k = floor(9 * 0.2) = 1: the smallest is [0, 0], exempt, so nothing changes.
  check_close(rollout(q, HeadFusion::Mean, 0.2), rollout(q, HeadFusion::Mean, 0), 0);
}

TEST_CASE("explain: grad-rollout and Chefer weight attention by its gradient, negatives clamped") {
  const std::vector<double> a{0.5, 0.3, 0.2, 0.1, 0.6, 0.3, 0.2, 0.2, 0.6};
  const std::vector<double> g{1, 2, -1, 0, 1, 1, 3, 0, -2};
  Pass p = tiny_pass(a, 1, g);
  // F = max(0, G * A) = [0.5 0.6 0; 0 0.6 0.3; 0.6 0 0]; row 0 + I -> (1.5, 0.6, 0) / 2.1.
  check_close(grad_rollout(p, 0), std::vector<double>{0.6 / 2.1, 0}, 1e-7);
  // Chefer: R = I + F; CLS row over the patches = (0.6, 0).
  check_close(chefer(p), std::vector<double>{0.6, 0}, 1e-7);
  // Two layers: R = (I + F)(I + F); row 0 of (I + F) is (1.5, 0.6, 0).
  p.attentions.push_back(p.attentions[0]);
  p.attention_grads.push_back(p.attention_grads[0]);
  // row0 * (I + F): col 1 = 1.5 * 0.6 + 0.6 * 1.6 + 0; col 2 = 1.5 * 0 + 0.6 * 0.3 + 0.
  check_close(chefer(p), std::vector<double>{1.5 * 0.6 + 0.6 * 1.6, 0.6 * 0.3}, 1e-7);
}

TEST_CASE("explain: attention map reads the CLS row, per head and averaged") {
  const std::vector<double> a{0.5, 0.3, 0.2, 0.1, 0.6, 0.3, 0.2, 0.2, 0.6,   // head 0
                              0.2, 0.4, 0.4, 0.3, 0.3, 0.4, 0.1, 0.1, 0.8};  // head 1
  Pass p = tiny_pass(a, 2);
  Tensor heads;
  check_close(attention_map(p, -1, -1, &heads), std::vector<double>{0.35, 0.3}, 1e-7);
  check_close(heads, std::vector<double>{0.3, 0.2, 0.4, 0.4}, 1e-7);
  check_close(attention_map(p, 0, 1), std::vector<double>{0.4, 0.4}, 1e-7);
  CHECK_ERROR_CONTAINS(attention_map(p, 0, 2), "head 2 is out of range for 2 heads");
  CHECK_ERROR_CONTAINS(attention_map(p, 1, -1), "layer 1 is out of range", "1 blocks");
}

TEST_CASE("explain: DINO's threshold keeps the top patches holding that share of the mass") {
  Tensor map = ops::from_vector(std::vector<double>{0.1, 0.4, 0.2, 0.3}, {1, 2, 2});
  // Ascending 0.1 0.2 0.3 0.4: cumulative 0.1 0.3 0.6 1.0; kept where > 1 - 0.6.
  check_close(threshold_mask(map, 0.6), std::vector<double>{0, 1, 0, 1}, 0);
  check_close(threshold_mask(map, 1.0), std::vector<double>{1, 1, 1, 1}, 0);
}

TEST_CASE("explain: Grad-CAM weights token channels by their mean gradient, then ReLU") {
  Pass p;
  p.prefix = 1;
  p.grid_h = 1;
  p.grid_w = 2;
  // Tokens [1, 3, 2] (CLS, p0, p1), gradient likewise; the CLS token is left out.
  p.tokens = ops::from_vector(std::vector<double>{9, 9, 1, 2, 3, -4}, {1, 3, 2});
  p.tokens_grad = ops::from_vector(std::vector<double>{9, 9, 1, 0, 3, 1}, {1, 3, 2});
  // alpha = (2, 0.5); cam = (1*2 + 2*0.5, 3*2 - 4*0.5) = (3, 4).
  check_close(gradcam(p), std::vector<double>{3, 4}, 1e-7);
  p.tokens = ops::from_vector(std::vector<double>{9, 9, -1, 2, 3, -4}, {1, 3, 2});
  check_close(gradcam(p), std::vector<double>{0, 4}, 1e-7);  // -2 + 1 < 0 -> 0
}

TEST_CASE("explain: integration rules: Gauss-Legendre nodes and Captum's trapezoid") {
  auto [a3, w3] = ig_rule(IgRule::GaussLegendre, 3);
  const double t = std::sqrt(0.6);
  check_close(ops::from_vector(a3), std::vector<double>{(1 - t) / 2, 0.5, (1 + t) / 2}, 1e-14);
  check_close(ops::from_vector(w3), std::vector<double>{5.0 / 18, 8.0 / 18, 5.0 / 18}, 1e-14);
  // n points integrate polynomials of degree 2n - 1 exactly: int_0^1 x^7 = 1/8 with n = 4.
  for (int64_t n : {4, 7, 32, 50}) {
    auto [a, w] = ig_rule(IgRule::GaussLegendre, n);
    double s = 0, s7 = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      s += w[k];
      s7 += w[k] * std::pow(a[k], 7);
      CHECK(a[k] > 0);
      CHECK(a[k] < 1);
      if (k > 0) CHECK(a[k] > a[k - 1]);
    }
    CHECK(s == doctest::Approx(1).epsilon(1e-13));
    CHECK(s7 == doctest::Approx(0.125).epsilon(1e-12));
  }
  auto [at, wt] = ig_rule(IgRule::Trapezoid, 5);
  check_close(ops::from_vector(at), std::vector<double>{0, 0.25, 0.5, 0.75, 1}, 1e-15);
  check_close(ops::from_vector(wt), std::vector<double>{0.1, 0.2, 0.2, 0.2, 0.1}, 1e-15);
  CHECK_ERROR_CONTAINS(ig_rule(IgRule::Trapezoid, 1), "at least 2 steps");
}

TEST_CASE("explain: min-max scaling, bilinear upsampling and patch means") {
  Tensor m = ops::from_vector(std::vector<double>{1, 3, 2, 5, 5, 5}, {2, 1, 3});
  check_close(minmax(m), std::vector<double>{0, 1, 0.5, 0, 0, 0}, 1e-7);
  // A 1 x 2 grid to 2 x 4: align_corners=False puts the source centres at x = 0.75 and 2.25.
  Tensor g = ops::from_vector(std::vector<double>{0, 4}, {1, 1, 2});
  check_close(upsample(g, 2, 4), std::vector<double>{0, 1, 3, 4, 0, 1, 3, 4}, 1e-6);
  Tensor px = ops::arange(16, kFloat32).reshape({1, 4, 4});
  check_close(patch_mean(px, 2), std::vector<double>{2.5, 4.5, 10.5, 12.5}, 1e-6);
  // A map the cell does not divide (a ResNet's 42x42 images, the default --cell 4): the error
  // names the cells that fit.
  CHECK_ERROR_CONTAINS(patch_mean(ops::zeros({1, 42, 42}), 4),
                       "map 42x42 is not a multiple of patch 4 (a model other than a ViT: --cell "
                       "one of 2, 3, 6, 7, 14, 21, 42)");
  CHECK_ERROR_CONTAINS(patch_mean(ops::zeros({1, 5, 7}), 2), "--cell 1)");
}

TEST_CASE("explain: attention distance of uniform attention over a 1 x 2 grid is half a patch") {
  // Every patch query attends 0.25 to CLS, 0.5 to itself, 0.25 to the other patch: distance
  // 0.25 * patch per query.
  const std::vector<double> a{1, 0, 0, 0.25, 0.5, 0.25, 0.25, 0.25, 0.5};
  Pass p = tiny_pass(a, 1);
  check_close(attention_distance(p, 16), std::vector<double>{4}, 1e-7);
}

TEST_CASE("explain: the blur baseline is a normalised Gaussian: constants stay constant") {
  Options o;
  o.baseline = IgBaseline::Blur;
  Tensor c = ops::full({1, 1, 12, 14}, 0.7);
  check_close(ig_baseline(c, o), ops::full({1, 1, 12, 14}, 0.7), 1e-6);
  Tensor small = ops::zeros({1, 1, 5, 20});
  CHECK_ERROR_CONTAINS(ig_baseline(small, o), "larger than 5x5", "5x20");
  o.baseline = IgBaseline::Black;
  o.black = {-0.5f, 2.0f};
  Tensor b = ig_baseline(ops::zeros({1, 2, 1, 1}), o);
  check_close(b, std::vector<double>{-0.5, 2.0}, 0);
}

TEST_CASE("explain: on a tiny ViT the pass matches autograd and leaves the model as it was") {
  Generator gen(3);
  models::VisionTransformer model(vt_test::tiny_vit_config(8, 12, 2), gen);
  model.to(kFloat64);
  model.train();
  Tensor x = tiny_images(2, 7).to(kFloat64);
  const std::vector<int64_t> targets{-1, 2};
  Pass p = run_pass(model, x, targets, -1);
  CHECK(model.is_training());
  for (const Tensor& w : model.parameters()) {
    CHECK(w.requires_grad());
    CHECK(!w.grad().defined());
  }
  CHECK(!model.blocks->at<models::ViTBlock>(0)->attn->capturing_probs());
  CHECK(p.grid_h == 2);
  CHECK(p.grid_w == 3);
  CHECK(p.targets[1] == 2);
  model.eval();
  Tensor logits = model.forward(x);
  CHECK(p.targets[0] == ops::argmax(logits, 1).to_vector<int64_t>()[0]);
  // The input gradient of image 1 is that of its own target logit alone.
  Tensor xi = x.clone();
  xi.requires_grad_(true);
  Tensor y = model.forward(xi).select(1, 2).select(0, 1);
  Tensor g = grad({y}, {xi})[0];
  check_close(p.input_grad.select(0, 1), g.select(0, 1), 1e-12, 1e-9);
  CHECK_ERROR_CONTAINS(run_pass(model, x, {0, 3}, -1), "class 3 is out of range", "3 classes");
  CHECK_ERROR_CONTAINS(run_pass(model, x, {0}, -1), "1 target classes given for 2 images");
  CHECK_ERROR_CONTAINS(run_pass(model, x, {0, 0}, 2), "gradcam layer 2 is out of range");
  CHECK_ERROR_CONTAINS(run_pass(model, ops::zeros({1, 2, 8, 10}, kFloat64), {0}, -1),
                       "8x10 is not a multiple of the patch size 4");
}

TEST_CASE("explain: IG is complete with enough steps, SmoothGrad without noise is the gradient") {
  Generator gen(5);
  models::VisionTransformer model(vt_test::tiny_vit_config(8, 12, 2), gen);
  model.to(kFloat64);
  Tensor x = tiny_images(2, 9).to(kFloat64);
  Options o;
  o.black = {-0.3f, 0.4f};
  for (IgRule rule : {IgRule::GaussLegendre, IgRule::Trapezoid}) {
    o.ig_rule = rule;
    o.steps = 8;
    const auto coarse = integrated_gradients(model, x, {-1, 1}, o).completeness_gap;
    o.steps = 128;
    const auto fine = integrated_gradients(model, x, {-1, 1}, o).completeness_gap;
    for (size_t b = 0; b < 2; ++b) {
      // Captum's trapezoid weights sum to (n - 1) / n, so only Gauss-Legendre closes the gap.
      if (rule == IgRule::GaussLegendre) CHECK(std::abs(fine[b]) < 2e-3);
      CHECK(std::abs(fine[b]) <= std::abs(coarse[b]) + 1e-12);
    }
  }
  o.baseline = IgBaseline::Blur;
  o.steps = 64;
  const auto blur_gap = integrated_gradients(model, x, {0, 1}, o).completeness_gap;
  CHECK(std::abs(blur_gap[0]) < 2e-3);

  Pass p = run_pass(model, x, {-1, 1});
  o.sigma = 0;
  o.samples = 3;
  o.chunk = 2;  // the samples split across forwards
  check_close(smoothgrad(model, x, {-1, 1}, o).values, p.input_grad, 1e-12, 1e-9);
  // Noise from the caller is used as given: the same z twice gives the same result.
  o.sigma = 0.2;
  Generator ng(1);
  Tensor z = ops::randn({2, 3, 2, 8, 12}, ng, kFloat64);
  check_close(smoothgrad(model, x, {-1, 1}, o, z).values,
              smoothgrad(model, x, {-1, 1}, o, z).values, 0);
  CHECK_ERROR_CONTAINS(smoothgrad(model, x, {-1, 1}, o, z.narrow(1, 0, 2)),
                       "noise must be [2, 3, 2, 8, 12]");
}

TEST_CASE("explain: explain() gives every method's grid and [0, 1] map at image resolution") {
  Generator gen(11);
  models::VisionTransformer model(vt_test::tiny_vit_config(8, 12, 2), gen);
  Tensor x = tiny_images(3, 4);
  Options o;
  o.samples = 2;
  o.steps = 4;
  o.threshold = 0.5;
  const auto results = explain::explain(model, x, {-1, -1, 0}, all_methods(), o);
  REQUIRE(results.size() == all_methods().size());
  for (const auto& e : results) {
    INFO(method_name(e.method));
    CHECK(e.grid.shape() == Dims{3, 2, 3});
    CHECK(e.map.shape() == Dims{3, 8, 12});
    CHECK(ops::max(e.map).item() <= 1.0);
    CHECK(ops::min(e.map).item() >= 0.0);
    CHECK(e.heads.defined() == (e.method.name() == "attention"));
    CHECK(e.mask.defined() == (e.method.name() == "attention"));
    CHECK(e.completeness_gap.size() == (e.method.name() == "integrated-gradients" ? 3u : 0u));
  }
}
