// The explanation methods for any image classifier (explain/attribution.cpp) on the CIFAR
// ResNet of tests/fixtures/resnet_parity.json: Grad-CAM at layer3 and saliency against PyTorch
// (pytorch-grad-cam's formula), SmoothGrad and integrated gradients through the same code as the
// ViT's (IG's completeness), and the errors of methods that need a ViT.
#include "explain/evaluate.h"
#include "explain/explain.h"
#include "models/attention_model.h"
#include "models/resnet.h"
#include "models/resnet_fixture.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vt_test;
namespace ex = vitrine::explain;

TEST_CASE("explain any model: a ResNet's Grad-CAM and saliency equal PyTorch's") {
  const auto& c = resnet_case();
  auto m = fixture_resnet();
  const Tensor x = fixture_tensor(c.at("input"));
  const auto want = c.at("explain").at("targets").get<std::vector<int64_t>>();
  std::vector<int64_t> got;
  const Tensor cam = ex::gradcam(*m, *m->layer3, x, {-1, -1, -1}, &got);
  CHECK(got == want);
  CHECK(cam.shape() == Dims{3, 3, 3});
  check_close(cam, fixture_tensor(c.at("explain").at("gradcam")), 1e-6, 1e-5);
  const ex::Attribution s = ex::saliency(*m, x, {-1, -1, -1});
  check_close(s.values, fixture_tensor(c.at("explain").at("saliency")), 1e-10, 1e-10);
  CHECK(m->is_training());  // left as it was found
  for (const Tensor& p : m->parameters()) CHECK(p.requires_grad());
  // another class gives another map
  CHECK(ops::max(ops::abs(ex::gradcam(*m, *m->layer3, x, {0, 1, 4}) - cam)).item() > 1e-6);
}

TEST_CASE("explain any model: every method that needs no attention runs on a ResNet") {
  auto m = fixture_resnet();
  m->eval();
  Generator g(3);
  const Tensor x = ops::randn({2, 2, 12, 8}, g, kFloat64);
  ex::Options o;
  o.samples = 4;
  o.steps = 64;
  const auto methods = ex::parse_methods("gradcam,saliency,smoothgrad,integrated-gradients");
  const auto results = ex::explain(*m, m->layer3.get(), x, {-1, 2}, methods, o, 4);
  REQUIRE(results.size() == 4);
  for (const ex::Explanation& e : results) {
    INFO(ex::method_name(e.method));
    CHECK(e.raw.shape() == Dims{2, 12, 8});
    CHECK(e.map.shape() == Dims{2, 12, 8});
    CHECK(ops::max(e.map).item() == doctest::Approx(1.0));
  }
  CHECK(results[0].grid.shape() == Dims{2, 3, 2});  // layer3: 12x8 -> 6x4 -> 3x2
  CHECK(results[1].grid.shape() == Dims{2, 3, 2});  // 4x4-pixel cells
  // integrated gradients: the attributions sum to y(x) - y(baseline), up to the rule's error
  REQUIRE(results[3].completeness_gap.size() == 2);
  for (double gap : results[3].completeness_gap) CHECK(std::abs(gap) < 1e-3);

  CHECK_ERROR_CONTAINS(
      ex::explain(*m, m->layer3.get(), x, {-1, -1}, ex::parse_methods("rollout"), o),
      "need a model that exposes its attention layers (models::AttentionModel)", "ResNet",
      "gradcam, saliency, smoothgrad and integrated-gradients apply");
  CHECK_ERROR_CONTAINS(ex::explain(*m, nullptr, x, {-1, -1}, ex::parse_methods("gradcam"), o),
                       "gradcam needs the layer");
  CHECK_ERROR_CONTAINS(ex::gradcam(*m, *m->fc, x, {-1, -1}), "feature map [B, K, h, w]", "[2, 5]");
  models::ResNet other(models::ResNetConfig::preset("resnet8"));
  CHECK_ERROR_CONTAINS(ex::gradcam(*m, *other.layer3, x, {-1, -1}), "was not called");
  CHECK_ERROR_CONTAINS(ex::saliency(*m, x, {7, 0}), "class 7 is out of range", "5 classes");
}

