// ViTConfig::init "torchvision" against torchvision's own VisionTransformer.__init__, and
// "vit-pytorch" and "dino" against re-creations of their sources' __init__ (neither package is in
// Debian) (tests/fixtures/vit_init.json, made by make_init_fixtures.py): over 8 seeds on each side,
// every tensor's mean, standard deviation and largest magnitude, and the tensors a source sets
// exactly (zero head, zero biases, class token, LayerNorm's ones) to the bit. The random numbers
// differ (ours are not torch's), so the statistics are compared within their sampling error.
#include <cmath>
#include <string>

#include "models/vit.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using models::ViTConfig;
using nlohmann::json;

TEST_CASE("vit init: torchvision's, vit-pytorch's and DINO's initial tensors, in distribution") {
  const json& doc = fixture_json("vit_init.json");
  const int64_t seeds = doc.at("seeds").get<int64_t>();
  for (const auto& item : doc.at("cases").items()) {
    const std::string name = item.key();  // (clang 14: no structured binding in INFO's lambda)
    const json& c = item.value();
    INFO(name);
    const ViTConfig config = ViTConfig::from_json(c.at("config"));
    CHECK(config.init == (name == "vit-pytorch" || name == "dino" ? name : "torchvision"));
    // The source's names -> ours: torchvision's through the importer's own mapping; the
    // re-creations' are ours already.
    nn::NamedTensors tv;
    for (const auto& [tv_name, s] : c.at("tensors").items())
      tv.emplace_back(tv_name, ops::zeros(Dims(s.at("shape").get<std::vector<int64_t>>())));
    const nn::NamedTensors ours_named =
        c.at("names") == "torchvision"
            ? models::to_vitrine_names(tv, models::ViTNaming::Torchvision)
            : tv;
    REQUIRE(ours_named.size() == tv.size());
    // Our tensors of `seeds` models, each flattened and concatenated, by our name.
    std::map<std::string, std::vector<Tensor>> values;
    for (int64_t seed = 0; seed < seeds; ++seed) {
      Generator g(static_cast<uint64_t>(seed));
      models::VisionTransformer m(config, g);
      for (const auto& [n, t] : m.state_dict()) values[n].push_back(t.to(kFloat64).reshape({-1}));
    }
    REQUIRE(values.size() == tv.size());
    for (size_t i = 0; i < tv.size(); ++i) {
      const std::string& ours = ours_named[i].first;
      INFO(tv[i].first << " = " << ours);
      REQUIRE(values.count(ours) == 1);
      const json& s = c.at("tensors").at(tv[i].first);
      const Tensor v = ops::cat(values.at(ours), 0);
      const double n = static_cast<double>(v.numel());
      const double mean = ops::mean(v).item();
      const double sd = std::sqrt(ops::mean((v - mean) * (v - mean)).item());
      const double max_abs = ops::max(ops::abs(v)).item();
      const double tv_mean = s.at("mean").get<double>(), tv_sd = s.at("std").get<double>();
      if (s.at("zero").get<bool>()) {
        CHECK(max_abs == 0);  // torchvision's zeros: the head, biases, the class token
        continue;
      }
      if (tv_sd == 0) {  // a constant (LayerNorm's weight of ones): the same, exactly
        CHECK(sd == 0);
        CHECK(mean == tv_mean);
        continue;
      }
      // Both sides are samples of n values: a standard deviation's sampling error is about
      // sd / sqrt(2 n) (normal; less for uniform), a mean's sd / sqrt(n); 5 of each on the two
      // sides together, plus 2% for the truncations' and bounds' small differences.
      CHECK(std::abs(sd - tv_sd) <= tv_sd * (5 * std::sqrt(1 / n) + 0.02));
      CHECK(std::abs(mean - tv_mean) <= 5 * tv_sd * std::sqrt(2 / n));
      // A uniform's bound (max / sd = sqrt 3, the xavier and kaiming weights): reached within a
      // fraction of a percent by thousands of samples (below 0.99 of it with probability
      // 0.99^n). (A normal's largest value varies too much with n to compare.)
      const double tv_max = s.at("max_abs").get<double>();
      if (tv_max / tv_sd < 2 && n >= 2000) {
        CHECK(max_abs <= tv_max * 1.01);
        CHECK(max_abs >= tv_max * 0.99);
      }
    }
  }
}

TEST_CASE("vit init: timm's by default, torchvision's by name, and a clear error otherwise") {
  ViTConfig c = ViTConfig::preset("fmnist");
  CHECK(c.init == "timm");
  CHECK(c.to_json().at("init") == "timm");
  json j = c.to_json();
  j["init"] = "torchvision";
  CHECK(ViTConfig::from_json(j).init == "torchvision");
  j["init"] = "xavier";
  CHECK_ERROR_CONTAINS(ViTConfig::from_json(j), "init 'xavier'",
                       "timm, torchvision, vit-pytorch or dino");
  // timm's head draws trunc_normal(0.02); torchvision's starts at zero, also after reset_head.
  Generator g(3);
  models::VisionTransformer timm(c, g);
  CHECK(ops::max(ops::abs(timm.head->weight)).item() > 0);
  ViTConfig tvc = c;
  tvc.init = "torchvision";
  models::VisionTransformer tv(tvc, g);
  CHECK(ops::max(ops::abs(tv.head->weight)).item() == 0);
  tv.reset_head(3, g);
  CHECK(tv.head->weight.shape() == Dims{3, c.dim});
  CHECK(ops::max(ops::abs(tv.head->weight)).item() == 0);
  CHECK(ops::max(ops::abs(tv.cls_token)).item() == 0);
}

TEST_CASE("vit init: vit-pytorch's new head is nn.Linear's default, DINO's class token 0.02") {
  ViTConfig c = ViTConfig::preset("fmnist");
  c.init = "vit-pytorch";
  Generator g(5);
  models::VisionTransformer vp(c, g);
  // nn.Linear's default: uniform within 1 / sqrt(fan_in), also for a head drawn again.
  const double bound = 1 / std::sqrt(static_cast<double>(c.dim));
  vp.reset_head(7, g);
  CHECK(ops::max(ops::abs(vp.head->weight)).item() <= bound);
  CHECK(ops::max(ops::abs(vp.head->weight)).item() > 0.9 * bound);
  CHECK(ops::max(ops::abs(vp.head->bias)).item() <= bound);
  c.init = "dino";
  models::VisionTransformer dino(c, g);
  const double sd = std::sqrt(ops::mean(dino.cls_token * dino.cls_token).item());
  CHECK(sd > 0.01);  // timm's is 1e-6
  CHECK(sd < 0.04);
}
