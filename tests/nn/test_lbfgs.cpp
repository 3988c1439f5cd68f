// LBFGS against PyTorch 1.13's torch.optim.LBFGS (tests/fixtures/lbfgs.json, made by
// make_lbfgs_fixture.py): 20 calls of step(closure) on the Rosenbrock function and on a small
// tanh network, without and with the strong-Wolfe line search, short histories, one iteration per
// call; the returned loss, the parameters and the n_iter / func_evals counters after every call,
// in float64 (rtol 1e-10, atol 1e-12) and in float32 (rtol 1e-5, atol 1e-7). The Rosenbrock runs
// match bit for bit (some of them amplify any rounding difference: see the fixture script); the
// network's are chosen insensitive to rounding. Also the state round trip, the defaults and the
// error messages. VT_OPTIM_REPORT=1 prints the largest errors.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>

#include "nn/optim/lbfgs.h"
#include "test_util.h"
#include "trajectory_check.h"

using namespace vitrine;
using namespace vt_test;
using namespace vitrine::nn::optim;
using nlohmann::json;
using vitrine::nn::NamedTensors;

namespace {

const json& fx() { return fixture_json("lbfgs.json"); }

/// A fixture problem: its parameters (fresh leaves) and its loss.
struct Problem {
  std::vector<Tensor> params;
  std::function<Tensor()> loss;
};

Problem make_problem(const std::string& name, DType dtype, Device device = kCPU) {
  Problem pr;
  if (name == "rosenbrock") {
    // f(p) = (1 - p0)^2 + 100 (p1 - p0^2)^2
    const auto start = fx().at("rosenbrock_start").get<std::vector<double>>();
    Tensor p = ops::from_vector(start, {2}).to(dtype).to(device);
    p.requires_grad_();
    pr.params = {p};
    pr.loss = [p] {
      const Tensor a = p.select(0, 0), b = p.select(0, 1);
      return ops::pow(1.0 - a, 2) + 100.0 * ops::pow(b - ops::pow(a, 2), 2);
    };
    return pr;
  }
  // loss = mean((tanh(x W1^T + b1) W2^T + b2 - y)^2)
  for (const json& init : fx().at("init")) {
    Tensor p = fixture_tensor(init, dtype).to(device);
    p.requires_grad_();
    pr.params.push_back(p);
  }
  const Tensor x = fixture_tensor(fx().at("x"), dtype).to(device);
  const Tensor y = fixture_tensor(fx().at("y"), dtype).to(device);
  const auto p = pr.params;
  pr.loss = [p, x, y] {
    const Tensor h = ops::tanh(ops::matmul(x, p[0].mT()) + p[1]);
    const Tensor d = ops::matmul(h, p[2].mT()) + p[3] - y;
    return ops::mean(d * d);
  };
  return pr;
}

LBFGSOptions options_from(const json& o) {
  LBFGSOptions out;
  if (o.contains("lr")) out.lr = o.at("lr");
  if (o.contains("max_iter")) out.max_iter = o.at("max_iter");
  if (o.contains("max_eval")) out.max_eval = o.at("max_eval").get<int64_t>();
  if (o.contains("tolerance_grad")) out.tolerance_grad = o.at("tolerance_grad");
  if (o.contains("tolerance_change")) out.tolerance_change = o.at("tolerance_change");
  if (o.contains("history_size")) out.history_size = o.at("history_size");
  if (o.contains("line_search_fn")) out.line_search_fn = o.at("line_search_fn");
  return out;
}

/// Calls [begin, end) of a fixture run: step(closure), then the returned loss, the parameters
/// and the counters against PyTorch's after that call.
void run_calls(const json& ref, Problem& pr, LBFGS& opt, int64_t begin, int64_t end, Tolerance tol,
               Errors& err) {
  auto closure = [&] {
    opt.zero_grad();
    Tensor l = pr.loss();
    l.backward();
    return l;
  };
  for (int64_t c = begin; c < end; ++c) {
    INFO("call " << c);
    const Tensor loss = opt.step(closure);
    check_values({loss.item()}, {ref.at("losses")[c].get<double>()}, tol, err);
    for (size_t k = 0; k < pr.params.size(); ++k) {
      INFO("parameter " << k);
      check_values(pr.params[k].to_vector<double>(),
                   ref.at("params")[c][k].get<std::vector<double>>(), tol, err);
    }
    CHECK(opt.n_iter() == ref.at("n_iter")[c].get<int64_t>());
    CHECK(opt.func_evals() == ref.at("func_evals")[c].get<int64_t>());
  }
}

void check_case(const std::string& name) {
  INFO(name);
  const json& c = fx().at("cases").at(name);
  Problem pr = make_problem(c.at("config").at("problem"), kFloat64);
  LBFGS opt(pr.params, options_from(c.at("config").at("options")));
  Errors err;
  run_calls(c.at("float64"), pr, opt, 0, fx().at("calls"), tolerance(kFloat64), err);
  err.report(name);
}

/// Runs half a case, saves the state (JSON through text, tensors copied), loads it into a fresh
/// optimizer (other options, which the state overwrites) over a copy of the parameters, and
/// checks that both continue identically and along PyTorch's run.
void check_state_round_trip(const std::string& name) {
  INFO(name);
  const json& c = fx().at("cases").at(name);
  const json& ref = c.at("float64");
  const int64_t calls = fx().at("calls"), half = calls / 2;
  const Tolerance tol = tolerance(kFloat64);
  Errors err;
  Problem pr = make_problem(c.at("config").at("problem"), kFloat64);
  LBFGS opt(pr.params, options_from(c.at("config").at("options")));
  run_calls(ref, pr, opt, 0, half, tol, err);

  const json saved = json::parse(opt.state_json().dump());
  NamedTensors tensors;
  for (const auto& [key, t] : opt.state_tensors()) tensors.emplace_back(key, t.clone());
  REQUIRE(!tensors.empty());
  Problem pr2 = make_problem(c.at("config").at("problem"), kFloat64);
  {
    NoGradGuard no_grad;
    for (size_t k = 0; k < pr.params.size(); ++k) pr2.params[k].copy_(pr.params[k]);
  }
  LBFGS opt2(pr2.params, LBFGSOptions{.lr = 123, .max_iter = 3, .history_size = 1});
  opt2.load_state(tensors, saved);
  CHECK(opt2.state_json() == saved);
  CHECK(opt2.history_length() == opt.history_length());

  run_calls(ref, pr, opt, half, calls, tol, err);
  run_calls(ref, pr2, opt2, half, calls, tol, err);
  for (size_t k = 0; k < pr.params.size(); ++k)
    CHECK(pr.params[k].to_vector<double>() == pr2.params[k].to_vector<double>());
}

Tensor leaf(std::initializer_list<double> v) {
  Tensor t = ops::tensor(v, kFloat64);
  t.requires_grad_();
  return t;
}

}  // namespace

