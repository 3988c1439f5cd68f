// models/vit: parity with PyTorch's Vision Transformers. tests/fixtures/make_vit_fixtures.py builds
// small random-weight models -- torchvision's own VisionTransformer (with and without the
// representation layer), timm / DINO and DINOv2-with-registers re-created with timm's names and
// formulas, timm with reg_token / no_embed_class / fc_norm, timm's layout with an overlapping
// patch embedding or a convolutional stem (BatchNorm in eval mode), Hugging Face's
// ViTForImageClassification, and lucidrains' vit-pytorch (an attention of inner width heads x
// dim_head other than dim, no final norm) -- and saves their weights in their own naming
// (tests/fixtures/vit_<model>.safetensors) with inputs and float64 outputs (vit_parity.json).
// Each model is loaded with load_vit(path, config), run in float32 with capture(true, true), and
// its logits, every layer's attention probabilities, the gradient of one class logit with respect
// to the input and to the attention probabilities, and the forwards at other input sizes (DINO's
// and timm's position-embedding interpolation) must match within 1e-4 absolute.
// Set VITRINE_PARITY_REPORT=1 to print the largest error of every comparison.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "models/vit.h"
#include "nn/state.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using models::PosInterp;
using models::ViTConfig;
using models::ViTForwardOptions;
using models::ViTNaming;
using nlohmann::json;

namespace {

constexpr double kTol = 1e-4;  // the bar: absolute, float32
constexpr const char* kFile = "vit_parity.json";

const json& model_case(const std::string& model) { return fixture_case(kFile, model); }

/// The largest |got - expected| (infinity on a NaN or a shape mismatch); checks it is <= kTol.
double check_parity(const std::string& what, const Tensor& got, const json& expected) {
  REQUIRE_MESSAGE(got.defined(), what << ": undefined tensor");
  Tensor e = fixture_tensor(expected);
  CHECK_MESSAGE(got.shape() == e.shape(),
                what << ": shape " << got.shape().str() << ", expected " << e.shape().str());
  if (!(got.shape() == e.shape())) return std::numeric_limits<double>::infinity();
  std::vector<double> g = got.to_vector<double>(), v = e.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double d = std::fabs(g[i] - v[i]);
    if (std::isnan(d)) d = std::numeric_limits<double>::infinity();
    if (d > worst) {
      worst = d;
      at = i;
    }
  }
  CHECK_MESSAGE(worst <= kTol, what << ": max |error| " << worst << " at element " << at << " (got "
                                    << (g.empty() ? 0 : g[at]) << ", expected "
                                    << (v.empty() ? 0 : v[at]) << ")");
  if (std::getenv("VITRINE_PARITY_REPORT"))
    fmt::print("vit parity: {:<42} max |error| {:.2e}\n", what, worst);
  return worst;
}

ViTConfig config_of(const std::string& model) {
  const json& c = model_case(model);
  if (c.contains("hf_config")) return models::config_from_hf(c.at("hf_config"));
  return ViTConfig::from_json(c.at("config"));
}

/// The fixture model loaded as a user would: load_vit with the config given explicitly, then
/// eval() (a stem's BatchNorms use their running statistics, as the PyTorch model's did).
std::shared_ptr<models::VisionTransformer> load(const std::string& model) {
  auto vit = models::load_vit(fixture(model_case(model).at("file")), config_of(model));
  REQUIRE(vit != nullptr);
  vit->eval();
  vit->capture(true, true);
  return vit;
}

Tensor input(const json& j) { return fixture_tensor(j.at("input"), kFloat32); }

void check_logits(const std::string& model) {
  auto vit = load(model);
  Tensor logits = vit->forward(input(model_case(model)));
  CHECK(logits.dtype() == kFloat32);
  check_parity(model + ": logits", logits, model_case(model).at("logits"));
}

void check_attention_maps(const std::string& model) {
  const json& c = model_case(model);
  auto vit = load(model);
  vit->forward(input(c));
  std::vector<Tensor> attn = vit->attentions();
  REQUIRE(attn.size() == c.at("attentions").size());
  for (size_t l = 0; l < attn.size(); ++l)
    check_parity(fmt::format("{}: attention layer {}", model, l), attn[l], c.at("attentions")[l]);
  // DINO's get_last_selfattention: the same probabilities without running the head.
  check_parity(model + ": get_last_selfattention", vit->get_last_selfattention(input(c)),
               c.at("attentions").back());
}

