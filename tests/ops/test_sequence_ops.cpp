// The sequence-model ops of ops/sequence.h (einsum apart, in test_einsum.cpp): forward against
// PyTorch (tests/fixtures/sequence_ops.json) in float64 and float32, gradcheck in float64 at the
// same points, the values worked out by hand where PyTorch's own order is its own (ties), the
// statistics and determinism of the random ops, and bad calls.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "ops/sequence.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
const char* kFile = "sequence_ops.json";
const double kInf = std::numeric_limits<double>::infinity();

const nlohmann::json& args(const std::string& name) { return fixture_case(kFile, name).at("args"); }
/// A tensor stored beside a case's inputs ("indices", "mask", ...).
Tensor field(const std::string& name, const char* key, DType dtype = kFloat64) {
  return fixture_tensor(fixture_case(kFile, name).at(key), dtype);
}
Tensor input(const std::string& name, int i = 0) {
  return fixture_tensor(fixture_case(kFile, name).at("inputs").at(i));
}
void check_indices(const Tensor& got, const Tensor& expected) {
  CHECK(got.dtype() == kInt64);
  REQUIRE(got.shape() == expected.shape());
  CHECK(got.to_vector<int64_t>() == expected.to_vector<int64_t>());
}
/// Pieces against the case's "outputs", in float64 and float32.
void check_pieces(const std::string& name,
                  const std::function<std::vector<Tensor>(const Tensor&)>& fn) {
  const auto& expected = fixture_case(kFile, name).at("outputs");
  for (DType dt : {kFloat64, kFloat32}) {
    std::vector<Tensor> got = fn(input(name).to(dt));
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      Tensor e = fixture_tensor(expected[i]);
      CHECK(got[i].shape() == e.shape());
      check_close(got[i], e.to_vector<double>(), 1e-12, 1e-6);
    }
  }
}
}  // namespace

#define OP_CASE(NAME, FN)                                         \
  TEST_CASE(NAME ": forward") { check_forward(kFile, NAME, FN); } \
  TEST_CASE(NAME ": gradcheck") { check_grad_at(kFile, NAME, FN); }

// ---- sin, cos, log1p, expm1 ----------------------------------------------------------------
OP_CASE("sin", [](const V& x) { return ops::sin(x[0]); })
OP_CASE("cos", [](const V& x) { return ops::cos(x[0]); })
OP_CASE("log1p", [](const V& x) { return ops::log1p(x[0]); })
OP_CASE("expm1", [](const V& x) { return ops::expm1(x[0]); })

TEST_CASE("log1p/expm1: small arguments, second derivatives, bad input") {
  // 1 + 1e-12 loses most digits in log(1 + x); log1p keeps them (x - x^2 / 2 + ...)
  check_close(ops::log1p(ops::tensor({1e-12, -1e-9}, kFloat64)), {1e-12 - 5e-25, -1e-9 - 5e-19}, 0,
              1e-15);
  check_close(ops::expm1(ops::tensor({1e-12, -1e-9}, kFloat64)), {1e-12 + 5e-25, -1e-9 + 5e-19}, 0,
              1e-15);
  for (auto f : {ops::sin, ops::cos, ops::log1p, ops::expm1})
    check_grad([f](const V& v) { return grad({ops::sum(f(v[0]))}, {v[0]}, {}, true, true)[0]; },
               {rand64({4}, 11, 0.3)});
  Tensor i = ops::from_vector(std::vector<int64_t>{1, 2});
  CHECK_ERROR_CONTAINS(ops::sin(i), "sin", "int64", "float32 or float64");
  CHECK_ERROR_CONTAINS(ops::expm1(i), "expm1", "int64");
}

// ---- triu, tril, masked_fill, eye ----------------------------------------------------------
TEST_CASE("triu/tril: forward against PyTorch, both diagonal signs, batched") {
  for (const char* name : {"triu_0", "triu_1", "triu_m1", "triu_5", "triu_m3", "tril_0", "tril_1",
                           "tril_m1", "tril_5", "tril_m3", "triu_tall_m2", "tril_tall_1"}) {
    INFO(std::string(name));
    const int64_t d = args(name)[0].get<int64_t>();
    const bool upper = std::string(name).rfind("triu", 0) == 0;
    check_forward(kFile, name,
                  [=](const V& x) { return upper ? ops::triu(x[0], d) : ops::tril(x[0], d); });
  }
}
TEST_CASE("triu/tril: gradcheck, int64, non-finite values masked to 0, bad input") {
  check_grad_at(kFile, "triu_m1", [](const V& x) { return ops::triu(x[0], -1); });
  check_grad_at(kFile, "tril_1", [](const V& x) { return ops::tril(x[0], 1); });
  Tensor i = ops::arange(0, 6, 1, kInt64).reshape({2, 3});
  CHECK(ops::tril(i).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 3, 4, 0});
  // a where, not a product: inf and NaN outside the triangle become 0, not NaN
  check_close(ops::tril(ops::tensor({1, kInf, 3, 2}).reshape({2, 2})), {1, 0, 3, 2});
  check_close(ops::triu(ops::tensor({1, 5, std::nan(""), 2}).reshape({2, 2})), {1, 5, 0, 2});
  CHECK_ERROR_CONTAINS(ops::triu(ops::zeros({3})), "triu", "at least 2 dims", "[3]");
}

