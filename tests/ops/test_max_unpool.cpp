// max_pool2d_with_indices and max_unpool2d (ops/pool.h), nn::MaxPool2d::forward_with_indices and
// nn::MaxUnpool2d (nn/pool.h) against PyTorch 1.13 (tests/fixtures/norm_extras.json, made by
// make_norm_extras_fixtures.py): values, indices, the unpooled output at the default and a given
// output_size, the gradient through pool and unpool, and unpool's own gradient, in float64 and
// float32; duplicate indices; float64 gradchecks; bad inputs and their messages.
#include "nn/pool.h"
#include "ops/pool.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "norm_extras.json";

std::pair<int64_t, int64_t> pair_of(const json& j) {
  return {j[0].get<int64_t>(), j[1].get<int64_t>()};
}

void check_case(const std::string& name, DType dtype, double tol) {
  INFO(name << ", " << dtype_name(dtype));
  const json& c = fixture_json(kFile).at("unpool").at(name);
  const auto k = pair_of(c["kernel"]), s = pair_of(c["stride"]), p = pair_of(c["padding"]);
  const Dims os =
      c["output_size"].is_null() ? Dims{} : Dims(c["output_size"].get<std::vector<int64_t>>());
  Tensor x = fixture_tensor(c["input"], dtype).requires_grad_();
  ops::ValuesIndices vi = ops::max_pool2d_with_indices(x, k, s, p);
  check_close(vi.values, fixture_tensor(c["values"]).to_vector<double>(), tol, tol);
  CHECK(vi.indices.dtype() == kInt64);
  CHECK(vi.indices.to_vector<double>() == fixture_tensor(c["indices"]).to_vector<double>());
  // The indices' values are the same without a gradient wanted.
  {
    NoGradGuard no_grad;
    CHECK(ops::max_pool2d_with_indices(x, k, s, p).indices.to_vector<int64_t>() ==
          vi.indices.to_vector<int64_t>());
  }
  Tensor y = ops::max_unpool2d(vi.values, vi.indices, k, s, p, os);
  check_close(y, fixture_tensor(c["unpooled"]).to_vector<double>(), tol, tol);
  const Tensor r = fixture_tensor(c["r"], dtype);
  ops::sum(y * r).backward();
  check_close(x.grad(), fixture_tensor(c["grad"]).to_vector<double>(), tol, tol);
  Tensor z = fixture_tensor(c["z"], dtype).requires_grad_();
  Tensor yz = ops::max_unpool2d(z, vi.indices.detach(), k, s, p, os);
  check_close(yz, fixture_tensor(c["unpooled_z"]).to_vector<double>(), tol, tol);
  ops::sum(yz * r).backward();
  check_close(z.grad(), fixture_tensor(c["grad_z"]).to_vector<double>(), tol, tol);
}

}  // namespace

TEST_CASE("max unpool: max_pool2d_with_indices and max_unpool2d against PyTorch") {
  int n = 0;
  for (const auto& item : fixture_json(kFile).at("unpool").items()) {
    check_case(item.key(), kFloat64, 1e-12);
    check_case(item.key(), kFloat32, 1e-6);
    ++n;
  }
  CHECK(n == 5);
}

TEST_CASE("max unpool: the modules, unbatched input and the repr") {
  nn::MaxPool2d pool(2);
  nn::MaxUnpool2d unpool(2);
  CHECK(unpool.extra_repr() == "kernel_size=2, stride=2, padding=0");
  CHECK(nn::MaxUnpool2d({3, 2}, nn::Size2{2, 1}, nn::Size2{1, 0}).extra_repr() ==
        "kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)");
  const Tensor x = ops::from_vector(std::vector<double>{1, 5, 2, 0,  //
                                                        3, 4, 8, 7,  //
                                                        6, 0, 1, 2,  //
                                                        9, 2, 3, 4},
                                    {1, 4, 4}, kFloat64);
  const ops::ValuesIndices vi = pool.forward_with_indices(x.unsqueeze(0));
  check_close(vi.values, {5, 8, 9, 4});
  CHECK(vi.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 6, 12, 15});
  check_close(pool(x.unsqueeze(0)), vi.values);
  // Unbatched [C, H, W].
  const Tensor y = unpool.forward(ops::squeeze(vi.values, 0), ops::squeeze(vi.indices, 0));
  CHECK(y.shape() == Dims{1, 4, 4});
  check_close(y, {0, 5, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 9, 0, 0, 4});
  // output_size as [B, C, H, W] and as [H, W].
  CHECK(unpool.forward(vi.values, vi.indices, {1, 1, 5, 5}).shape() == Dims{1, 1, 5, 5});
  CHECK(unpool.forward(vi.values, vi.indices, {5, 4}).shape() == Dims{1, 1, 5, 4});
  CHECK_THROWS_WITH_AS(unpool(vi.values),
                       doctest::Contains("MaxUnpool2d: forward needs the indices"), Error);
}

