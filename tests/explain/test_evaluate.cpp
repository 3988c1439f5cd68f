// The evaluation of explanations on cases whose answer is known: a map pointing into the box
// scores 1, a "model" that looks at one patch only loses its score at the first deletion step
// for the right map and at the last for the reversed one, randomising every layer changes the
// gradient methods' maps; and the statistics (AUC, Spearman, intervals) by hand.
#include <cmath>

#include "explain/detail.h"
#include "explain/evaluate.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vitrine::explain;
using nn::data::Box;
using vt_test::check_close;

namespace {

/// A classifier that looks at one patch only: logit 0 = 10 x the patch's mean pixel, logit 1 = 0.
LogitsFn one_patch_model(int64_t py, int64_t px, int64_t patch) {
  return [=](const Tensor& images) {
    Tensor p = images.narrow(2, py * patch, patch).narrow(3, px * patch, patch);
    Tensor l0 = ops::mean(p, {1, 2, 3}) * 10.0;
    return ops::stack({l0, ops::zeros_like(l0)}, 1);
  };
}

}  // namespace

TEST_CASE("evaluate: pointing game and energy in the box") {
  const Box box{2, 3, 4, 5};  // rows 2..5, columns 3..7
  Tensor m = ops::zeros({10, 10});
  m.narrow(0, 4, 1).narrow(1, 5, 1).fill_(1.0);
  CHECK(pointing_hit(m, box));
  CHECK(energy_in_box(m, box) == 1.0);
  Tensor out = ops::zeros({10, 10});
  out.narrow(0, 9, 1).narrow(1, 9, 1).fill_(1.0);
  CHECK(!pointing_hit(out, box));
  CHECK(energy_in_box(out, box) == 0.0);
  // A uniform map: the box's share of the area; negative values count as 0.
  CHECK(energy_in_box(ops::ones({10, 10}), box) == doctest::Approx(20.0 / 100));
  CHECK(energy_in_box(ops::full({10, 10}, -1.0), box) == 0.0);
}

TEST_CASE("evaluate: a model that looks at one patch: deletion drops at once for the right map") {
  const int64_t patch = 2;
  const LogitsFn f = one_patch_model(1, 2, patch);  // the patch at grid row 1, column 2
  const Tensor x = ops::ones({1, 1, 6, 6});         // a 3 x 3 grid
  Tensor right = ops::zeros({1, 3, 3});
  right.select(1, 1).select(1, 2).fill_(1.0);  // the relevant patch first
  Tensor reversed = ops::ones({1, 3, 3});
  reversed.select(1, 1).select(1, 2).fill_(0.0);  // the relevant patch last
  CurveOptions o;
  o.patches_per_step = 2;  // 9 patches: 5 steps, 6 points
  const double high = 1 / (1 + std::exp(-10.0)), half = 0.5;
  const Curves good = deletion_insertion(f, x, {0}, right, patch, o);
  const Curves bad = deletion_insertion(f, x, {0}, reversed, patch, o);
  REQUIRE(good.deletion[0].size() == 6);
  check_close(ops::from_vector(good.deletion[0]),
              std::vector<double>{high, half, half, half, half, half}, 1e-6);
  check_close(ops::from_vector(bad.deletion[0]),
              std::vector<double>{high, high, high, high, high, half}, 1e-6);
  check_close(ops::from_vector(good.insertion[0]),
              std::vector<double>{half, high, high, high, high, high}, 1e-6);
  CHECK(good.deletion_auc[0] < bad.deletion_auc[0]);
  CHECK(good.insertion_auc[0] > bad.insertion_auc[0]);
  CHECK(good.deletion_auc[0] == doctest::Approx(auc(good.deletion[0])));
}

TEST_CASE("evaluate: removal baselines: zero is the black value, mean the image's mean") {
  const LogitsFn f = one_patch_model(0, 0, 2);
  Tensor x = ops::full({1, 1, 2, 2}, 0.3);
  Tensor grid = ops::ones({1, 1, 1});
  CurveOptions o;
  o.black = {-0.3f};  // removing the only patch: logit 10 * -0.3 against 0
  const Curves z = deletion_insertion(f, x, {0}, grid, 2, o);
  CHECK(z.deletion[0][1] == doctest::Approx(1 / (1 + std::exp(3.0))));
  o.removal = Removal::Mean;  // the mean of a constant image is the image
  const Curves m = deletion_insertion(f, x, {0}, grid, 2, o);
  CHECK(m.deletion[0][1] == doctest::Approx(m.deletion[0][0]));
  CHECK_ERROR_CONTAINS(deletion_insertion(f, x, {0}, ops::ones({1, 2, 2}), 2, o),
                       "2x2 grid of 2-pixel patches does not cover 2x2 images");
}

TEST_CASE("evaluate: AUC, Spearman with ties, intervals, baselines") {
  CHECK(auc({1, 0}) == 0.5);
  CHECK(auc({1, 1, 1}) == 1.0);
  CHECK(auc({0, 1, 1}) == 0.75);
  CHECK(spearman({1, 2, 3, 4}, {1, 3, 2, 4}) == doctest::Approx(0.8));
  CHECK(spearman({1, 2, 3}, {3, 2, 1}) == doctest::Approx(-1));
  CHECK(spearman({1, 1, 2}, {1, 1, 2}) == doctest::Approx(1));  // tied ranks 1.5, 1.5, 3
  CHECK(spearman({1, 1, 1}, {1, 2, 3}) == 0);
  const Stat s = summarize({1, 2, 3});
  CHECK(s.mean == 2);
  CHECK(s.hi - s.mean == doctest::Approx(1.96 / std::sqrt(3.0)));
  CHECK(s.n == 3);
  const Tensor c = centre_grid(1, 5, 5);
  CHECK(ops::argmax(c.reshape({1, 25}), 1).item() == 12);
  const Tensor r = random_grid(2, 3, 3, 7);
  check_close(r, random_grid(2, 3, 3, 7), 0, 0);
}