TEST_CASE("lbfgs: Rosenbrock without line search matches PyTorch (fixed steps of lr 1)") {
  check_case("rosenbrock_none");
}

TEST_CASE("lbfgs: Rosenbrock with the strong-Wolfe line search matches PyTorch") {
  check_case("rosenbrock_wolfe");
}

TEST_CASE("lbfgs: Rosenbrock with one iteration per call matches PyTorch (both line searches)") {
  check_case("rosenbrock_none_iter1");
  check_case("rosenbrock_wolfe_iter1");
}

TEST_CASE("lbfgs: Rosenbrock with history_size 3, max_eval and tolerance_change matches PyTorch") {
  check_case("rosenbrock_wolfe_hist3");
}

TEST_CASE("lbfgs: tanh network without and with strong Wolfe matches PyTorch (defaults)") {
  check_case("net_none");
  check_case("net_wolfe");
}

TEST_CASE("lbfgs: tanh network with strong Wolfe and 3 iterations per call matches PyTorch") {
  check_case("net_wolfe_iter3");
}

TEST_CASE(
    "lbfgs: tanh network with history_size 3 matches PyTorch (strong Wolfe, and max_eval "
    "below max_iter)") {
  check_case("net_wolfe_hist3");
  check_case("net_none_hist3");
}

