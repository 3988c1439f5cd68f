// Tensors: dtypes and 16-bit conversion, factories and the seeded generator, element access,
// printing, devices.
#include <omp.h>

#include "backends/checked.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

TEST_CASE("tensor: metadata of a new tensor") {
  Tensor t = ops::zeros({2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.size(-1) == 4);
  CHECK(t.strides() == Dims{12, 4, 1});
  CHECK(t.is_contiguous());
  CHECK(t.dtype() == kFloat32);
  CHECK(t.device() == kCPU);
  CHECK(t.is_leaf());
  CHECK(!t.requires_grad());
  CHECK_ERROR_CONTAINS(ops::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}), "at most 8");
  CHECK_ERROR_CONTAINS(t.size(3), "size", "dim 3");
}

TEST_CASE("dtype: conversions between all dtypes") {
  Tensor x = ops::tensor({-1.5, 0, 2.25, 3});
  check_close(x.to(kFloat64), {-1.5, 0, 2.25, 3}, 0);
  check_close(x.to(kInt64), {-1, 0, 2, 3}, 0);
  check_close(x.to(kBool), {1, 0, 1, 1}, 0);
  check_close(x.to(kBFloat16).to(kFloat32), {-1.5, 0, 2.25, 3}, 0);
  check_close(x.to(kFloat16).to(kFloat32), {-1.5, 0, 2.25, 3}, 0);
  CHECK(x.to(kFloat16).dtype() == kFloat16);
}

TEST_CASE("dtype: 16-bit rounding matches PyTorch (round to nearest even)") {
  // Values from torch: torch.tensor([...]).to(torch.bfloat16 / torch.float16).float()
  Tensor x = ops::tensor({1.00390625, 1.01171875, 3.14159265, 65520.0, 1e-8, 6.1e-5}, kFloat32);
  check_close(x.to(kBFloat16).to(kFloat32),
              {1.0, 1.015625, 3.140625, 65536.0, 1.0011717677116394e-08, 6.103515625e-05}, 0, 0);
  Tensor h =
      ops::tensor({1.00048828125, 1.00146484375, 3.14159265, 65520.0, 1e-8, 6.1e-5}, kFloat32);
  check_close(h.to(kFloat16).to(kFloat32),
              {1.0, 1.001953125, 3.140625, INFINITY, 0.0, 6.097555160522461e-05}, 0, 0);
}

TEST_CASE("factories: values") {
  check_close(ops::arange(0, 5, 2, kFloat32), {0, 2, 4});
  check_close(ops::arange(4), {0, 1, 2, 3});
  CHECK(ops::arange(4).dtype() == kInt64);
  check_close(ops::linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1});
  check_close(ops::full({2}, 7), {7, 7});
  check_close(ops::ones({3}), {1, 1, 1});
  check_close(ops::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}), {1, 2, 3, 4});
  CHECK(ops::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).shape() == Dims{2, 2});
  CHECK(ops::scalar(3).dim() == 0);
  CHECK_ERROR_CONTAINS(ops::from_vector(std::vector<double>{1, 2, 3}, {2, 2}), "from_vector",
                       "3 values", "[2, 2]");
  CHECK_ERROR_CONTAINS(ops::arange(0, 5, 0), "arange", "step");
}

TEST_CASE("random: same seed, same numbers, different seeds differ") {
  Generator a(42), b(42), c(43);
  Tensor x = ops::randn({1000}, a), y = ops::randn({1000}, b), z = ops::randn({1000}, c);
  check_close(x, y.to_vector<double>(), 0, 0);
  CHECK(ops::sum(ops::abs(x - z)).item() > 1);
  // The generator advances: two draws differ, and equal one bigger draw split in two.
  Generator d(42);
  Tensor first = ops::randn({400}, d), second = ops::randn({600}, d);
  check_close(ops::cat({first, second}, 0), x.to_vector<double>(), 0, 0);
}

TEST_CASE("random: independent of the number of threads") {
  int before = omp_get_max_threads();
  omp_set_num_threads(1);
  Generator g1(7);
  Tensor one = ops::rand({200000}, g1);
  Tensor n1 = ops::randn({200000}, g1, kFloat64);
  omp_set_num_threads(std::max(2, before));
  Generator g2(7);
  Tensor many = ops::rand({200000}, g2);
  Tensor n2 = ops::randn({200000}, g2, kFloat64);
  omp_set_num_threads(before);
  CHECK(ops::sum(ops::ne(one, many).to(kInt64)).item() == 0);
  CHECK(ops::sum(ops::ne(n1, n2).to(kInt64)).item() == 0);
}

TEST_CASE("random: distributions look right") {
  Generator g(1);
  Tensor u = ops::rand({100000}, g, kFloat64, -1, 3);
  CHECK(ops::min(u).item() >= -1);
  CHECK(ops::max(u).item() < 3);
  CHECK(ops::mean(u).item() == doctest::Approx(1.0).epsilon(0.02));
  Tensor n = ops::randn({100000}, g, kFloat64);
  CHECK(ops::mean(n).item() == doctest::Approx(0.0).epsilon(0.02));
  CHECK(ops::var(n).item() == doctest::Approx(1.0).epsilon(0.02));
  Tensor r = ops::randint(3, 7, {10000}, g);
  CHECK(r.dtype() == kInt64);
  CHECK(ops::min(r).item() == 3);
  CHECK(ops::max(r).item() == 6);
}

