// The backward engine: accumulation, retain_graph, version checks, second derivatives, hooks,
// retain_grad, grad(), stack depth.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

TEST_CASE("backward: a small graph, values checked by hand") {
  // z = (x * y + x).sum(), x = [1, 2], y = [3, 4]: dz/dx = y + 1, dz/dy = x
  Tensor x = ops::tensor({1, 2}), y = ops::tensor({3, 4});
  x.requires_grad_();
  y.requires_grad_();
  Tensor z = ops::sum(x * y + x);
  CHECK(z.item() == 14);
  CHECK(z.grad_fn() != nullptr);
  CHECK(z.grad_fn()->name == "sum");
  z.backward();
  check_close(x.grad(), {4, 5});
  check_close(y.grad(), {1, 2});
}

TEST_CASE("backward: gradients accumulate across calls, like PyTorch") {
  Tensor x = ops::tensor({2});
  x.requires_grad_();
  (x * x).sum().backward();
  (x * 3.0).sum().backward();
  check_close(x.grad(), {7});
}

TEST_CASE("backward: a tensor used twice gets the sum of both paths") {
  Tensor x = ops::tensor({3}, kFloat64);
  x.requires_grad_();
  Tensor y = x * x;  // uses x twice
  Tensor z = y * x;  // x^3
  z.sum().backward();
  check_close(x.grad(), {27});
}

TEST_CASE("backward: explicit output gradient, and none for a non-scalar is an error") {
  Tensor x = ops::tensor({1, 2, 3});
  x.requires_grad_();
  Tensor y = x * 2.0;
  CHECK_ERROR_CONTAINS(y.backward(), "backward", "one-element", "[3]");
  y.backward(ops::tensor({1, 10, 100}));
  check_close(x.grad(), {2, 20, 200});
  CHECK_ERROR_CONTAINS(ops::tensor({1}).backward(), "backward", "does not require grad");
}

TEST_CASE("backward: a second backward through a freed graph raises the documented error") {
  Tensor x = ops::tensor({1, 2});
  x.requires_grad_();
  Tensor y = (x * x).sum();
  y.backward();
  CHECK_ERROR_CONTAINS(y.backward(), "already freed", "retain_graph=true");
}

TEST_CASE("backward: retain_graph allows a second backward") {
  Tensor x = ops::tensor({1, 2});
  x.requires_grad_();
  Tensor y = (x * x).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  check_close(x.grad(), {4, 8});
}

TEST_CASE("backward: in-place change of a saved tensor raises the documented error") {
  Tensor x = ops::tensor({1, 2});
  x.requires_grad_();
  Tensor a = x * 2.0;  // a is saved by the mul below
  Tensor y = (a * a).sum();
  {
    NoGradGuard ng;
    a.mul_(3.0);
  }
  CHECK_ERROR_CONTAINS(y.backward(), "backward of mul", "modified by an in-place operation",
                       "version 0", "now version 1");
}

TEST_CASE("in-place: a leaf that requires grad cannot be changed while grad mode is on") {
  Tensor w = ops::ones({2});
  w.requires_grad_();
  CHECK_ERROR_CONTAINS(w.add_(1.0), "add_", "leaf", "requires grad", "NoGradGuard");
  {
    NoGradGuard ng;
    w.add_(ops::tensor({1, 2}), 0.5);
  }
  check_close(w, {1.5, 2});
  Tensor v = ops::zeros({3});
  uint64_t before = v.version();
  v.fill_(2).mul_(3.0).add_(ops::ones({3})).copy_(ops::tensor({4, 5, 6}));
  check_close(v, {4, 5, 6});
  CHECK(v.version() == before + 4);
  v.zero_();
  check_close(v, {0, 0, 0});
  CHECK_ERROR_CONTAINS(v.add_(ops::zeros({2})), "add_", "[2]", "[3]");
}

