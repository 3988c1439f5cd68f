// einsum (ops/sequence.h): every equation of the fixture (tests/fixtures/sequence_ops.json, cases
// "einsum_*") against PyTorch in float64 and float32 and by gradcheck, the views it takes, and
// the errors that name the equation.
#include "ops/sequence.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
const char* kFile = "sequence_ops.json";

std::vector<std::string> einsum_cases() {
  std::vector<std::string> names;
  for (const auto& [name, c] : fixture_json(kFile).at("cases").items())
    if (name.rfind("einsum_", 0) == 0) names.push_back(name);
  return names;
}
std::string equation(const std::string& name) {
  return fixture_case(kFile, name).at("equation").get<std::string>();
}
}  // namespace

TEST_CASE("einsum: forward against PyTorch") {
  const auto names = einsum_cases();
  CHECK(names.size() == 18);
  for (const std::string& name : names) {
    INFO(name << ": " << equation(name));
    const std::string eq = equation(name);
    check_forward(kFile, name, [&](const V& x) { return ops::einsum(eq, x); });
  }
}

TEST_CASE("einsum: gradcheck") {
  for (const std::string& name : einsum_cases()) {
    INFO(name << ": " << equation(name));
    const std::string eq = equation(name);
    check_grad_at(kFile, name, [&](const V& x) { return ops::einsum(eq, x); });
  }
}

TEST_CASE("einsum: second derivative through the diagonal and the product") {
  check_grad(
      [](const V& v) {
        Tensor y = ops::einsum("ii,ij->j", {v[0], v[1]});
        return grad({ops::sum(y * y)}, {v[0], v[1]}, {}, true, true)[0];
      },
      {rand64({3, 3}, 61), rand64({3, 2}, 62)});
}

TEST_CASE("einsum: the same as matmul, the diagonal by hand") {
  Tensor a = ops::randn({2, 3, 4}), b = ops::randn({2, 4, 5});
  check_close(ops::einsum("bij,bjk->bik", {a, b}), ops::matmul(a, b), 1e-6);
  Tensor m = ops::arange(0, 9, 1, kFloat32).reshape({3, 3});
  check_close(ops::einsum("ii->i", {m}), {0, 4, 8});
  check_close(ops::einsum("ii", {m}), {12});
  check_close(ops::einsum("ij->", {m}), {36});
  CHECK(ops::einsum("ij->ji", {m}).storage() == m.storage());  // a view
}

TEST_CASE("einsum: errors name the equation") {
  Tensor a = ops::ones({2, 3}), b = ops::ones({4, 5});
  CHECK_ERROR_CONTAINS(ops::einsum("ij,jk->ik", {a, b}), "einsum", "\"ij,jk->ik\"",
                       "subscript j has size 4 in operand 1", "size 3");
  CHECK_ERROR_CONTAINS(ops::einsum("ij,jk->ik", {a}), "einsum", "\"ij,jk->ik\"", "2 operand terms",
                       "1 operand was");
  CHECK_ERROR_CONTAINS(ops::einsum("ij", {a, b}), "einsum", "\"ij\"", "2 operands were");
  CHECK_ERROR_CONTAINS(ops::einsum("ij->ik", {a}), "einsum", "output subscript k",
                       "does not appear");
  CHECK_ERROR_CONTAINS(ops::einsum("ij->ii", {a}), "einsum", "output subscript i",
                       "more than once");
  CHECK_ERROR_CONTAINS(ops::einsum("i1->i", {a}), "einsum", "invalid subscript '1' at index 1",
                       "\"i1->i\"");
  CHECK_ERROR_CONTAINS(ops::einsum("ijk->i", {a}), "einsum", "\"ijk->i\"", "operand 0 has 2 dims",
                       "3 subscripts");
  CHECK_ERROR_CONTAINS(ops::einsum("i.j", {a}), "einsum", "'.' at index 1", "ellipsis");
  CHECK_ERROR_CONTAINS(ops::einsum("ii->i", {a}), "einsum", "subscript i is repeated", "[2, 3]");
  CHECK_ERROR_CONTAINS(ops::einsum("ij->j->i", {a}), "einsum", "invalid subscript '-'");
  CHECK_ERROR_CONTAINS(
      ops::einsum("ij", {ops::from_vector(std::vector<int64_t>{1, 2}).reshape({1, 2})}), "einsum",
      "int64");
}
