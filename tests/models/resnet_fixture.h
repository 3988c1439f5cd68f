// The ResNet-14 of tests/fixtures/resnet_parity.json (made by make_resnet_fixtures.py) with
// PyTorch's weights, in float64: what the ResNet parity and explanation tests start from.
#pragma once
#include <memory>

#include "models/resnet.h"
#include "test_util.h"

namespace vt_test {

inline const nlohmann::json& resnet_case() {
  return fixture_case("resnet_parity.json", "resnet14");
}

inline std::shared_ptr<vitrine::models::ResNet> fixture_resnet() {
  const auto& c = resnet_case();
  auto m = std::make_shared<vitrine::models::ResNet>(
      vitrine::models::ResNetConfig::from_json(c.at("config")));
  m->to(vitrine::kFloat64);
  load_fixture_state(*m, c.at("state"));
  return m;
}

}  // namespace vt_test