TEST_CASE("lbfgs: float32 run matches PyTorch's float32 run") {
  const json& c = fx().at("float32");
  Problem pr = make_problem(c.at("config").at("problem"), kFloat32);
  LBFGS opt(pr.params, options_from(c.at("config").at("options")));
  Errors err;
  run_calls(c.at("float32"), pr, opt, 0, c.at("calls"), tolerance(kFloat32), err);
  err.report("float32");
}

TEST_CASE(
    "lbfgs: a saved state continues the same run (full histories, strong Wolfe and fixed "
    "steps)") {
  check_state_round_trip("rosenbrock_wolfe_hist3");
  check_state_round_trip("net_wolfe_hist3");
  check_state_round_trip("rosenbrock_none_iter1");
}

TEST_CASE("lbfgs: runs on CUDA along PyTorch's CPU runs (Rosenbrock and the network, float64)") {
  if (!gpu_or_skip()) return;
  // CUDA's pow, matmul and reductions round differently from the CPU's: 1e-8 rather than 1e-10
  // (both cases are insensitive to rounding, see the fixture's "sensitivity").
  for (const std::string name : {"rosenbrock_wolfe", "net_wolfe_iter3"}) {
    INFO(name);
    const json& c = fx().at("cases").at(name);
    Problem pr = make_problem(c.at("config").at("problem"), kFloat64, Device::parse("cuda"));
    LBFGS opt(pr.params, options_from(c.at("config").at("options")));
    Errors err;
    run_calls(c.at("float64"), pr, opt, 0, fx().at("calls"), Tolerance{1e-8, 1e-10}, err);
    err.report(name + " on CUDA");
  }
}

TEST_CASE("lbfgs: PyTorch's defaults, step(closure) with grad mode off, state names") {
  Tensor w = leaf({3.0, -1.0});
  LBFGS opt({w});
  const LBFGSOptions o = opt.options();
  CHECK(o.lr == 1);
  CHECK(o.max_iter == 20);
  CHECK(o.max_eval == 25);  // max_iter * 5 / 4
  CHECK(o.tolerance_grad == 1e-7);
  CHECK(o.tolerance_change == 1e-9);
  CHECK(o.history_size == 100);
  CHECK(o.line_search_fn.empty());
  LBFGS wolfe({leaf({1.0})}, {.line_search_fn = "strong_wolfe"});
  CHECK(wolfe.options().line_search_fn == "strong_wolfe");
  CHECK(LBFGS({leaf({1.0})}, LBFGSOptions{.max_iter = 1}).options().max_eval == 1);
  CHECK(LBFGS({leaf({1.0})}, LBFGSOptions{.max_iter = 7}).options().max_eval == 8);
  CHECK(opt.state_tensors().empty());

  // A quadratic f = w0^2 + 2 w1^2, with the closure run under NoGradGuard: it records anyway.
  NoGradGuard outside;
  int calls = 0;
  const Tensor loss = opt.step([&] {
    ++calls;
    opt.zero_grad();
    Tensor l = w.select(0, 0) * w.select(0, 0) + 2.0 * (w.select(0, 1) * w.select(0, 1));
    l.backward();
    return l;
  });
  CHECK(loss.item() == 11.0);  // the first evaluation's loss
  // PyTorch 1.13 stops after 5 evaluations (the loss changes by less than tolerance_change) at:
  CHECK(calls == 5);
  CHECK(opt.func_evals() == 5);
  CHECK(opt.n_iter() == 5);
  CHECK(opt.history_length() == 4);
  CHECK(w.at({0}) == doctest::Approx(-1.615232901137475e-05).epsilon(1e-10));
  CHECK(w.at({1}) == doctest::Approx(8.867416064158029e-06).epsilon(1e-10));
  std::vector<std::string> names;
  for (const auto& [key, t] : opt.state_tensors()) {
    names.push_back(key);
    CHECK(t.shape() == Dims{2});
  }
  REQUIRE(names.size() >= 4);
  CHECK(names[0] == "0.0.d");
  CHECK(names[1] == "0.0.prev_flat_grad");
  CHECK(names[2] == "0.0.old_dirs.0");
  CHECK(names[3] == "0.0.old_stps.0");
  const json j = opt.state_json();
  CHECK(j.at("type") == "LBFGS");
  CHECK(j.at("n_iter") == opt.n_iter());
}