TEST_CASE("no_grad: records nothing") {
  Tensor x = ops::ones({2});
  x.requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("detach: shares storage, cuts the graph") {
  Tensor x = ops::ones({2});
  x.requires_grad_();
  Tensor y = (x * 2.0).detach();
  CHECK(!y.requires_grad());
  CHECK(y.is_leaf());
  CHECK(ops::sum(y * x).grad_fn() != nullptr);
  ops::sum(y * x).backward();
  check_close(x.grad(), {2, 2});
}

TEST_CASE("retain_grad: a non-leaf keeps its gradient") {
  Tensor x = ops::tensor({1, 2});
  x.requires_grad_();
  Tensor h = x * 3.0;
  h.retain_grad();
  Tensor z = (h * h).sum();
  z.backward();
  check_close(h.grad(), {6, 12});
  Tensor h2 = x * 3.0;
  (h2 * h2).sum().backward();
  CHECK(!h2.grad().defined());  // not retained: no grad, as PyTorch
}

TEST_CASE("hooks: read and replace gradients on leaves and non-leaves") {
  Tensor x = ops::tensor({1, 2});
  x.requires_grad_();
  Tensor h = x * 2.0;
  Tensor seen;
  h.register_hook([&](const Tensor& g) { seen = g.detach().clone(); });  // read
  x.register_hook([](const Tensor& g) { return g * 10.0; });             // replace
  (h * h).sum().backward();
  check_close(seen, {4, 8});         // d(h^2)/dh = 2h
  check_close(x.grad(), {80, 160});  // 2h * 2 * 10
  CHECK_ERROR_CONTAINS(ops::ones({1}).register_hook([](const Tensor&) {}), "register_hook",
                       "does not require grad");
}

TEST_CASE("grad(): returns gradients without touching .grad()") {
  Tensor x = ops::tensor({1, 2}), y = ops::tensor({3, 4});
  x.requires_grad_();
  y.requires_grad_();
  Tensor z = ops::sum(x * y);
  auto g = grad({z}, {x, y});
  check_close(g[0], {3, 4});
  check_close(g[1], {1, 2});
  CHECK(!x.grad().defined());
  Tensor u = ops::ones({1});
  u.requires_grad_();
  CHECK_ERROR_CONTAINS(grad({ops::sum(x * 2.0)}, {u}), "grad", "not used");
}

TEST_CASE("second derivative: tanh") {
  // d/dx tanh = 1 - t^2; d2/dx2 = -2 t (1 - t^2)
  Tensor x = ops::tensor({0.3, -0.7}, kFloat64);
  x.requires_grad_();
  Tensor g = grad({ops::sum(ops::tanh(x))}, {x}, {}, true, true)[0];
  Tensor h = grad({ops::sum(g)}, {x})[0];
  std::vector<double> expect;
  for (double v : {0.3, -0.7})
    expect.push_back(-2 * std::tanh(v) * (1 - std::tanh(v) * std::tanh(v)));
  check_close(h, expect, 1e-12);
  check_grad(
      [](const V& v) { return grad({ops::sum(ops::tanh(v[0]))}, {v[0]}, {}, true, true)[0]; },
      {rand64({3}, 1)});
}

TEST_CASE("second derivative: mul") {
  // f = sum(x * x * y): df/dx = 2xy, d/dy of sum(df/dx) = 2x
  Tensor x = ops::tensor({1, 2}, kFloat64), y = ops::tensor({3, 5}, kFloat64);
  x.requires_grad_();
  y.requires_grad_();
  Tensor gx = grad({ops::sum(x * x * y)}, {x}, {}, true, true)[0];
  check_close(gx, {6, 20});
  ops::sum(gx).backward();
  check_close(y.grad(), {2, 4});
  check_close(x.grad(), {6, 10});  // d/dx sum(2xy) = 2y
  check_grad(
      [](const V& v) { return grad({ops::sum(v[0] * v[0] * v[1])}, {v[0]}, {}, true, true)[0]; },
      {rand64({3}, 2), rand64({3}, 3)});
}

TEST_CASE("second derivative: matmul") {
  check_grad(
      [](const V& v) {
        Tensor y = ops::matmul(v[0], v[1]);
        return grad({ops::sum(y * y)}, {v[0]}, {}, true, true)[0];
      },
      {rand64({2, 3}, 4), rand64({3, 2}, 5)});
}

TEST_CASE("second derivative: sum and mean") {
  check_grad(
      [](const V& v) {
        Tensor s = ops::sum(v[0], {1});
        return grad({ops::sum(s * s * s)}, {v[0]}, {}, true, true)[0];
      },
      {rand64({2, 3}, 6)});
  check_grad(
      [](const V& v) {
        Tensor m = ops::mean(v[0] * v[0]);
        return grad({m * m}, {v[0]}, {}, true, true)[0];
      },
      {rand64({4}, 7)});
}

TEST_CASE("second derivative: fused ops refuse with a clear error") {
  Tensor x = rand64({3}, 8);
  Tensor g = grad({ops::sum(ops::gelu(x))}, {x}, {}, true, true)[0];
  CHECK_ERROR_CONTAINS(ops::sum(g).backward(), "double backward", "gelu");
}

TEST_CASE("stack depth: backward through a 10,000-op chain") {
  Tensor x = ops::tensor({1.0}, kFloat64);
  x.requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = y * 1.0001;
  y.sum().backward();
  CHECK(x.grad().item() == doctest::Approx(std::pow(1.0001, 10000)).epsilon(1e-9));
}

TEST_CASE("stack depth: destroying a 100,000-op chain does not recurse, and frees it all") {
  Tensor x = ops::tensor({1.0});
  x.requires_grad_();
  std::weak_ptr<Node> first, last;
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) {
      y = ops::tanh(y) * 1.0;  // Saved tensors link the nodes too
      if (i == 0) first = y.grad_fn();
    }
    last = y.grad_fn();
    CHECK(!first.expired());
  }  // the whole chain dies here (a recursive teardown would overflow the stack)
  CHECK(last.expired());
  CHECK(first.expired());  // nothing kept alive by a cycle
}