TEST_CASE("evaluate: cascading randomisation replaces the top layers first") {
  Generator gen(1);
  models::VisionTransformer model(vt_test::tiny_vit_config(12, 12, 1), gen);
  CHECK(randomisation_steps(model.config()) ==
        std::vector<std::string>{"logits", "block 1", "block 0", "embedding"});
  auto same = [](const Tensor& a, const Tensor& b) {
    return ops::max(ops::abs(a - b)).item() == 0.0;
  };
  auto none = randomised_copy(model, 0, 5);
  auto head_only = randomised_copy(model, 1, 5);
  auto all = randomised_copy(model, 4, 5);
  const auto trained = model.state_dict(), one = head_only->state_dict(), four = all->state_dict();
  const auto zero = none->state_dict();
  for (size_t i = 0; i < trained.size(); ++i) {
    const std::string& name = trained[i].first;
    INFO(name);
    CHECK(same(zero[i].second, trained[i].second));
    const bool is_head = name == "head.weight";  // (biases start at 0 in both)
    if (is_head) CHECK(!same(one[i].second, trained[i].second));
    if (name.starts_with("blocks.") || name == "pos_embed")
      CHECK(same(one[i].second, trained[i].second));
    // Every weight matrix and token changes when all is randomised (LayerNorms return to 1 and
    // 0, which differ from a trained model's but not from an untrained one's).
    if (!name.ends_with("bias") && name.find("norm") == std::string::npos)
      CHECK(!same(four[i].second, trained[i].second));
  }
}

TEST_CASE("evaluate: the whole evaluation on a tiny ViT, with boxes and sanity checks") {
  Generator gen(2);
  models::VisionTransformer model(vt_test::tiny_vit_config(12, 12, 1), gen);
  Generator ig(3);
  const Tensor x = ops::randn({5, 1, 12, 12}, ig);
  ImageBoxes boxes(5, {Box{0, 0, 6, 6}});
  EvalOptions o;
  o.explain.samples = 2;
  o.explain.steps = 4;
  o.sanity_images = 3;
  o.chunk = 2;  // the images split across explain calls
  int64_t calls = 0;
  const EvalResult r = evaluate(model, x, std::vector<int64_t>(5, -1), boxes, o,
                                [&](const std::string&, int64_t, int64_t) { ++calls; });
  CHECK(calls == 3 + 4);  // 3 chunks, 4 randomisation steps
  CHECK(r.rows.size() == all_methods().size() + 2);
  for (const std::string& row : r.rows) {
    INFO(row);
    CHECK(r.deletion_auc.at(row).size() == 5);
    CHECK(r.pointing.at(row).size() == 5);
    CHECK(r.deletion_curve.at(row).size() == 4);  // 9 patches, 4 per step: 3 steps, 4 points
    for (double e : r.energy.at(row)) CHECK((e >= 0 && e <= 1));
  }
  CHECK(r.sanity_steps.size() == 4);
  // Once every layer is random, the gradient methods' maps have changed.
  for (const char* m : {"saliency", "gradcam", "chefer", "integrated-gradients"}) {
    INFO(m);
    const auto& last = r.sanity.at(m).back();
    CHECK(last.size() == 3);
    CHECK(summarize(last).mean < 0.9);
  }
  const std::string md = to_markdown(r);
  CHECK(md.find("| chefer |") != std::string::npos);
  CHECK(md.find("pointing game") != std::string::npos);
  CHECK(to_json(r)["results"]["centre"].contains("energy"));
}

TEST_CASE("evaluate: --pos-interp reaches the pass and the curves' logits at another size") {
  // A 12x12 ViT evaluated on 20x20 images with DINO's position-embedding resize: every row must
  // be what explain (the one entry point) and the curves give under that resize. (The pass and
  // the logits used to take the default resize whatever the option said; only the gradient
  // methods honoured it.)
  Generator gen(4);
  models::VisionTransformer model(vt_test::tiny_vit_config(12, 12, 1), gen);
  Generator ig(5);
  const Tensor x = ops::randn({3, 1, 20, 20}, ig);
  const std::vector<int64_t> t(3, -1);
  EvalOptions o;
  o.methods = parse_methods("attention,rollout,saliency");
  o.sanity_images = 0;
  o.explain.pos_interp = models::PosInterp::Dino;
  const EvalResult r = evaluate(model, x, t, std::nullopt, o);
  auto expected = [&](models::PosInterp pi) {
    Options opts = o.explain;
    opts.pos_interp = pi;
    const Result res = explain::explain(
        model, Request{.images = x, .targets = t, .methods = o.methods, .options = opts});
    detail::VitForward fwd(model, pi);
    const LogitsFn f = logits_of(model, 256);
    std::map<std::string, std::vector<double>> auc;
    for (size_t i = 0; i < o.methods.size(); ++i)
      auc[method_name(o.methods[i])] =
          deletion_insertion(f, x, res.targets, res.explanations[i].grid, 4, o.curves).deletion_auc;
    return auc;
  };
  const auto dino = expected(models::PosInterp::Dino), size = expected(models::PosInterp::Size);
  for (Method m : o.methods) {
    const std::string name = method_name(m);
    INFO(name);
    REQUIRE(r.deletion_auc.at(name).size() == 3);
    for (size_t b = 0; b < 3; ++b)
      CHECK(r.deletion_auc.at(name)[b] == doctest::Approx(dino.at(name)[b]).epsilon(1e-9));
  }
  // The two resizes give different curves here, so the check above tells them apart.
  CHECK(dino.at("attention") != size.at("attention"));
}
