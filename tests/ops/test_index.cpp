// index_select and gather: forward against PyTorch, gradcheck (scatter-add backward), errors.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
const char* kFile = "core_ops.json";
Tensor sel_idx() { return ops::from_vector(std::vector<int64_t>{2, 0, 2}); }
Tensor gat_idx() { return ops::from_vector(std::vector<int64_t>{0, 2, 1, 2, 1, 1, 0, 0}, {2, 4}); }
}  // namespace

TEST_CASE("index_select: forward") {
  check_forward(kFile, "index_select",
                [](const V& x) { return ops::index_select(x[0], 1, sel_idx()); });
}
TEST_CASE("index_select: gradcheck (repeated indices accumulate)") {
  check_grad_at(kFile, "index_select",
                [](const V& x) { return ops::index_select(x[0], 1, sel_idx()); });
  Tensor x = rand64({2, 3}, 1);
  ops::sum(ops::index_select(x, 1, sel_idx())).backward();
  check_close(x.grad(), {1, 0, 2, 1, 0, 2});
}
TEST_CASE("gather: forward") {
  check_forward(kFile, "gather", [](const V& x) { return ops::gather(x[0], 1, gat_idx()); });
}
TEST_CASE("gather: gradcheck") {
  check_grad_at(kFile, "gather", [](const V& x) { return ops::gather(x[0], 1, gat_idx()); });
}
TEST_CASE("index ops: second derivative through the scatter-add backward") {
  Tensor x = rand64({2, 3}, 2);
  check_grad(
      [](const V& v) {
        Tensor y = ops::gather(v[0], 1, gat_idx());
        Tensor g = grad({ops::sum(y * y)}, {v[0]}, {}, true, true)[0];
        return g;
      },
      {x});
}
TEST_CASE("index ops: bad indices") {
  Tensor x = ops::zeros({2, 3});
  CHECK_ERROR_CONTAINS(ops::index_select(x, 1, ops::from_vector(std::vector<int64_t>{3})),
                       "index_select", "index 3", "size 3");
  CHECK_ERROR_CONTAINS(ops::index_select(x, 1, ops::tensor({1})), "index_select", "int64");
  CHECK_ERROR_CONTAINS(ops::gather(x, 1, ops::from_vector(std::vector<int64_t>{0, 1})), "gather",
                       "dims");
}