TEST_CASE("requires_grad_: only on float leaves") {
  Tensor i = ops::arange(3);
  CHECK_ERROR_CONTAINS(i.requires_grad_(), "requires_grad_", "int64");
  Tensor x = ops::ones({1});
  x.requires_grad_();
  CHECK_ERROR_CONTAINS((x * 2.0).requires_grad_(false), "requires_grad_", "leaf");
}

TEST_CASE("gradcheck: reports the worst element of a wrong gradient") {
  // A deliberately wrong backward rule: claims d/dx (x^2) = x.
  auto wrong = [](const V& v) {
    const Tensor& x = v[0];
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    x.backend().binary(BinaryOp::Mul, x.strided(), x.strided(), y.strided());
    return record(y, "wrong_square", {x}, [sx = save(x)](const Tensor& dy, const Needs&) -> Grads {
      return {dy * sx.get()};
    });
  };
  GradcheckResult r = gradcheck(wrong, {rand64({3}, 9)});
  CHECK(!r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
  CHECK(r.message.find("numeric") != std::string::npos);
  CHECK(gradcheck([](const V& v) { return v[0] * v[0]; }, {rand64({3}, 9)}).ok);
  CHECK_ERROR_CONTAINS(
      gradcheck([](const V& v) { return v[0]; }, {ops::ones({1}).requires_grad_()}), "gradcheck",
      "float64");
}

TEST_CASE("hooks: a leaf's hook sees the summed gradient once, as PyTorch") {
  Tensor u = ops::tensor({1.5}, kFloat64);
  u.requires_grad_();
  int calls = 0;
  double seen = 0;
  u.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.item();
    return ops::clamp(g, std::nullopt, 2.0);  // a non-linear replacement
  });
  (u * u).sum().backward();  // two paths into u: 1.5 + 1.5
  CHECK(calls == 1);
  CHECK(seen == 3.0);
  CHECK(u.grad().item() == 2.0);
}

TEST_CASE("create_graph: leaf gradients are private copies (no aliasing between leaves)") {
  Tensor a = ops::tensor({1, 2}), b = ops::tensor({3, 4}), c = ops::tensor({5, 6});
  a.requires_grad_();
  b.requires_grad_();
  ops::sum((a + b) * c).backward({}, false, /*create_graph=*/true);
  CHECK(a.grad().storage() != b.grad().storage());
  ops::sum((a + b) * c).backward();  // plain backward accumulates into both
  check_close(a.grad(), {10, 12});
  check_close(b.grad(), {10, 12});
  // A broadcast gradient (expand's rule returns a stride-0 view) is stored contiguous.
  Tensor s = ops::tensor({2});
  s.requires_grad_();
  ops::sum(ops::expand(s, {3}) * ops::tensor({1, 2, 3})).backward({}, false, true);
  CHECK(s.grad().is_contiguous());
  ops::sum(s * 1.0).backward();
  check_close(s.grad(), {7});
}

TEST_CASE("grad(): does not fill .grad() of tensors that retain their gradient") {
  Tensor x = ops::tensor({1, 2});
  x.requires_grad_();
  Tensor h = x * 2.0;
  h.retain_grad();
  auto g = grad({ops::sum(h * h)}, {x});
  check_close(g[0], {8, 16});
  CHECK(!h.grad().defined());
}

