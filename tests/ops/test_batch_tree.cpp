// The batch's fixed tree of sums (ops/batch_tree.h, issue 63): the parameter gradients that sum
// over a batch (linear's dW and db, conv2d's dW and db, layer_norm's dW and db, a broadcast
// parameter's sum over dim 0) are the same bits on 1 and 2 threads, and the same bits as the sum
// of the gradients of the batch's halves (as 2 ranks give them) or quarters (4 ranks, or 4
// micro-batches of gradient accumulation) added pairwise; and the forwards give each image the
// same bits in any batch and on any thread count (each leaf of 8 images on one thread).
#include <cstring>

#include "ops/batch_tree.h"
#include "test_util.h"
#include "vitrine.h"

using namespace vt_test;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return ac.shape() == bc.shape() && ac.dtype() == bc.dtype() &&
         std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.numel() * dtype_size(ac.dtype())) == 0;
}

/// A layer: the parameters, and the forward of a batch x.
struct Layer {
  std::vector<Tensor> params;
  std::function<Tensor(const Tensor&)> forward;
};

/// The parameters' gradients for images [b0, b0 + n) of x, with upstream gradient dy's rows.
std::vector<Tensor> grads(const Layer& layer, const Tensor& x, const Tensor& dy, int64_t b0,
                          int64_t n) {
  for (const Tensor& p : layer.params) p.set_grad(Tensor());
  Tensor y = layer.forward(ops::narrow(x, 0, b0, n));
  y.backward(ops::narrow(dy, 0, b0, n).contiguous());
  std::vector<Tensor> g;
  for (const Tensor& p : layer.params) g.push_back(p.grad().clone());
  return g;
}

/// Parts of the batch (2 or 4 equal ones) added pairwise, as ranks or micro-batches give them.
std::vector<Tensor> split_sum(const Layer& layer, const Tensor& x, const Tensor& dy, int parts) {
  const int64_t n = x.size(0) / parts;
  std::vector<std::vector<Tensor>> g;
  for (int p = 0; p < parts; ++p) g.push_back(grads(layer, x, dy, p * n, n));
  for (int s = 1; s < parts; s *= 2)
    for (int p = 0; p + s < parts; p += 2 * s)
      for (size_t i = 0; i < g[p].size(); ++i) g[p][i] = ops::add(g[p][i], g[p + s][i]);
  return g[0];
}

/// The forward of images [b0, b0 + n) of x (no graph).
Tensor forward(const Layer& layer, const Tensor& x, int64_t b0, int64_t n) {
  NoGradGuard no_grad;
  return layer.forward(ops::narrow(x, 0, b0, n).contiguous());
}

/// The gradient at images [b0, b0 + n) of x, from dy's rows.
Tensor input_grad(const Layer& layer, const Tensor& x, const Tensor& dy, int64_t b0, int64_t n) {
  const Tensor xi = ops::narrow(x, 0, b0, n).contiguous().requires_grad_(true);
  layer.forward(xi).backward(ops::narrow(dy, 0, b0, n).contiguous());
  return xi.grad();
}

void check_layer(const char* name, const Layer& layer, const Tensor& x, const Tensor& dy) {
  INFO(name);
  const int64_t B = x.size(0);
  {  // the forward: each image the same bits on 1 or 2 threads and in a batch of 8 of them
    set_num_threads(1);
    const Tensor y1 = forward(layer, x, 0, B);
    set_num_threads(2);
    const Tensor y2 = forward(layer, x, 0, B);
    const Tensor part = forward(layer, x, 8, 8);
    CHECK(same_bits(y1, y2));
    CHECK(same_bits(ops::narrow(y2, 0, 8, 8), part));
  }
  {  // the input gradient, the same way
    set_num_threads(1);
    const Tensor dx1 = input_grad(layer, x, dy, 0, B);
    set_num_threads(2);
    const Tensor dx2 = input_grad(layer, x, dy, 0, B);
    const Tensor part = input_grad(layer, x, dy, 8, 8);
    CHECK(same_bits(dx1, dx2));
    CHECK(same_bits(ops::narrow(dx2, 0, 8, 8), part));
  }
  set_num_threads(1);
  const std::vector<Tensor> one = grads(layer, x, dy, 0, B);
  set_num_threads(2);
  const std::vector<Tensor> two = grads(layer, x, dy, 0, B);
  const std::vector<Tensor> halves = split_sum(layer, x, dy, 2);
  const std::vector<Tensor> quarters = split_sum(layer, x, dy, 4);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("parameter " << i << " of shape " << one[i].shape().str());
    CHECK(same_bits(one[i], two[i]));
    CHECK(same_bits(one[i], halves[i]));
    CHECK(same_bits(one[i], quarters[i]));
  }
  // A batch that is not a multiple of the leaves (8, 8, 4): still the same on any thread count.
  set_num_threads(1);
  const std::vector<Tensor> odd1 = grads(layer, x, dy, 0, 20);
  set_num_threads(2);
  const std::vector<Tensor> odd2 = grads(layer, x, dy, 0, 20);
  for (size_t i = 0; i < odd1.size(); ++i) CHECK(same_bits(odd1[i], odd2[i]));
}

