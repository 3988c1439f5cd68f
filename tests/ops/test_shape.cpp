// Shape ops: views share storage, forward against PyTorch, gradcheck, errors.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
const char* kFile = "core_ops.json";
}

TEST_CASE("reshape: forward, view when possible, copy otherwise") {
  Tensor x = ops::arange(0, 6, 1, kFloat32);
  Tensor y = x.reshape({2, -1});
  CHECK(y.shape() == Dims{2, 3});
  CHECK(y.storage() == x.storage());
  Tensor t = y.mT();
  Tensor z = t.reshape({6});  // not viewable: copied
  CHECK(z.storage() != x.storage());
  check_close(z, {0, 3, 1, 4, 2, 5});
}
TEST_CASE("reshape: gradcheck") {
  check_grad([](const V& x) { return x[0].mT().reshape({3, 2}) * 2.0; }, {rand64({2, 3}, 1)});
}
TEST_CASE("view: forward and refusal") {
  Tensor x = ops::arange(0, 12, 1, kFloat32).reshape({3, 4});
  check_close(x.view({4, 3}).select(0, 1), {3, 4, 5});
  CHECK_ERROR_CONTAINS(x.mT().view({12}), "view", "[4, 3]", "reshape");
}
TEST_CASE("view: gradcheck") {
  check_grad([](const V& x) { return x[0].view({6}); }, {rand64({2, 3}, 2)});
}
TEST_CASE("flatten: forward and gradcheck") {
  CHECK(ops::zeros({2, 3, 4}).flatten(1).shape() == Dims{2, 12});
  check_grad([](const V& x) { return x[0].flatten(); }, {rand64({2, 2, 2}, 3)});
}