TEST_CASE(
    "max unpool: of two entries naming one index the last is written, both get its "
    "gradient") {
  Tensor x =
      ops::from_vector(std::vector<double>{1, 2, 3}, {1, 1, 1, 3}, kFloat64).requires_grad_();
  const Tensor idx = ops::from_vector(std::vector<int64_t>{0, 0, 1}, {1, 1, 1, 3});
  Tensor y = ops::max_unpool2d(x, idx, {1, 2}, {1, 1}, {0, 0});  // default output 1 x 4
  CHECK(y.shape() == Dims{1, 1, 1, 4});
  check_close(y, {2, 3, 0, 0});
  ops::sum(y * ops::from_vector(std::vector<double>{10, 20, 30, 40}, {1, 1, 1, 4}, kFloat64))
      .backward();
  check_close(x.grad(), {10, 10, 20});
}

TEST_CASE("max unpool: float64 gradchecks of max_unpool2d and of pool then unpool") {
  // Windows that do not overlap: no index twice (where one is, the forward writes one value and
  // the backward gives the gradient to both, as PyTorch: no function has that derivative).
  const Tensor xp = rand64({2, 2, 5, 6}, 1);
  const ops::ValuesIndices vi = [&] {
    NoGradGuard no_grad;
    return ops::max_pool2d_with_indices(xp, {2, 2}, {2, 2}, {0, 0});
  }();
  check_grad(
      [&](const std::vector<Tensor>& in) {
        return ops::max_unpool2d(in[0], vi.indices, {2, 2}, {2, 2}, {0, 0}, {5, 6});
      },
      {rand64(vi.values.shape(), 2)});
  check_grad(
      [](const std::vector<Tensor>& in) {
        const ops::ValuesIndices p = ops::max_pool2d_with_indices(in[0], {2, 3}, {2, 3}, {0, 1});
        return ops::max_unpool2d(p.values, p.indices, {2, 3}, {2, 3}, {0, 1}, {5, 6});
      },
      {rand64({1, 3, 5, 6}, 3)});
}

TEST_CASE("max unpool: bad inputs name the op, what was given and what was expected") {
  const Tensor x = ops::zeros({1, 2, 3, 3}, kFloat32);
  const Tensor idx = ops::zeros({1, 2, 3, 3}, kInt64);
  CHECK_THROWS_WITH_AS(ops::max_unpool2d(x, ops::zeros({1, 2, 3, 2}, kInt64), {2, 2}, {2, 2}),
                       doctest::Contains("max_unpool2d: expected indices of the input's shape "
                                         "[1, 2, 3, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::max_unpool2d(x, ops::zeros({1, 2, 3, 3}), {2, 2}, {2, 2}),
                       doctest::Contains("max_unpool2d: indices must be int64, got float32"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::max_unpool2d(x, idx, {2, 2}, {2, 2}, {0, 0}, {8, 6}),
                       doctest::Contains("invalid output_size [8, 6]"), Error);
  CHECK_THROWS_WITH_AS(ops::max_unpool2d(x, idx, {2, 2}, {2, 2}, {0, 0}, {6}),
                       doctest::Contains("output_size must have 2 or 4 elements"), Error);
  const Tensor bad = ops::full({1, 2, 3, 3}, 36, kInt64);
  CHECK_THROWS_WITH_AS(ops::max_unpool2d(x, bad, {2, 2}, {2, 2}),
                       doctest::Contains("found an invalid max index 36"), Error);
  CHECK_THROWS_WITH_AS(ops::max_unpool2d(ops::zeros({2, 3}), idx, {2, 2}, {2, 2}),
                       doctest::Contains("expected x [B, C, H, W] or [C, H, W]"), Error);
  CHECK_THROWS_WITH_AS(ops::max_pool2d_with_indices(ops::zeros({2, 3, 4}), {2, 2}, {2, 2}),
                       doctest::Contains("max_pool2d_with_indices: expected x [B, C, H, W]"),
                       Error);
}