Tensor param(const Dims& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::mul(ops::randn(shape, gen), 0.3).requires_grad_(true);
}

Tensor data(const Dims& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::randn(shape, gen);
}

}  // namespace

TEST_CASE("tree_sum: the CPU's pass over blocks of columns gives the level-by-level adds' bits") {
  // Backend::tree_sum's default (one binary Add per level) against the CPU's kernel, and both
  // against the tree written out: ((p0 + p1) + (p2 + p3)) + ..., an odd last partial going up.
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t L : {1, 2, 3, 5, 8, 13, 16, 17})
      for (int64_t N : {1, 37, 5000}) {
        INFO(dtype_name(dt) << " L " << L << " N " << N);
        const Tensor parts = ops::to_dtype(data({L, N}, 40 + L), dt);
        Tensor cpu = parts.clone(), base = parts.clone();
        cpu.backend().tree_sum(cpu.strided());
        base.backend().Backend::tree_sum(base.strided());
        CHECK(same_bits(ops::narrow(cpu, 0, 0, 1), ops::narrow(base, 0, 0, 1)));
        std::vector<Tensor> level;
        for (int64_t i = 0; i < L; ++i) level.push_back(ops::narrow(parts, 0, i, 1));
        while (level.size() > 1) {
          std::vector<Tensor> up;
          for (size_t i = 0; i < level.size(); i += 2)
            up.push_back(i + 1 < level.size() ? ops::add(level[i], level[i + 1]) : level[i]);
          level = up;
        }
        CHECK(same_bits(ops::narrow(cpu, 0, 0, 1), level[0]));
      }
}

TEST_CASE(
    "batch tree: parameter gradients are the same bits on 1 and 2 threads, and for the "
    "batch in halves or quarters added pairwise") {
  const int threads = get_num_threads();
  ops::detail::set_batch_tree(true);  // (off by default: docs/distributed.md)
  {
    const Tensor w = param({17, 24}, 1), b = param({17}, 2);
    const Layer linear{{w, b}, [&](const Tensor& x) { return ops::linear(x, w, b); }};
    check_layer("linear, x [32, 5, 24]", linear, data({32, 5, 24}, 3), data({32, 5, 17}, 4));
    check_layer("linear, x [32, 24]", linear, data({32, 24}, 5), data({32, 17}, 6));
  }
  for (int64_t stride : {1, 2}) {
    const Tensor w = param({6, 3, 3, 3}, 7), b = param({6}, 8);
    const Layer conv{{w, b}, [&](const Tensor& x) {
                       return ops::conv2d(x, w, b, {stride, stride}, {1, 1});
                     }};
    const int64_t out = stride == 1 ? 9 : 5;
    check_layer(stride == 1 ? "conv2d 3x3, stride 1" : "conv2d 3x3, stride 2", conv,
                data({32, 3, 9, 9}, 9), data({32, 6, out, out}, 10));
  }
  {
    const Tensor w = param({16, 8, 3, 3}, 11);
    const Layer conv{{w}, [&](const Tensor& x) {
                       return ops::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
                     }};
    check_layer("conv2d 3x3, 8 -> 16 channels, 14x14", conv, data({32, 8, 14, 14}, 12),
                data({32, 16, 14, 14}, 13));
  }
  {
    // fc1, GELU and fc2 (the fused MLP: on AVX-512 both products run on the whole batch).
    const Tensor w1 = param({40, 24}, 21), b1 = param({40}, 22), w2 = param({17, 40}, 23),
                 b2 = param({17}, 24);
    const Layer mlp{{w1, b1, w2, b2},
                    [&](const Tensor& x) { return ops::mlp_gelu(x, w1, b1, w2, b2); }};
    check_layer("mlp_gelu, x [32, 5, 24]", mlp, data({32, 5, 24}, 25), data({32, 5, 17}, 26));
  }
  {
    const Tensor w = param({12}, 14), b = param({12}, 15);
    const Layer norm{{w, b}, [&](const Tensor& x) { return ops::layer_norm(x, {12}, w, b, 1e-5); }};
    check_layer("layer_norm, x [32, 7, 12]", norm, data({32, 7, 12}, 16), data({32, 7, 12}, 17));
  }
  {
    const Tensor pos = param({1, 5, 6}, 18);
    const Layer add{{pos}, [&](const Tensor& x) { return ops::add(x, pos); }};
    check_layer("a broadcast parameter (a position embedding)", add, data({32, 5, 6}, 19),
                data({32, 5, 6}, 20));
  }
  ops::detail::set_batch_tree(false);
  set_num_threads(threads);
}