TEST_CASE("masked_fill: forward against PyTorch, with broadcasting") {
  for (const char* name : {"masked_fill", "masked_fill_broadcast"}) {
    INFO(std::string(name));
    Tensor mask = ops::ne(field(name, "mask"), ops::zeros({}, kFloat64));
    const double value = args(name)[0].get<double>();
    check_forward(kFile, name, [=](const V& x) { return ops::masked_fill(x[0], mask, value); });
  }
}
TEST_CASE("masked_fill: gradcheck (0 where filled), bad mask") {
  Tensor mask = ops::ne(field("masked_fill", "mask"), ops::zeros({}, kFloat64));
  check_grad_at(kFile, "masked_fill",
                [=](const V& x) { return ops::masked_fill(x[0], mask, 3.0); });
  Tensor x = ops::ones({2, 2}, kFloat64).requires_grad_();
  Tensor m = ops::ne(ops::eye(2, kFloat64), ops::zeros({}, kFloat64));
  ops::sum(ops::masked_fill(x, m, -1e9)).backward();
  check_close(x.grad(), {0, 1, 1, 0});
  CHECK_ERROR_CONTAINS(ops::masked_fill(x, ops::ones({2, 2}), 0), "masked_fill", "bool mask",
                       "float32");
  CHECK_ERROR_CONTAINS(
      ops::masked_fill(ops::ones({2, 2}), ops::ne(ops::ones({3}), ops::ones({3})), 0), "[2, 2]",
      "[3]");
}