/// Backward of sum_b logits[b, c]: the input's and the attention probabilities' gradients.
void check_gradients(const std::string& model, bool attention) {
  const json& c = model_case(model);
  auto vit = load(model);
  Tensor x = input(c);
  x.requires_grad_();
  Tensor logits = vit->forward(x);
  logits.select(1, c.at("grad_class").get<int64_t>()).sum().backward();
  if (!attention) {
    check_parity(model + ": input gradient", x.grad(), c.at("input_grad"));
    return;
  }
  std::vector<Tensor> grads = vit->attention_grads();
  REQUIRE(grads.size() == c.at("attention_grads").size());
  for (size_t l = 0; l < grads.size(); ++l)
    check_parity(fmt::format("{}: attention gradient layer {}", model, l), grads[l],
                 c.at("attention_grads")[l]);
}

/// The forwards at another input size, whose position embedding is interpolated in `mode`.
void check_resized(const std::string& model, const std::string& mode) {
  const json& c = model_case(model);
  ViTForwardOptions opt;
  opt.pos_interp = mode == "dino" ? PosInterp::Dino : PosInterp::Size;
  int found = 0;
  for (const json& r : c.at("resized")) {
    if (r.at("mode") != mode) continue;
    ++found;
    auto vit = load(model);
    Tensor x = input(r);
    std::string what = fmt::format("{}: {} {}x{}", model, mode, x.size(2), x.size(3));
    check_parity(what + " logits", vit->forward(x, opt), r.at("logits"));
    REQUIRE_FALSE(vit->attentions().empty());
    check_parity(what + " last attention", vit->attentions().back(), r.at("last_attention"));
    auto [gh, gw] = vit->last_grid();
    CHECK(gh == x.size(2) / vit->config().patch);
    CHECK(gw == x.size(3) / vit->config().patch);
  }
  REQUIRE_MESSAGE(found > 0, model << " has no " << mode << " case");
}

ViTNaming naming_from(const std::string& s) {
  if (s == "vitrine") return ViTNaming::Vitrine;
  if (s == "timm") return ViTNaming::Timm;
  if (s == "torchvision") return ViTNaming::Torchvision;
  if (s == "huggingface") return ViTNaming::HuggingFace;
  if (s == "dinov2") return ViTNaming::Dinov2;
  FAIL("unknown naming in the fixture: " << s);
  return ViTNaming::Vitrine;
}

void check_naming(const std::string& model) {
  const json& c = model_case(model);
  nn::SafetensorsFile f = nn::read_safetensors(fixture(c.at("file")));
  CHECK(f.metadata.count(nn::kConfigKey) == 0);  // the config comes from the test, as a user's
  ViTNaming n = models::detect_naming(f.tensors);
  bool ok = false;
  for (const json& s : c.at("naming")) ok = ok || n == naming_from(s);
  CHECK_MESSAGE(ok, model << ": detected " << models::naming_name(n) << ", expected one of "
                          << c.at("naming").dump());
}

}  // namespace

#define VIT_PARITY_CASES(model)                                                       \
  TEST_CASE("vit parity: " model ": naming detected") { check_naming(model); }        \
  TEST_CASE("vit parity: " model ": logits") { check_logits(model); }                 \
  TEST_CASE("vit parity: " model ": attention maps") { check_attention_maps(model); } \
  TEST_CASE("vit parity: " model ": input gradient") { check_gradients(model, false); }

VIT_PARITY_CASES("tv")
VIT_PARITY_CASES("tv_rep")
VIT_PARITY_CASES("timm")
VIT_PARITY_CASES("dinov2_reg")
VIT_PARITY_CASES("timm_avg")
VIT_PARITY_CASES("overlap")
VIT_PARITY_CASES("stem")
VIT_PARITY_CASES("hf")
VIT_PARITY_CASES("vitpytorch")