TEST_CASE("explain any model: the evaluation and its cascading randomisation on a ResNet") {
  auto m = fixture_resnet();  // resnet14: two blocks a stage
  m->eval();
  const auto steps = ex::randomisation_steps(*m);
  CHECK(steps == std::vector<std::string>{"fc", "layer3.1", "layer3.0", "layer2.1", "layer2.0",
                                          "layer1.1", "layer1.0", "bn1", "conv1"});
  const models::ResNetConfig config = m->config();
  const ex::ModelBuilder build = [config](Generator& gen) {
    auto fresh = std::make_shared<models::ResNet>(config, gen);
    fresh->to(kFloat64);
    return fresh;
  };
  // Three steps re-initialise fc, layer3.1 and layer3.0 (weights and running statistics) from a
  // fresh model of the same seed; everything below keeps the trained values.
  const auto copy = ex::randomised_copy(*m, build, 3, 11);
  Generator g11(11);
  const auto fresh = build(g11);
  const auto trained = m->state_dict(), got = copy->state_dict(), init = fresh->state_dict();
  for (size_t i = 0; i < trained.size(); ++i) {
    const std::string& name = trained[i].first;
    INFO(name);
    const bool randomised =
        name.starts_with("fc.") || name.starts_with("layer3.1.") || name.starts_with("layer3.0.");
    check_close(got[i].second, (randomised ? init : trained)[i].second, 0, 0);
  }
  CHECK_ERROR_CONTAINS(ex::randomised_copy(*m, build, 10, 0), "10 randomisation steps",
                       "the model has 9");
  CHECK(&ex::submodule(*m, "layer3.1") == m->layer3->named_children()[1].second.get());
  CHECK_ERROR_CONTAINS(ex::submodule(*m, "layer4"), "no submodule named 'layer4'",
                       "layer3, avgpool");

  // The whole evaluation: rows, 4x4-pixel cells (12x8 images: 6 cells, 2 a step: 3 steps),
  // one sanity column per step.
  Generator g(5);
  const Tensor x = ops::randn({3, 2, 12, 8}, g, kFloat64);
  ex::EvalOptions o;
  o.methods = ex::parse_methods("gradcam,saliency,integrated-gradients");
  o.explain.steps = 8;
  o.curves.patches_per_step = 2;
  o.sanity_images = 2;
  o.cell = 4;
  const ex::EvalResult r = ex::evaluate(*m, "layer3", build, x, {-1, -1, 1}, std::nullopt, o);
  CHECK(r.rows == std::vector<std::string>{"gradcam", "saliency", "integrated-gradients", "random",
                                           "centre"});
  CHECK(r.deletion_curve.at("gradcam").size() == 4);
  CHECK(r.deletion_auc.at("saliency").size() == 3);
  CHECK(r.sanity_steps == steps);
  REQUIRE(r.sanity.at("gradcam").size() == steps.size());
  CHECK(r.sanity.at("gradcam")[0].size() == 2);
  for (const auto& per_step : r.sanity.at("saliency"))
    for (double rho : per_step) CHECK(std::abs(rho) <= 1.0 + 1e-12);
  // Without a builder there are no sanity checks; a cell that does not tile the image is an Error.
  const ex::EvalResult no_sanity = ex::evaluate(*m, "", {}, x, {-1, -1, 1}, std::nullopt, [] {
    ex::EvalOptions e;
    e.methods = ex::parse_methods("saliency");
    return e;
  }());
  CHECK(no_sanity.sanity_steps.empty());
  ex::EvalOptions bad = o;
  bad.cell = 5;
  CHECK_ERROR_CONTAINS(ex::evaluate(*m, "layer3", build, x, {-1, -1, -1}, std::nullopt, bad),
                       "12x8 images are not a whole number of 5x5 cells");
}