TEST_CASE("eye: square and rectangular, dtypes, bad sizes") {
  check_close(ops::eye(3), {1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor r = ops::eye(2, 4, kFloat64);
  CHECK(r.shape() == Dims{2, 4});
  CHECK(r.dtype() == kFloat64);
  check_close(r, {1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(ops::eye(3, 2, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 1, 0, 0});
  CHECK(ops::eye(0).shape() == Dims{0, 0});
  CHECK_ERROR_CONTAINS(ops::eye(-1), "eye", "n = -1");
}

// ---- split, chunk --------------------------------------------------------------------------
TEST_CASE("split/chunk: forward against PyTorch") {
  check_pieces("split_2", [](const Tensor& x) { return ops::split(x, 2); });
  check_pieces("split_3_last", [](const Tensor& x) { return ops::split(x, 3, -1); });
  check_pieces("split_sizes", [](const Tensor& x) { return ops::split(x, {1, 3, 0}, 1); });
  check_pieces("chunk_3", [](const Tensor& x) { return ops::chunk(x, 3); });
  // 6 columns in 4 chunks: pieces of ceil(6 / 4) = 2, so only 3 of them (as PyTorch)
  check_pieces("chunk_4_of_6", [](const Tensor& x) { return ops::chunk(x, 4, -1); });
}
TEST_CASE("split/chunk: views, gradcheck, empty dims, bad input") {
  Tensor x = ops::arange(0, 10, 1, kFloat32).reshape({5, 2});
  auto parts = ops::split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].shape() == Dims{1, 2});
  CHECK(parts[1].storage() == x.storage());  // views
  check_grad(
      [](const V& v) {
        auto p = ops::split(v[0], {2, 1}, -1);
        return p[0].sum({1}) * 2.0 + p[1].squeeze(1) * 3.0;
      },
      {rand64({4, 3}, 21)});
  check_grad([](const V& v) { return ops::chunk(v[0], 2, 0)[1] * 5.0; }, {rand64({3, 2}, 22)});
  CHECK(ops::split(ops::zeros({0, 3}), 2).size() == 1);
  CHECK(ops::chunk(ops::zeros({0, 3}), 3).size() == 3);
  CHECK(ops::split(ops::zeros({0}), 0).size() == 1);
  CHECK_ERROR_CONTAINS(ops::split(x, -1), "split", "non-negative", "-1");
  CHECK_ERROR_CONTAINS(ops::split(x, 0), "split", "split_size can only be 0", "size 5");
  CHECK_ERROR_CONTAINS(ops::split(x, {2, 2}), "split", "[2, 2]", "add up to 4", "size 5");
  CHECK_ERROR_CONTAINS(ops::chunk(x, 0), "chunk", "greater than 0", "got 0");
  CHECK_ERROR_CONTAINS(ops::split(ops::scalar(1), 1), "split", "0-dim");
}

// ---- sort, argsort, topk, cumsum -----------------------------------------------------------
TEST_CASE("sort: forward against PyTorch's stable sort, ties, descending, dims") {
  for (const char* name :
       {"sort_dm1_asc", "sort_dm1_desc", "sort_d0_asc", "sort_d0_desc", "sort_distinct"}) {
    INFO(std::string(name));
    const int64_t dim = args(name)[0].get<int64_t>();
    const bool desc = args(name)[1].get<bool>();
    check_forward(kFile, name, [=](const V& x) { return ops::sort(x[0], dim, desc).values; });
    Tensor expected = field(name, "indices", kInt64);
    for (DType dt : {kFloat64, kFloat32})
      check_indices(ops::sort(input(name).to(dt), dim, desc).indices, expected);
    check_indices(ops::argsort(input(name), dim, desc), expected);
  }
}
TEST_CASE("sort: gradcheck, second derivative, int64, NaN last, bad input") {
  check_grad_at(kFile, "sort_distinct", [](const V& x) { return ops::sort(x[0], 1, true).values; });
  check_grad([](const V& v) { return ops::sort(v[0], 0).values * v[0]; }, {rand64({4, 3}, 31)});
  check_grad(
      [](const V& v) {
        Tensor s = ops::sort(v[0], -1).values;
        return grad({ops::sum(s * s * s)}, {v[0]}, {}, true, true)[0];
      },
      {rand64({2, 5}, 32)});
  Tensor ints = ops::from_vector(std::vector<int64_t>{5, -2, 5, 0, -2});
  ops::ValuesIndices si = ops::sort(ints, 0, true);
  CHECK(si.values.to_vector<int64_t>() == std::vector<int64_t>{5, 5, 0, -2, -2});
  CHECK(si.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 3, 1, 4});
  ops::ValuesIndices s = ops::sort(ops::tensor({2, std::nan(""), -1, 0}));
  CHECK(s.indices.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 0, 1});
  CHECK(std::isnan(s.values.to_vector<double>()[3]));
  CHECK(ops::sort(ops::scalar(4)).values.item() == 4);
  CHECK_ERROR_CONTAINS(ops::sort(ops::ne(ops::ones({2}), ops::ones({2}))), "sort", "bool");
  CHECK_ERROR_CONTAINS(ops::sort(ops::ones({2, 2}), 2), "sort", "dim 2", "out of range");
}

TEST_CASE("topk: forward against PyTorch, ties in index order") {
  for (const char* name :
       {"topk_distinct", "topk_smallest_dim0", "topk_ties", "topk_ties_smallest"}) {
    INFO(std::string(name));
    const auto& a = args(name);
    const int64_t k = a[0].get<int64_t>(), dim = a[1].get<int64_t>();
    const bool largest = a[2].get<bool>();
    check_forward(kFile, name, [=](const V& x) { return ops::topk(x[0], k, dim, largest).values; });
    Tensor x = input(name);
    ops::ValuesIndices r = ops::topk(x, k, dim, largest);
    // the indices point at the values (PyTorch's indices among ties are its own order)
    check_close(ops::gather(x, dim, r.indices), r.values, 0, 0);
    if (std::string(name).find("ties") == std::string::npos)
      check_indices(r.indices, field(name, "indices", kInt64));
  }
  // ties: the stable order, first occurrence first (largest and smallest)
  Tensor t = ops::tensor({3, 1, 3, 2, 1, 3});
  CHECK(ops::topk(t, 4).indices.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 5, 3});
  CHECK(ops::topk(t, 3, -1, false).indices.to_vector<int64_t>() == std::vector<int64_t>{1, 4, 3});
}
TEST_CASE("topk: gradcheck, k = 0 and k = size, bad k") {
  check_grad_at(kFile, "topk_distinct", [](const V& x) { return ops::topk(x[0], 3).values; });
  check_grad_at(kFile, "topk_smallest_dim0",
                [](const V& x) { return ops::topk(x[0], 2, 0, false).values; });
  Tensor x = ops::tensor({1, 5, 3});
  CHECK(ops::topk(x, 0).values.shape() == Dims{0});
  check_close(ops::topk(x, 3).values, {5, 3, 1});
  CHECK_ERROR_CONTAINS(ops::topk(x, 4), "topk", "k = 4", "size 3");
  CHECK_ERROR_CONTAINS(ops::topk(x, -1), "topk", "k = -1");
}

