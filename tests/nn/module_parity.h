// PyTorch parity of an nn module against a case of tests/fixtures/nn_modules.json (made by
// tests/fixtures/make_nn_fixtures.py): weights loaded by name, sum(m(x) * r).backward(), output,
// input gradient and every parameter gradient compared.
#pragma once
#include <nlohmann/json.hpp>

#include "nn/nn.h"
#include "test_util.h"

namespace vt_test {

inline const nlohmann::json& module_case(const std::string& name) {
  return fixture_case("nn_modules.json", name);
}

/// Loads the fixture's weights into m (float64) by name, runs sum(m(x) * r).backward() and checks
/// output, input gradient and every parameter gradient against PyTorch. Returns the output.
inline vitrine::Tensor check_parity(vitrine::nn::Module& m, const std::string& name,
                                    double tol = 1e-10) {
  using namespace vitrine;
  const auto& c = module_case(name);
  m.to(kFloat64);
  auto params = m.named_parameters();
  REQUIRE(params.size() == c.at("params").size());
  for (auto& item : params) {
    auto& n = item.first;
    auto& p = item.second;
    INFO("parameter " << n);
    REQUIRE(c.at("params").contains(n));
    NoGradGuard ng;
    p.copy_(fixture_tensor(c.at("params").at(n)));
  }
  Tensor x = fixture_tensor(c.at("input"));
  x.requires_grad_();
  Tensor y = m.forward(x);
  check_close(y, fixture_tensor(c.at("output")), tol, tol);
  ops::sum(y * fixture_tensor(c.at("r"))).backward();
  check_close(x.grad(), fixture_tensor(c.at("input_grad")), tol, tol);
  for (auto& item : params) {
    auto& n = item.first;
    auto& p = item.second;
    INFO("gradient of " << n);
    check_close(p.grad(), fixture_tensor(c.at("param_grads").at(n)), tol, tol);
  }
  return y;
}

}  // namespace vt_test