TEST_CASE("permute: forward") {
  check_forward(kFile, "permute", [](const V& x) { return x[0].permute({2, 0, 1}); });
}
TEST_CASE("permute: gradcheck") {
  check_grad_at(kFile, "permute", [](const V& x) { return x[0].permute({2, 0, 1}); });
}
TEST_CASE("transpose: forward and gradcheck") {
  Tensor x = ops::arange(0, 6, 1, kFloat32).reshape({2, 3});
  check_close(x.transpose(0, 1), {0, 3, 1, 4, 2, 5});
  CHECK(x.transpose(0, 1).storage() == x.storage());
  check_grad([](const V& v) { return v[0].transpose(0, 2); }, {rand64({2, 3, 2}, 4)});
}
TEST_CASE("squeeze/unsqueeze: forward and gradcheck") {
  Tensor x = ops::zeros({2, 1, 3});
  CHECK(x.squeeze(1).shape() == Dims{2, 3});
  CHECK(x.squeeze(0).shape() == Dims{2, 1, 3});  // not size 1: unchanged, as PyTorch
  CHECK(ops::squeeze(ops::zeros({1, 2, 1})).shape() == Dims{2});
  CHECK(x.unsqueeze(-1).shape() == Dims{2, 1, 3, 1});
  CHECK(x.unsqueeze(0).shape() == Dims{1, 2, 1, 3});
  check_grad([](const V& v) { return v[0].unsqueeze(1).squeeze(2); }, {rand64({2, 1, 3}, 5)});
  CHECK_ERROR_CONTAINS(x.unsqueeze(5), "unsqueeze", "dim 5", "out of range");
}
TEST_CASE("expand: forward") {
  check_forward(kFile, "expand", [](const V& x) { return x[0].expand({2, 3, 4}); });
}
TEST_CASE("expand: gradcheck") {
  check_grad_at(kFile, "expand", [](const V& x) { return x[0].expand({2, -1, 4}); });
}
TEST_CASE("expand: stride 0, and bad shapes") {
  Tensor x = ops::zeros({3, 1});
  CHECK(x.expand({3, 5}).strides()[1] == 0);
  CHECK_ERROR_CONTAINS(x.expand({4, 5}), "expand", "[3, 1]", "[4, 5]");
}
TEST_CASE("slice: forward") {
  check_forward(kFile, "slice_step",
                [](const V& x) { return x[0].slice(1, 1, 3).slice(2, 0, kEnd, 2); });
}
TEST_CASE("slice: gradcheck") {
  check_grad_at(kFile, "slice_step",
                [](const V& x) { return x[0].slice(1, -2, 3).slice(2, 0, kEnd, 2); });
}
TEST_CASE("slice: out of range is an error") {
  Tensor x = ops::zeros({3, 4});
  CHECK_ERROR_CONTAINS(x.slice(1, 5, 6), "slice", "start 5", "dim 1 of size 4", "[3, 4]");
  CHECK_ERROR_CONTAINS(x.slice(0, 0, 9), "slice", "end 9");
  CHECK_ERROR_CONTAINS(x.slice(0, 2, 1), "slice", "before start");
  CHECK_ERROR_CONTAINS(x.slice(0, 0, 2, 0), "slice", "step");
}
TEST_CASE("narrow: forward, gradcheck and range errors") {
  Tensor x = ops::arange(0, 10, 1, kFloat32);
  check_close(x.narrow(0, 2, 3), {2, 3, 4});
  check_grad([](const V& v) { return v[0].narrow(1, 1, 2); }, {rand64({2, 4}, 6)});
  CHECK_ERROR_CONTAINS(x.narrow(0, 8, 3), "narrow", "start 8", "length 3", "size 10");
}
TEST_CASE("select: forward and gradcheck") {
  Tensor x = ops::arange(0, 6, 1, kFloat32).reshape({2, 3});
  check_close(x.select(1, -1), {2, 5});
  check_grad([](const V& v) { return v[0].select(0, 1); }, {rand64({3, 2}, 7)});
  CHECK_ERROR_CONTAINS(x.select(0, 2), "select", "index 2");
}
TEST_CASE("contiguous: forward and gradcheck") {
  Tensor x = ops::arange(0, 6, 1, kFloat32).reshape({2, 3}).mT();
  CHECK(!x.is_contiguous());
  Tensor c = x.contiguous();
  CHECK(c.is_contiguous());
  check_close(c, {0, 3, 1, 4, 2, 5});
  check_grad([](const V& v) { return v[0].mT().contiguous(); }, {rand64({2, 3}, 8)});
}
TEST_CASE("cat: forward") {
  check_forward(kFile, "cat", [](const V& x) { return ops::cat({x[0], x[1]}, 1); });
}
TEST_CASE("cat: gradcheck") {
  check_grad_at(kFile, "cat", [](const V& x) { return ops::cat({x[0], x[1]}, -2); });
}
TEST_CASE("cat: bad shapes") {
  CHECK_ERROR_CONTAINS(ops::cat({ops::zeros({2, 3}), ops::zeros({3, 3})}, 1), "cat", "[3, 3]",
                       "[2, 3]");
  CHECK_ERROR_CONTAINS(ops::cat({}, 0), "cat", "non-empty");
}
TEST_CASE("stack: forward") {
  check_forward(kFile, "stack", [](const V& x) { return ops::stack({x[0], x[1]}, 1); });
}
TEST_CASE("stack: gradcheck") {
  check_grad_at(kFile, "stack", [](const V& x) { return ops::stack({x[0], x[1]}, -1); });
}
TEST_CASE("pad: forward") {
  check_forward(kFile, "pad", [](const V& x) { return ops::pad(x[0], {1, 2, 0, 1}, 0.5); });
}
TEST_CASE("pad: gradcheck") {
  check_grad_at(kFile, "pad", [](const V& x) { return ops::pad(x[0], {1, 2, 0, 1}, 0.5); });
}
TEST_CASE("pad: bad calls") {
  CHECK_ERROR_CONTAINS(ops::pad(ops::zeros({2}), {1, 1, 1, 1}), "pad", "4 pad values");
  CHECK_ERROR_CONTAINS(ops::pad(ops::zeros({2}), {-1, 0}), "pad", "negative");
}
TEST_CASE("reshape: wrong element count is an error") {
  CHECK_ERROR_CONTAINS(ops::zeros({2, 3}).reshape({4, 2}), "reshape", "[4, 2]", "[2, 3]",
                       "6 elements");
  CHECK_ERROR_CONTAINS(ops::zeros({2, 3}).reshape({-1, -1}), "reshape", "-1");
  CHECK_ERROR_CONTAINS(ops::zeros({2, 3}).reshape({-1, 4}), "reshape", "[-1, 4]");
}
TEST_CASE("permute: bad dims") {
  CHECK_ERROR_CONTAINS(ops::zeros({2, 3}).permute({0, 0}), "permute", "twice");
  CHECK_ERROR_CONTAINS(ops::zeros({2, 3}).permute({0}), "permute", "1 dims given");
}
TEST_CASE("views: writes through a view show in the base and bump the shared version") {
  Tensor x = ops::zeros({2, 3});
  Tensor row = x.select(0, 1);
  uint64_t v = x.version();
  row.fill_(7);
  CHECK(x.version() == v + 1);
  check_close(x, {0, 0, 0, 7, 7, 7});
}