TEST_CASE("cumsum: forward against PyTorch, gradcheck (the reverse cumsum), second derivative") {
  for (const char* name : {"cumsum_1", "cumsum_m1", "cumsum_0"}) {
    INFO(std::string(name));
    const int64_t dim = args(name)[0].get<int64_t>();
    check_forward(kFile, name, [=](const V& x) { return ops::cumsum(x[0], dim); });
    check_grad_at(kFile, name, [=](const V& x) { return ops::cumsum(x[0], dim); });
  }
  check_grad(
      [](const V& v) {
        Tensor c = ops::cumsum(v[0], 0);
        return grad({ops::sum(c * c)}, {v[0]}, {}, true, true)[0];
      },
      {rand64({5}, 41)});
  // dx_i = sum_{j >= i} dy_j
  Tensor x = ops::zeros({4}, kFloat64).requires_grad_();
  ops::cumsum(x, 0).backward(ops::tensor({1, 2, 3, 4}, kFloat64));
  check_close(x.grad(), {10, 9, 7, 4});
  CHECK(ops::cumsum(ops::arange(1, 5, 1, kInt64), 0).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 3, 6, 10});
  CHECK_ERROR_CONTAINS(ops::cumsum(x, 1), "cumsum", "dim 1", "out of range");
}

// ---- one_hot -------------------------------------------------------------------------------
TEST_CASE("one_hot: forward against PyTorch, bad input") {
  Tensor idx = field("one_hot", "indices", kInt64);
  for (const char* name : {"one_hot", "one_hot_6"}) {
    INFO(std::string(name));
    Tensor y = ops::one_hot(idx, args(name)[0].get<int64_t>());
    CHECK(y.dtype() == kInt64);
    Tensor e = fixture_tensor(fixture_case(kFile, name).at("output"), kInt64);
    check_indices(y, e);
  }
  CHECK(ops::one_hot(ops::from_vector(std::vector<int64_t>{2}).reshape({}), 3).shape() == Dims{3});
  CHECK_ERROR_CONTAINS(ops::one_hot(ops::tensor({1})), "one_hot", "int64", "float32");
  Tensor neg = ops::from_vector(std::vector<int64_t>{0, -1});
  CHECK_ERROR_CONTAINS(ops::one_hot(neg), "one_hot", "non-negative", "-1");
  CHECK_ERROR_CONTAINS(ops::one_hot(idx, 4), "one_hot", "smaller than num_classes = 4", "got 4");
  CHECK_ERROR_CONTAINS(ops::one_hot(ops::zeros({0}, kInt64)), "one_hot", "empty", "num_classes");
}