namespace {

/// A transformer of a user's own, not a VisionTransformer: a 4x4 convolutional patch embedding, a
/// class token (no position embedding), one residual attention layer of 2 heads, the class
/// token's output to a linear head. It exposes its attention through models::AttentionModel.
class TinyTransformer : public nn::Module, public models::AttentionModel {
 public:
  explicit TinyTransformer(Generator& gen) {
    embed = register_module("embed", std::make_shared<nn::Conv2d>(1, 8, 4, 4, 0, true, gen));
    attn = register_module("attn",
                           std::make_shared<nn::MultiheadSelfAttention>(8, 2, true, 0.0, 0.0, gen));
    head = register_module("head", std::make_shared<nn::Linear>(8, 3, true, gen));
    cls = register_parameter("cls", ops::randn({1, 1, 8}, gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor t = (*embed)(x);  // [B, 8, gh, gw]
    grid_ = {t.size(2), t.size(3)};
    t = t.flatten(2).transpose(1, 2);  // [B, gh * gw, 8]
    t = ops::cat({cls.expand({x.size(0), 1, 8}), t}, 1);
    t = t + (*attn)(t);
    return (*head)(t.select(1, 0));
  }
  std::string type_name() const override { return "TinyTransformer"; }
  std::vector<nn::MultiheadSelfAttention*> attention_layers() override { return {attn.get()}; }
  int64_t prefix_tokens() const override { return 1; }
  std::pair<int64_t, int64_t> last_grid() const override { return grid_; }

  std::shared_ptr<nn::Conv2d> embed;
  std::shared_ptr<nn::MultiheadSelfAttention> attn;
  std::shared_ptr<nn::Linear> head;
  Tensor cls;

 private:
  std::pair<int64_t, int64_t> grid_{0, 0};
};

/// A ViT behind a module of another type: only the AttentionModel interface says where its
/// attention is.
class WrappedViT : public nn::Module, public models::AttentionModel {
 public:
  explicit WrappedViT(std::shared_ptr<models::VisionTransformer> v)
      : vit(register_module("vit", std::move(v))) {}
  Tensor forward(const Tensor& x) override { return vit->forward(x); }
  std::vector<nn::MultiheadSelfAttention*> attention_layers() override {
    return vit->attention_layers();
  }
  int64_t prefix_tokens() const override { return vit->prefix_tokens(); }
  std::pair<int64_t, int64_t> last_grid() const override { return vit->last_grid(); }
  std::shared_ptr<models::VisionTransformer> vit;
};

}  // namespace

TEST_CASE("explain any model: the attention methods read any models::AttentionModel") {
  Generator gen(11);
  auto vit = std::make_shared<models::VisionTransformer>(tiny_vit_config(8, 12, 2), gen);
  WrappedViT wrapped(vit);
  const Tensor x = ops::randn({2, 2, 8, 12}, gen, kFloat64);
  wrapped.to(kFloat64);
  ex::Options o;
  o.discard_ratio = 0.5;
  const auto methods = ex::parse_methods("attention,rollout,grad-rollout,chefer");
  // Through the interface alone, the same maps as the ViT's own path.
  const auto mine = ex::explain(wrapped, nullptr, x, {-1, 1}, methods, o);
  const auto vits = ex::explain(*vit, x, {-1, 1}, methods, o);
  REQUIRE(mine.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO(ex::method_name(mine[i].method));
    CHECK(mine[i].grid.shape() == Dims{2, 2, 3});
    check_close(mine[i].grid, vits[i].grid, 0, 0);
    check_close(mine[i].map, vits[i].map, 0, 0);
  }
  CHECK(!vit->attention_layers().front()->capturing_probs());  // capture put back

  // A model of another shape: the attention map is its layer's class-token row, averaged over
  // heads; Chefer's relevance on one layer is I + mean_h max(0, G * A), whose class-token row over
  // the patches is that of mean_h max(0, G * A).
  TinyTransformer tiny(gen);
  tiny.to(kFloat64);
  const Tensor y = ops::randn({2, 1, 8, 12}, gen, kFloat64);
  const ex::Pass pass = ex::run_pass(tiny, y, {-1, 2});
  CHECK(pass.prefix == 1);
  CHECK(pass.grid_h == 2);
  CHECK(pass.grid_w == 3);
  REQUIRE(pass.attentions.size() == 1);
  const Tensor A = pass.attentions[0], G = pass.attention_grads[0];  // [2, 2, 7, 7]
  CHECK(A.shape() == Dims{2, 2, 7, 7});
  const Tensor cls_row = ops::mean(A, {1}).select(1, 0).narrow(1, 1, 6).reshape({2, 2, 3});
  check_close(ex::attention_map(pass, 0, -1), cls_row.to(kFloat32), 1e-7, 1e-6);
  const Tensor relevance =
      ops::mean(ops::relu(A * G), {1}).select(1, 0).narrow(1, 1, 6).reshape({2, 2, 3});
  check_close(ex::chefer(pass), relevance.to(kFloat32), 1e-7, 1e-6);
  CHECK(ops::max(ops::abs(relevance)).item() > 0);
  CHECK(pass.targets[1] == 2);  // as asked; the first is the predicted class
  CHECK(pass.targets[0] == ops::argmax(tiny.forward(y), 1).to_vector<int64_t>()[0]);
  const auto all = ex::explain(tiny, tiny.embed.get(), y, {-1, 2},
                               ex::parse_methods("attention,rollout,grad-rollout,chefer,gradcam,"
                                                 "saliency"),
                               o);
  for (const ex::Explanation& e : all) {
    INFO(ex::method_name(e.method));
    CHECK(e.map.shape() == Dims{2, 8, 12});
    CHECK(std::isfinite(ops::sum(e.map).item()));
  }
}