// torchvision computes its attention with need_weights=False, so its fixtures have no attention
// gradients; the re-created models keep theirs (retain_grad on the probabilities).
TEST_CASE("vit parity: timm: attention gradients") { check_gradients("timm", true); }
TEST_CASE("vit parity: dinov2_reg: attention gradients") { check_gradients("dinov2_reg", true); }
TEST_CASE("vit parity: timm_avg: attention gradients") { check_gradients("timm_avg", true); }
TEST_CASE("vit parity: overlap: attention gradients") { check_gradients("overlap", true); }
TEST_CASE("vit parity: stem: attention gradients") { check_gradients("stem", true); }
TEST_CASE("vit parity: hf: attention gradients") { check_gradients("hf", true); }
TEST_CASE("vit parity: vitpytorch: attention gradients") { check_gradients("vitpytorch", true); }

TEST_CASE("vit parity: timm: dino interpolation") { check_resized("timm", "dino"); }
TEST_CASE("vit parity: timm: size interpolation") { check_resized("timm", "size"); }
TEST_CASE("vit parity: dinov2_reg: dino interpolation") { check_resized("dinov2_reg", "dino"); }
TEST_CASE("vit parity: timm_avg: size interpolation") { check_resized("timm_avg", "size"); }

TEST_CASE("vit parity: fixture configs and parameter counts") {
  // The HF case is loaded through config_from_hf(config.json); it must give our config.
  ViTConfig hf = config_of("hf");
  ViTConfig ours = ViTConfig::from_json(model_case("hf").at("config"));
  CHECK(hf.image_h == ours.image_h);
  CHECK(hf.image_w == ours.image_w);
  CHECK(hf.patch == ours.patch);
  CHECK(hf.channels == ours.channels);
  CHECK(hf.num_classes == ours.num_classes);
  CHECK(hf.dim == ours.dim);
  CHECK(hf.depth == ours.depth);
  CHECK(hf.heads == ours.heads);
  CHECK(hf.mlp_dim == ours.mlp_dim);
  CHECK(hf.pool == ours.pool);
  CHECK(hf.representation == ours.representation);
  CHECK(hf.qkv_bias == ours.qkv_bias);
  CHECK(hf.eps == ours.eps);
  CHECK(hf.registers == ours.registers);
  CHECK(hf.layer_scale == ours.layer_scale);
  CHECK(hf.no_embed_class == ours.no_embed_class);
  CHECK(hf.fc_norm == ours.fc_norm);
  for (const char* model :
       {"tv", "tv_rep", "timm", "dinov2_reg", "timm_avg", "overlap", "stem", "hf", "vitpytorch"}) {
    INFO("model " << model);
    // The fixture configs are written as ViTConfig::to_json writes them.
    const json& written = model_case(model).at("config");
    CHECK_MESSAGE(ViTConfig::from_json(written).to_json() == written,
                  ViTConfig::from_json(written).to_json().dump() << " != " << written.dump());
    // The model has the parameter (and buffer) count of its checkpoint (ignored keys aside).
    auto vit = load(model);
    nn::SafetensorsFile f = nn::read_safetensors(fixture(model_case(model).at("file")));
    int64_t in_file = 0, in_model = 0;
    for (const auto& [name, t] : f.tensors)
      if (name != "mask_token") in_file += t.numel();
    for (const auto& [name, t] : vit->state_dict()) in_model += t.numel();
    CHECK(in_model == in_file);
  }
}

TEST_CASE("vit parity: the CIFAR recipe's vit-pytorch model has 699,530 parameters") {
  // image 64, patch 4, depth 4, dim 128, 4 heads of width 64, MLP 128, 10 classes, to_qkv without
  // bias, and a head that is a Linear alone (final_norm false); with the final norm, 699,786.
  ViTConfig c;
  c.image_h = c.image_w = 64;
  c.patch = 4;
  c.depth = 4;
  c.dim = 128;
  c.heads = 4;
  c.dim_head = 64;
  c.mlp_dim = 128;
  c.num_classes = 10;
  c.qkv_bias = false;
  c.final_norm = false;
  Generator gen(0);
  CHECK(models::VisionTransformer(c, gen).num_parameters() == 699530);
  c.final_norm = true;
  CHECK(models::VisionTransformer(c, gen).num_parameters() == 699786);
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"dim", 30}, {"heads", 4}}), "not divisible",
                       "dim_head");
  CHECK(ViTConfig::from_json({{"dim", 30}, {"heads", 4}, {"dim_head", 8}}).inner_dim() == 32);
}