// ---- multinomial, randperm -----------------------------------------------------------------
TEST_CASE("multinomial: frequencies with replacement match the probabilities") {
  // 40000 draws from p = (0.1, 0, 0.2, 0.3, 0.4) (given unnormalised): each count within 5
  // standard deviations of n p, and the zero-probability category never drawn.
  Generator gen(123);
  const int64_t n = 40000;
  Tensor s = ops::multinomial(ops::tensor({1, 0, 2, 3, 4}, kFloat64), n, true, gen);
  CHECK(s.shape() == Dims{n});
  CHECK(s.dtype() == kInt64);
  std::vector<int64_t> counts(5, 0);
  for (int64_t c : s.to_vector<int64_t>()) ++counts.at(c);
  CHECK(counts[1] == 0);
  const std::vector<double> p{0.1, 0, 0.2, 0.3, 0.4};
  double chi2 = 0;
  for (int c = 0; c < 5; ++c) {
    if (p[c] == 0) continue;
    const double mean = n * p[c], sd = std::sqrt(n * p[c] * (1 - p[c]));
    CHECK(std::abs(counts[c] - mean) < 5 * sd);
    chi2 += (counts[c] - mean) * (counts[c] - mean) / mean;
  }
  CHECK(chi2 < 20);  // 3 degrees of freedom: P(chi2 > 20) < 2e-4
  // rows of a 2-D input are sampled separately; zero leading and trailing categories are skipped
  Tensor rows = ops::tensor({0, 0, 1, 0, 1, 0, 0, 0}, kFloat32).reshape({2, 4});
  Tensor r = ops::multinomial(rows, 50, true, gen);
  CHECK(r.shape() == Dims{2, 50});
  auto v = r.to_vector<int64_t>();
  CHECK(std::all_of(v.begin(), v.begin() + 50, [](int64_t c) { return c == 2; }));
  CHECK(std::all_of(v.begin() + 50, v.end(), [](int64_t c) { return c == 0; }));
}
TEST_CASE("multinomial: without replacement, distinct samples, first-draw frequencies") {
  Generator gen(7);
  Tensor p = ops::tensor({0.5, 0.25, 0.125, 0.125, 0}, kFloat64);
  // all of the 4 possible categories, each once
  for (int rep = 0; rep < 20; ++rep) {
    auto v = ops::multinomial(p, 4, false, gen).to_vector<int64_t>();
    CHECK(std::set<int64_t>(v.begin(), v.end()) == std::set<int64_t>{0, 1, 2, 3});
  }
  // the first sample of each row is a draw from p: 20000 rows at once
  const int64_t n = 20000;
  Tensor rows = ops::expand(p.reshape({1, 5}), {n, 5});
  Tensor s = ops::multinomial(rows, 2, false, gen);
  CHECK(s.shape() == Dims{n, 2});
  std::vector<int64_t> first(5, 0);
  auto v = s.to_vector<int64_t>();
  bool distinct = true;
  for (int64_t i = 0; i < n; ++i) {
    ++first.at(v[2 * i]);
    distinct = distinct && v[2 * i] != v[2 * i + 1];
  }
  CHECK(distinct);
  CHECK(first[4] == 0);
  const std::vector<double> q{0.5, 0.25, 0.125, 0.125};
  for (int c = 0; c < 4; ++c)
    CHECK(std::abs(first[c] - n * q[c]) < 5 * std::sqrt(n * q[c] * (1 - q[c])));
}
TEST_CASE("multinomial: reproducible from the generator's seed, bad input") {
  Tensor p = ops::tensor({0.2, 0.3, 0.5});
  Generator g1(5), g2(5), g3(6);
  auto a = ops::multinomial(p, 30, true, g1).to_vector<int64_t>();
  CHECK(a == ops::multinomial(p, 30, true, g2).to_vector<int64_t>());
  CHECK(a != ops::multinomial(p, 30, true, g3).to_vector<int64_t>());
  CHECK(ops::multinomial(p, 3, false, g1).to_vector<int64_t>() ==
        ops::multinomial(p, 3, false, g2).to_vector<int64_t>());
  CHECK_ERROR_CONTAINS(ops::multinomial(ops::tensor({1, -1}), 1), "multinomial", "inf, nan", "< 0");
  CHECK_ERROR_CONTAINS(ops::multinomial(ops::tensor({1, std::nan("")}), 1), "multinomial",
                       "inf, nan");
  CHECK_ERROR_CONTAINS(ops::multinomial(ops::tensor({1, 1, 0, 0}).reshape({2, 2}), 1),
                       "multinomial", "row 1", "sum to 0");
  CHECK_ERROR_CONTAINS(ops::multinomial(p, 4), "multinomial", "without replacement", "4 > 3");
  CHECK_ERROR_CONTAINS(ops::multinomial(p, 0), "multinomial", "num_samples <= 0");
  CHECK_ERROR_CONTAINS(ops::multinomial(ops::ones({2, 2, 2}), 1), "multinomial", "1-D", "2-D",
                       "[2, 2, 2]");
  CHECK_ERROR_CONTAINS(ops::multinomial(ops::from_vector(std::vector<int64_t>{1, 2}), 1),
                       "multinomial", "int64");
}

TEST_CASE("randperm: permutations, uniform positions, reproducible, dtypes, bad n") {
  Generator gen(11);
  const int64_t n = 6, draws = 6000;
  std::vector<std::vector<int64_t>> at(n, std::vector<int64_t>(n, 0));  // at[i][v]: perm[i] == v
  bool permutations = true;
  for (int64_t r = 0; r < draws; ++r) {
    auto p = ops::randperm(n, gen).to_vector<int64_t>();
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) permutations = permutations && sorted[i] == i;
    for (int64_t i = 0; i < n; ++i) ++at[i][p[i]];
  }
  CHECK(permutations);
  const double mean = static_cast<double>(draws) / n, sd = std::sqrt(draws * (1.0 / n) * (5.0 / n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t v = 0; v < n; ++v) CHECK(std::abs(at[i][v] - mean) < 5 * sd);
  Generator a(3), b(3);
  CHECK(ops::randperm(50, a).to_vector<int64_t>() == ops::randperm(50, b).to_vector<int64_t>());
  Tensor f = ops::randperm(5, a, kFloat32);
  CHECK(f.dtype() == kFloat32);
  CHECK(ops::sum(f).item() == 10);
  CHECK(ops::randperm(0, a).shape() == Dims{0});
  CHECK_ERROR_CONTAINS(ops::randperm(-1, a), "randperm", "n must be >= 0", "-1");
  CHECK_ERROR_CONTAINS(ops::randperm(3, a, kBool), "randperm", "bool");
}

