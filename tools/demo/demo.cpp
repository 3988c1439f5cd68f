// vitrine-demo: builds a small expression graph (one neuron and its loss), prints the values, the
// graph the ops recorded, and the gradients backward() computed, then checks them against the
// chain rule worked out by hand and against finite differences. docs/autograd.md walks through
// this output.
#include <cmath>
#include <cstdio>
#include <string>

#include "vitrine.h"

namespace vt = vitrine;
using vt::Tensor;

namespace {
/// Prints the graph below a tensor: each node's op name, then its inputs, indented.
void print_graph(const std::shared_ptr<vt::Node>& node, int depth) {
  std::string pad(2 * depth + 4, ' ');
  fmt::print("{}{}\n", pad, node->name);
  for (const vt::Edge& e : node->inputs) {
    if (e.node)
      print_graph(e.node, depth + 1);
    else if (e.leaf)
      fmt::print("{}  leaf {}\n", pad, vt::Dims(e.shape));
  }
}
}  // namespace

int main() {
  try {
    fmt::print("Vitrine demo: one neuron, y = tanh(w . x + b), loss = (y - t)^2\n\n");
    Tensor x = vt::ops::tensor({1.0, 2.0});  // an input: no gradient wanted
    Tensor w = vt::ops::tensor({0.5, -0.1});
    Tensor b = vt::ops::tensor({0.1});
    w.requires_grad_();  // parameters: leaves whose gradients we want
    b.requires_grad_();
    const double t = 0.8;  // target

    Tensor z = vt::ops::sum(w * x) + b;  // mul, sum, add
    Tensor y = vt::ops::tanh(z);
    Tensor loss = vt::ops::pow(y - t, 2.0);
    z.retain_grad();  // keep dloss/dz (a non-leaf) for printing
    y.retain_grad();

    fmt::print("forward\n");
    fmt::print("  x    = {}\n", x);
    fmt::print("  w    = {}\n", w);
    fmt::print("  b    = {}\n", b);
    fmt::print("  z    = sum(w * x) + b = {:.6f}\n", z.item());
    fmt::print("  y    = tanh(z)        = {:.6f}\n", y.item());
    fmt::print("  loss = (y - {})^2    = {:.6f}\n\n", t, loss.item());

    fmt::print("graph recorded by the ops (loss at the top, leaves at the bottom)\n");
    print_graph(loss.grad_fn(), 0);

    loss.backward();
    fmt::print(
        "\nbackward (the engine runs each node's rule once, in reverse topological order)\n");
    fmt::print("  dloss/dy = {:.6f}\n", y.grad().item());
    fmt::print("  dloss/dz = {:.6f}\n", z.grad().item());
    fmt::print("  dloss/dw = {}\n", w.grad());
    fmt::print("  dloss/db = {}\n\n", b.grad());

    // The same numbers by hand: the chain rule, one factor per node.
    double yv = y.item(), zv = z.item();
    double dy = 2 * (yv - t);        // pow:  d(u^2)/du = 2u
    double dz = dy * (1 - yv * yv);  // tanh: 1 - tanh(z)^2
    fmt::print("by hand\n");
    fmt::print("  dloss/dy = 2 (y - t)             = {:.6f}\n", dy);
    fmt::print("  dloss/dz = dloss/dy (1 - y^2)    = {:.6f}\n", dz);
    fmt::print("  dloss/dw = dloss/dz * x          = [{:.6f}, {:.6f}]\n", dz * 1.0, dz * 2.0);
    fmt::print("  dloss/db = dloss/dz              = {:.6f}\n", dz);
    (void)zv;

    // And numerically, in float64, with the public gradcheck.
    auto f = [&](const std::vector<Tensor>& in) {
      Tensor zz = vt::ops::sum(in[0] * x.to(vt::kFloat64)) + in[1];
      return vt::ops::pow(vt::ops::tanh(zz) - t, 2.0);
    };
    Tensor w64 = w.detach().to(vt::kFloat64), b64 = b.detach().to(vt::kFloat64);
    w64.requires_grad_();
    b64.requires_grad_();
    vt::GradcheckResult r = vt::gradcheck(f, {w64, b64});
    fmt::print("\ngradcheck (analytic vs central differences, float64): {} (max |error| {:.2e})\n",
               r.ok ? "ok" : "FAILED", r.max_abs_error);
    bool agree = std::fabs(w.grad().at({0}) - dz) < 1e-5 && std::fabs(b.grad().item() - dz) < 1e-5;
    fmt::print("backward agrees with the chain rule by hand: {}\n", agree ? "yes" : "NO");
    return r.ok && agree ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