TEST_CASE("lbfgs: bad options, two groups, step without a closure and bad states are refused") {
  CHECK_ERROR_CONTAINS(LBFGS({leaf({1.0})}, LBFGSOptions{.lr = 0}), "LBFGS: lr must be > 0, got 0");
  CHECK_ERROR_CONTAINS(LBFGS({leaf({1.0})}, LBFGSOptions{.lr = -0.5}),
                       "LBFGS: lr must be > 0, got -0.5");
  CHECK_ERROR_CONTAINS(LBFGS({leaf({1.0})}, LBFGSOptions{.line_search_fn = "backtracking"}),
                       "LBFGS: line_search_fn must be \"\" (none) or \"strong_wolfe\", got "
                       "\"backtracking\"");
  CHECK_ERROR_CONTAINS(LBFGS({leaf({1.0})}, LBFGSOptions{.history_size = 0}),
                       "LBFGS: history_size must be >= 1, got 0");
  CHECK_ERROR_CONTAINS(LBFGS({leaf({1.0})}, LBFGSOptions{.max_iter = 0}),
                       "LBFGS: max_iter must be >= 1, got 0");
  ParamGroup a, b;
  a.params = {leaf({1.0})};
  b.params = {leaf({2.0})};
  a.lr = b.lr = 1;
  CHECK_ERROR_CONTAINS(LBFGS(std::vector<ParamGroup>{a, b}),
                       "LBFGS: got 2 param groups; LBFGS doesn't support per-parameter options "
                       "(parameter groups)");
  a.weight_decay = 0.1;
  CHECK_ERROR_CONTAINS(LBFGS(std::vector<ParamGroup>{a}),
                       "LBFGS: param group 0 has weight_decay 0.1; LBFGS has no weight decay");
  Tensor f32 = ops::tensor({1.0}, kFloat32);
  f32.requires_grad_();
  CHECK_ERROR_CONTAINS(LBFGS({leaf({1.0}), f32}),
                       "LBFGS: parameter 1 is float32 on cpu, parameter 0 float64 on cpu");

  Tensor w = leaf({1.0, 2.0});
  LBFGS opt({w});
  CHECK_ERROR_CONTAINS(opt.step(), "LBFGS: step() needs a closure");
  CHECK_ERROR_CONTAINS(opt.step(LossClosure{}), "LBFGS: step(closure) needs a closure");
  CHECK_ERROR_CONTAINS(opt.step([&] { return w * 1.0; }),
                       "LBFGS: the closure must return the loss, a one-element tensor; got shape "
                       "[2]");

  // A state saved by another optimizer size, or with a tensor missing.
  Tensor v = leaf({1.0, 2.0});
  LBFGS run({v});
  run.step([&] {
    run.zero_grad();
    Tensor l = (v * v).sum();
    l.backward();
    return l;
  });
  const json saved = run.state_json();
  NamedTensors tensors = run.state_tensors();
  Tensor u = leaf({1.0, 2.0, 3.0});
  LBFGS other({u});
  CHECK_ERROR_CONTAINS(other.load_state(tensors, saved),
                       "LBFGS: load_state: state tensor 0.0.d has shape [2], expected [3]");
  LBFGS same({leaf({1.0, 2.0})});
  tensors.pop_back();
  CHECK_ERROR_CONTAINS(same.load_state(tensors, saved), "LBFGS: load_state: state tensor");
  CHECK(same.n_iter() == 0);  // a failed load changes nothing
}
