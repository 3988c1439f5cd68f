#include "test_util.h"

#include <cmath>

namespace vt_test {

void check_close(const Tensor& t, const std::vector<double>& expected, double atol, double rtol) {
  REQUIRE(t.defined());
  std::vector<double> v = t.to_vector<double>();
  REQUIRE_MESSAGE(v.size() == expected.size(), "tensor has " << v.size() << " elements, expected "
                                                              << expected.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double tol = atol + rtol * std::fabs(expected[i]);
    bool ok = std::fabs(v[i] - expected[i]) <= tol || (std::isnan(v[i]) && std::isnan(expected[i]));
    CHECK_MESSAGE(ok, "element " << i << ": got " << v[i] << ", expected " << expected[i]);
  }
}

void check_close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  REQUIRE(a.shape() == b.shape());
  check_close(a, b.to_vector<double>(), atol, rtol);
}

void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  GradcheckResult r = gradcheck(fn, inputs, opt);
  CHECK_MESSAGE(r.ok, r.message);
}

Tensor rand64(const Dims& shape, uint64_t seed, double scale, double shift) {
  Generator g(seed);
  Tensor t = ops::randn(shape, g, kFloat64) * scale + shift;
  t = t.detach();
  t.requires_grad_();
  return t;
}

std::string fixture(const std::string& name) { return std::string(VITRINE_FIXTURES) + "/" + name; }

}  // namespace vt_test