TEST_CASE("backward: leaves given the same gradient tensor get separate .grad() memory") {
  Tensor a = ops::tensor({1, 2}), b = ops::tensor({3, 4});
  a.requires_grad_();
  b.requires_grad_();
  ops::sum(a + b).backward();  // add's rule hands the same dy to both
  CHECK(a.grad().storage() != b.grad().storage());
  {
    NoGradGuard ng;
    a.grad().add_(1.0);
  }
  check_close(a.grad(), {2, 2});
  check_close(b.grad(), {1, 1});
  Tensor w = ops::tensor({2});
  w.requires_grad_();
  ops::sum(ops::expand(w, {3})).backward();  // expand's rule: a stride-0 view
  CHECK(w.grad().is_contiguous());
  check_close(w.grad(), {3});
}

TEST_CASE("backward: gradients summed in place never change one that is shared or kept") {
  // Two gradients reaching one node are summed into whichever of them nothing else holds (as
  // PyTorch's InputBuffer). Here h = 2x feeds an add twice and a product: the add's rule hands
  // the same dy to both of its inputs, and a hook keeps the gradient that reaches u. The two
  // orders of the sum put the shared gradient first, then second, at h.
  for (const bool add_first : {true, false}) {
    CAPTURE(add_first);
    Tensor x = ops::tensor({1, 2});
    x.requires_grad_();
    Tensor h = x * 2.0;
    Tensor u = h + h;  // d/dh: dy twice, the same tensor
    Tensor kept;
    u.register_hook([&](const Tensor& g) { kept = g; });  // holds u's gradient, not a copy
    Tensor z =
        add_first ? ops::sum(u * 3.0) + ops::sum(h * h) : ops::sum(h * h) + ops::sum(u * 3.0);
    z.backward();
    check_close(kept, {3, 3});        // unchanged by the sums that followed
    check_close(x.grad(), {20, 28});  // dz/dh = 3 + 3 + 2h = 6 + 4x; times 2
    // A leaf's gradients are summed the same way (the add's dy reaches it twice).
    Tensor l = ops::tensor({1, 2});
    l.requires_grad_();
    (add_first ? ops::sum(l + l) + ops::sum(l * l) : ops::sum(l * l) + ops::sum(l + l)).backward();
    check_close(l.grad(), {4, 6});  // 2 + 2l
  }
  // With create_graph the sums are out of place (an in-place add to a gradient that requires
  // grad would throw) and stay differentiable.
  Tensor y = ops::tensor({3});
  y.requires_grad_();
  Tensor w = y * y;
  Tensor gy = vitrine::grad({ops::sum(w + w * y)}, {y}, {}, true, true)[0];  // 2y + 3y^2
  check_close(gy, {33});
  CHECK(gy.requires_grad());
  gy.sum().backward();  // d/dy (2y + 3y^2) = 2 + 6y
  check_close(y.grad(), {20});
}

TEST_CASE("backward: post-accumulate hooks run as soon as a leaf's gradient is complete") {
  // y = sum(tanh(tanh(x * w1) * w2)): backward reaches w2 before w1. When w2's hook runs, its
  // .grad() holds the total (both uses of w2 summed, plus what an earlier backward left) and w1
  // has no gradient yet: the hook runs during backward, not after it.
  Tensor x = ops::tensor({0.5, -1.0}), w1 = ops::tensor({0.3, 0.7}), w2 = ops::tensor({1.5});
  w1.requires_grad_();
  w2.requires_grad_();
  auto loss = [&] {
    Tensor h = ops::tanh(x * w1);
    return ops::sum(ops::tanh(h * w2) + h * w2);  // w2 used twice
  };
  std::vector<std::string> order;
  Tensor seen_w2;
  w2.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("w2");
    CHECK(!w1.grad().defined());
    seen_w2 = p.grad().clone();
  });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w1"); });
  loss().backward();
  CHECK(order == std::vector<std::string>{"w2", "w1"});
  check_close(seen_w2, w2.grad().to_vector<double>());
  const auto once = w2.grad().to_vector<double>();
  w1.set_grad(Tensor());
  loss().backward();  // accumulates: the hook sees twice the gradient
  check_close(seen_w2, {2 * once[0]});
  // grad() accumulates nothing, so it runs no post-accumulate hook.
  order.clear();
  (void)grad({loss()}, {w1, w2});
  CHECK(order.empty());
  CHECK_ERROR_CONTAINS((x * w1).register_post_accumulate_grad_hook([](const Tensor&) {}),
                       "must be a leaf");
}