// ---- bmm, baddbmm --------------------------------------------------------------------------
OP_CASE("bmm", [](const V& x) { return ops::bmm(x[0], x[1]); })
OP_CASE("baddbmm", [](const V& x) { return ops::baddbmm(x[0], x[1], x[2], 0.5, 2.0); })
OP_CASE("baddbmm_default", [](const V& x) { return ops::baddbmm(x[0], x[1], x[2]); })
TEST_CASE("bmm/baddbmm: beta 0 ignores input, bad shapes") {
  Tensor a = ops::ones({2, 3, 4}), b = ops::ones({2, 4, 5});
  Tensor nan = ops::full({3, 5}, std::nan(""));
  check_close(ops::baddbmm(nan, a, b, 0, 0.5), std::vector<double>(30, 2.0));
  CHECK_ERROR_CONTAINS(ops::bmm(ops::ones({3, 4}), b), "bmm", "batch1", "3-D", "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::bmm(a, ops::ones({2, 5, 4})), "bmm", "[2, 4]", "[2, 5, 4]");
  CHECK_ERROR_CONTAINS(ops::bmm(a, ops::ones({3, 4, 4})), "bmm", "[2, 4]", "[3, 4, 4]");
  CHECK_ERROR_CONTAINS(ops::baddbmm(ops::ones({3, 3, 3}), a, b), "baddbmm", "[3, 3, 3]");
}

// ---- norm ----------------------------------------------------------------------------------
namespace {
struct NormArgs {
  double p;
  Dims dims;
  bool keepdim;
};
NormArgs norm_args(const std::string& name) {
  const auto& a = args(name);
  NormArgs r;
  if (a[0].is_string())
    r.p = a[0].get<std::string>()[0] == '-' ? -kInf : kInf;
  else
    r.p = a[0].get<double>();
  r.dims = Dims(a[1].get<std::vector<int64_t>>());
  r.keepdim = a[2].get<bool>();
  return r;
}
}  // namespace
TEST_CASE("norm: forward against PyTorch, p = 2, 1, inf, -inf, 0, 3, 1.5, fro over two dims") {
  for (const char* name : {"norm_2", "norm_1_dim1", "norm_inf_dim0", "norm_minf_dim1", "norm_0",
                           "norm_3_keep", "norm_1p5", "norm_fro_01"}) {
    INFO(std::string(name));
    NormArgs a = norm_args(name);
    check_forward(kFile, name, [=](const V& x) { return ops::norm(x[0], a.p, a.dims, a.keepdim); });
  }
}
TEST_CASE("norm: gradcheck") {
  for (const char* name : {"norm_2", "norm_1_dim1", "norm_inf_dim0", "norm_minf_dim1",
                           "norm_3_keep", "norm_1p5", "norm_fro_01"}) {
    INFO(std::string(name));
    NormArgs a = norm_args(name);
    check_grad_at(kFile, name, [=](const V& x) { return ops::norm(x[0], a.p, a.dims, a.keepdim); });
  }
  check_grad([](const V& v) { return grad({ops::norm(v[0])}, {v[0]}, {}, true, true)[0]; },
             {rand64({2, 3}, 51)});
}
TEST_CASE("norm: gradient 0 at a zero norm, ties of the inf norm share, bad input") {
  Tensor z = ops::zeros({3}, kFloat64).requires_grad_();
  ops::norm(z).backward();
  check_close(z.grad(), {0, 0, 0}, 0, 0);
  Tensor w = ops::cat({ops::zeros({2}, kFloat64), ops::ones({2}, kFloat64)}, 0).reshape({2, 2});
  w.requires_grad_();
  ops::sum(ops::norm(w, 3, {1})).backward();  // row 0 is zero: gradient 0 there, not NaN
  check_close(w.grad(), {0, 0, std::pow(0.5, 2.0 / 3), std::pow(0.5, 2.0 / 3)}, 1e-12);
  Tensor t = ops::tensor({-3, 1, 3, 2}, kFloat64).requires_grad_();
  ops::norm(t, kInf).backward();
  check_close(t.grad(), {-0.5, 0, 0.5, 0});  // PyTorch: sign(x) shared by the two |x| = 3
  check_close(ops::norm(ops::tensor({3, -4})), {5});
  check_close(ops::norm(ops::tensor({0, 2, 0, -1}), 0), {2});
  CHECK_ERROR_CONTAINS(ops::norm(ops::from_vector(std::vector<int64_t>{1})), "norm", "int64");
  CHECK_ERROR_CONTAINS(ops::norm(ops::ones({2, 2}), 2, {2}), "norm", "dim 2");
  CHECK_ERROR_CONTAINS(ops::norm(ops::zeros({0, 2}), kInf, {0}), "norm", "inf norm", "empty");
}

// ---- flip, roll, repeat --------------------------------------------------------------------
TEST_CASE("flip/roll/repeat: forward against PyTorch and gradcheck") {
  for (const char* name : {"flip_0_2", "flip_m1"}) {
    INFO(std::string(name));
    Dims dims(args(name)[0].get<std::vector<int64_t>>());
    check_forward(kFile, name, [=](const V& x) { return ops::flip(x[0], dims); });
    check_grad_at(kFile, name, [=](const V& x) { return ops::flip(x[0], dims); });
  }
  for (const char* name : {"roll_2d", "roll_flat", "roll_m7_dim1"}) {
    INFO(std::string(name));
    Dims shifts(args(name)[0].get<std::vector<int64_t>>());
    Dims dims(args(name)[1].get<std::vector<int64_t>>());
    check_forward(kFile, name, [=](const V& x) { return ops::roll(x[0], shifts, dims); });
    check_grad_at(kFile, name, [=](const V& x) { return ops::roll(x[0], shifts, dims); });
  }
  for (const char* name : {"repeat_lead", "repeat_vec", "repeat_zero"}) {
    INFO(std::string(name));
    Dims sizes(args(name)[0].get<std::vector<int64_t>>());
    check_forward(kFile, name, [=](const V& x) { return ops::repeat(x[0], sizes); });
    check_grad_at(kFile, name, [=](const V& x) { return ops::repeat(x[0], sizes); });
  }
}
TEST_CASE("flip/roll/repeat: copies, gradients by hand, bad input") {
  Tensor x = ops::arange(0, 4, 1, kFloat32);
  Tensor f = ops::flip(x, {});
  CHECK(f.storage() != x.storage());  // a copy even when nothing is flipped, as PyTorch
  check_close(ops::flip(x, {0}), {3, 2, 1, 0});
  check_close(ops::roll(x, {1}), {3, 0, 1, 2});
  check_close(ops::roll(x, {-5}, {0}), {1, 2, 3, 0});
  check_close(ops::repeat(x.reshape({2, 2}), {1, 2}), {0, 1, 0, 1, 2, 3, 2, 3});
  // the gradient of repeat adds the tiles
  Tensor v = ops::ones({2}, kFloat64).requires_grad_();
  ops::repeat(v, {3, 2}).backward(ops::arange(0, 12, 1, kFloat64).reshape({3, 4}));
  check_close(v.grad(), {0 + 2 + 4 + 6 + 8 + 10, 1 + 3 + 5 + 7 + 9 + 11});
  CHECK_ERROR_CONTAINS(ops::flip(x, {0, -1}), "flip", "dim 0", "more than once");
  CHECK_ERROR_CONTAINS(ops::roll(x.reshape({2, 2}), {1, 2}, {0}), "roll", "shifts and dims",
                       "[1, 2]", "[0]");
  CHECK_ERROR_CONTAINS(ops::roll(x, {1, 2}), "roll", "one shift");
  CHECK_ERROR_CONTAINS(ops::repeat(x.reshape({2, 2}), {2}), "repeat", "[2]", "2 dims");
  CHECK_ERROR_CONTAINS(ops::repeat(x, {-1}), "repeat", "non-negative", "[-1]");
}

// ---- on the GPU ----------------------------------------------------------------------------
namespace {
/// fn on the CPU and on the GPU from the same inputs in dtype: outputs and input gradients (under
/// one random upstream gradient) agree within tol.
void cpu_gpu(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs) {
  const Device gpu = Device::parse("cuda");
  for (DType dt : {kFloat64, kFloat32}) {
    INFO(name << " (" << dtype_name(dt) << ")");
    const double tol = dt == kFloat64 ? 1e-9 : 1e-4;
    std::vector<Tensor> xc, xg;
    for (const Tensor& x : inputs) {
      xc.push_back(x.to(dt).detach().requires_grad_());
      xg.push_back(x.to(dt).to(gpu).detach().requires_grad_());
    }
    Tensor yc = fn(xc), yg = fn(xg);
    REQUIRE(yg.device() == gpu);
    REQUIRE(yc.shape() == yg.shape());
    check_close(yg.to(kCPU), yc, tol, tol);
    Generator gen(99);
    Tensor up = ops::randn(yc.shape(), gen, dt);
    yc.backward(up);
    yg.backward(up.to(gpu));
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("gradient of input " << i);
      REQUIRE(xc[i].grad().defined() == xg[i].grad().defined());
      if (xc[i].grad().defined()) check_close(xg[i].grad().to(kCPU), xc[i].grad(), tol, tol);
    }
  }
}
}  // namespace