TEST_CASE("reductions: sums do not depend on the number of threads") {
  Generator g(5);
  Tensor x = ops::randn({3, 300000}, g);
  int before = omp_get_max_threads();
  omp_set_num_threads(1);
  double s1 = ops::sum(x).item(), m1 = ops::sum(x, {1}).at({2});
  omp_set_num_threads(std::max(2, before));
  double s2 = ops::sum(x).item(), m2 = ops::sum(x, {1}).at({2});
  omp_set_num_threads(before);
  CHECK(s1 == s2);
  CHECK(m1 == m2);
}

TEST_CASE("item and at: values and errors") {
  Tensor x = ops::arange(0, 6, 1, kFloat32).reshape({2, 3});
  CHECK(x.at({1, 2}) == 5);
  CHECK(x.at({-1, 0}) == 3);
  CHECK(ops::sum(x).item() == 15);
  CHECK(ops::sum(x).item<float>() == 15.0f);
  CHECK_ERROR_CONTAINS(x.item(), "item", "6 elements", "[2, 3]");
  CHECK_ERROR_CONTAINS(x.at({2, 0}), "at", "index 2", "size 2");
  CHECK_ERROR_CONTAINS(x.data<double>(), "data", "float32", "float64");
}

TEST_CASE("printing: PyTorch-like, truncated past 1000 elements") {
  Tensor x = ops::tensor({1, 2.5, -3});
  CHECK(x.str() == "tensor([1.0000, 2.5000, -3.0000], shape=[3], dtype=float32)");
  Tensor m = ops::arange(4).reshape({2, 2});
  CHECK(m.str() == "tensor([[0, 1],\n        [2, 3]], shape=[2, 2], dtype=int64)");
  Tensor big = ops::zeros({2000});
  std::string s = big.str();
  CHECK(s.find("...") != std::string::npos);
  CHECK(s.size() < 200);
  Tensor r = ops::ones({1});
  r.requires_grad_();
  CHECK(r.str().find("requires_grad=true") != std::string::npos);
  CHECK((r * 2.0).str().find("grad_fn=mul") != std::string::npos);
  CHECK(fmt::format("{}", ops::gt(x, ops::scalar(0))) ==
        "tensor([True, True, False], shape=[3], dtype=bool)");
}

TEST_CASE("devices: parsing, and a clear error for a backend this build lacks") {
  CHECK(Device::parse("cpu") == kCPU);
  CHECK(Device::parse("cuda:1").index == 1);
  CHECK_ERROR_CONTAINS(Device::parse("tpu"), "device", "tpu");
  if (!backend_available(DeviceType::CUDA)) {
    CHECK_ERROR_CONTAINS(ops::zeros({2}).to(Device::parse("cuda")), "cuda", "no backend");
  }
  CHECK_ERROR_CONTAINS(ops::zeros({2}).to(Device::parse("cuda:1")), "device cuda:1",
                       "one GPU, cuda:0", "CUDA_VISIBLE_DEVICES");
}

TEST_CASE("tensor: a shape whose byte count overflows is an error, not a small allocation") {
  CHECK_ERROR_CONTAINS(ops::empty({int64_t{1} << 40, int64_t{1} << 40}), "empty", "too large");
  CHECK_ERROR_CONTAINS(ops::empty({int64_t{1} << 62}, kFloat64), "empty", "bytes");
  // A zero dim makes the element count 0, but the strides of the other dims still overflow.
  CHECK_ERROR_CONTAINS(ops::empty({int64_t{1} << 40, 0, int64_t{1} << 40}), "empty", "too large");
  CHECK_ERROR_CONTAINS(ops::empty({2, -3}), "empty", "negative size");
}

TEST_CASE("checked size arithmetic: products, sums and shapes from files") {
  CHECK(checked_mul(3, 4, "x") == 12);
  CHECK(checked_add(3, 4, "x") == 7);
  CHECK(checked_numel(Dims{2, 0, 5}, "x") == 0);
  CHECK(checked_bytes(std::vector<int64_t>{2, 3}, 4, "x") == 24);
  CHECK_ERROR_CONTAINS(checked_mul(INT64_MAX / 2, 3, "a.npy: bytes"), "a.npy: bytes",
                       "out of range");
  CHECK_ERROR_CONTAINS(checked_add(INT64_MAX, 1, "f: offset"), "f: offset", "out of range");
  CHECK_ERROR_CONTAINS(checked_mul(-1, 3, "f"), "f", "non-negative");
  // The product from the .npy finding: 12646558490498040 * 400559 overflows.
  CHECK_ERROR_CONTAINS(
      checked_numel(std::vector<int64_t>{12646558490498040, 400559}, "f.npy: shape"),
      "f.npy: shape", "[12646558490498040, 400559]", "too large");
  CHECK_ERROR_CONTAINS(checked_numel(std::vector<int64_t>(9, 1), "f"), "9 dims", "at most 8");
}