TEST_CASE("sequence ops: on the GPU against the CPU") {
  if (!gpu_or_skip()) return;
  const Device gpu = Device::parse("cuda");
  Generator g(5);
  const Tensor x = ops::randn({3, 4, 5}, g, kFloat64), y = ops::randn({3, 5, 2}, g, kFloat64);
  const Tensor sq = ops::randn({4, 4}, g, kFloat64);
  cpu_gpu("sin", [](const V& v) { return ops::sin(v[0]); }, {x});
  cpu_gpu("cos", [](const V& v) { return ops::cos(v[0]); }, {x});
  cpu_gpu("log1p", [](const V& v) { return ops::log1p(ops::abs(v[0])); }, {x});
  cpu_gpu("expm1", [](const V& v) { return ops::expm1(v[0]); }, {x});
  cpu_gpu("triu", [](const V& v) { return ops::triu(v[0], 1); }, {x});
  cpu_gpu("tril", [](const V& v) { return ops::tril(v[0], -1); }, {x});
  cpu_gpu("masked_fill",
          [](const V& v) {
            return ops::masked_fill(v[0], ops::gt(v[0].detach(), ops::zeros_like(v[0])), -2);
          },
          {x});
  cpu_gpu("sort", [](const V& v) { return ops::sort(v[0], 1, true).values; }, {x});
  cpu_gpu("topk", [](const V& v) { return ops::topk(v[0], 2, 0).values; }, {x});
  cpu_gpu("cumsum", [](const V& v) { return ops::cumsum(v[0], 1); }, {x});
  cpu_gpu("bmm", [](const V& v) { return ops::bmm(v[0], v[1]); }, {x, y});
  cpu_gpu("norm 2", [](const V& v) { return ops::norm(v[0], 2, {1}); }, {x});
  cpu_gpu("norm inf", [](const V& v) { return ops::norm(v[0], kInf, {-1}); }, {x});
  cpu_gpu("flip", [](const V& v) { return ops::flip(v[0], {0, 2}); }, {x});
  cpu_gpu("roll", [](const V& v) { return ops::roll(v[0], {1, -2}, {0, 2}); }, {x});
  cpu_gpu("repeat", [](const V& v) { return ops::repeat(v[0], {2, 1, 1, 2}); }, {x});
  cpu_gpu("einsum bmm", [](const V& v) { return ops::einsum("bij,bjk->bik", v); }, {x, y});
  cpu_gpu("einsum diagonal", [](const V& v) { return ops::einsum("ii->i", v); }, {sq});
  // integer results and random draws: the same on both (Philox draws the same numbers)
  CHECK(ops::sort(x.to(gpu), 1).indices.to(kCPU).to_vector<int64_t>() ==
        ops::sort(x, 1).indices.to_vector<int64_t>());
  Tensor idx = ops::from_vector(std::vector<int64_t>{0, 3, 1});
  CHECK(ops::one_hot(idx.to(gpu), 5).to(kCPU).to_vector<int64_t>() ==
        ops::one_hot(idx, 5).to_vector<int64_t>());
  check_close(ops::eye(3, 4, kFloat32, gpu).to(kCPU), ops::eye(3, 4));
  Generator a(8), b(8);
  CHECK(ops::randperm(20, a, kInt64, gpu).to(kCPU).to_vector<int64_t>() ==
        ops::randperm(20, b).to_vector<int64_t>());
  Tensor p = ops::tensor({0.1, 0.2, 0.3, 0.4}, kFloat64);
  CHECK(ops::multinomial(p.to(gpu), 50, true, a).to(kCPU).to_vector<int64_t>() ==
        ops::multinomial(p, 50, true, b).to_vector<int64_t>());
}
