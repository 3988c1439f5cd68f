// Optimizers, schedules and gradient clipping against PyTorch (tests/fixtures/optim.json, made by
// make_optim_fixtures.py with torch.optim's single-tensor code): 20-step trajectories of a small
// tanh network in float64 (rtol 1e-10) and float32 (rtol 1e-5, atol 1e-7), one kernel step
// compared bit for bit, state save/load, schedules, clip_grad_norm_, and error messages.
// VT_OPTIM_REPORT=1 prints the largest errors against PyTorch.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>

#include "nn/module.h"
#include "nn/optim/adam.h"
#include "nn/optim/adaptive.h"
#include "nn/optim/clip.h"
#include "nn/optim/schedule.h"
#include "nn/optim/sgd.h"
#include "test_util.h"
#include "trajectory_check.h"

using namespace vitrine;
using namespace vt_test;
using namespace vitrine::nn::optim;
using nlohmann::json;
namespace nn = vitrine::nn;
using nn::NamedTensors;

namespace {

const json& fx() { return fixture_json("optim.json"); }

Tensor decode(const json& j, DType dtype = kFloat64) { return fixture_tensor(j, dtype); }

std::string dtype_key(DType dtype) { return dtype == kFloat64 ? "float64" : "float32"; }

struct Dense : nn::Module {
  Tensor weight, bias;
  Dense(const Tensor& w, const Tensor& b) {
    weight = register_parameter("weight", w);
    bias = register_parameter("bias", b);
  }
  std::string type_name() const override { return "Dense"; }
};

/// The fixed problem: loss = mean((tanh(x W1^T + b1) W2^T + b2 - y)^2), parameters from the
/// fixture (fc1.weight, fc1.bias, fc2.weight, fc2.bias).
struct Net : nn::Module {
  std::shared_ptr<Dense> fc1, fc2;
  Tensor x, y;
  explicit Net(DType dtype) {
    const json& init = fx().at("init");
    fc1 = register_module("fc1",
                          std::make_shared<Dense>(decode(init[0], dtype), decode(init[1], dtype)));
    fc2 = register_module("fc2",
                          std::make_shared<Dense>(decode(init[2], dtype), decode(init[3], dtype)));
    x = decode(fx().at("x"), dtype);
    y = decode(fx().at("y"), dtype);
  }
  std::string type_name() const override { return "Net"; }
  Tensor loss() const {
    Tensor h = ops::tanh(ops::matmul(x, fc1->weight.mT()) + fc1->bias);
    Tensor d = ops::matmul(h, fc2->weight.mT()) + fc2->bias - y;
    return ops::mean(d * d);
  }
};

std::unique_ptr<Optimizer> make_optimizer(const json& cfg, const Net& net) {
  const double lr = cfg.at("lr"), wd = cfg.at("weight_decay");
  std::vector<ParamGroup> groups;
  if (cfg.at("groups") == "decay") {
    groups = param_groups_with_decay(net, lr, wd);
  } else {
    ParamGroup g;
    g.params = net.parameters();
    g.lr = lr;
    g.weight_decay = wd;
    groups = {g};
  }
  const std::string kind = cfg.at("optimizer");
  if (kind == "adamw")
    return std::make_unique<AdamW>(
        groups,
        AdamWOptions{.beta1 = cfg.at("beta1"), .beta2 = cfg.at("beta2"), .eps = cfg.at("eps")});
  if (kind == "adam")
    return std::make_unique<Adam>(
        groups,
        AdamOptions{.beta1 = cfg.at("beta1"), .beta2 = cfg.at("beta2"), .eps = cfg.at("eps")});
  if (kind == "adadelta")
    return std::make_unique<Adadelta>(
        groups, AdadeltaOptions{
                    .rho = cfg.at("rho"), .eps = cfg.at("eps"), .maximize = cfg.at("maximize")});
  if (kind == "rmsprop")
    return std::make_unique<RMSprop>(groups, RMSpropOptions{.alpha = cfg.at("alpha"),
                                                            .eps = cfg.at("eps"),
                                                            .momentum = cfg.at("momentum"),
                                                            .centered = cfg.at("centered"),
                                                            .maximize = cfg.at("maximize")});
  if (kind == "adagrad")
    return std::make_unique<Adagrad>(
        groups, AdagradOptions{.lr_decay = cfg.at("lr_decay"),
                               .initial_accumulator_value = cfg.at("initial_accumulator_value"),
                               .eps = cfg.at("eps"),
                               .maximize = cfg.at("maximize")});
  return std::make_unique<SGD>(groups, SGDOptions{.momentum = cfg.at("momentum"),
                                                  .dampening = cfg.at("dampening"),
                                                  .nesterov = cfg.at("nesterov")});
}

/// Runs steps [begin, end) of a fixture case (schedule, zero_grad, loss, backward, optional clip,
/// step) and checks loss, clip norm and parameters after every step against PyTorch.
void run_steps(const json& c, DType dtype, Net& net, Optimizer& opt, const Schedule& schedule,
               int64_t begin, int64_t end, Errors& err) {
  const json& cfg = c.at("config");
  const json& ref = c.at(dtype_key(dtype));
  const Tolerance tol = tolerance(dtype);
  const auto params = net.parameters();
  for (int64_t s = begin; s < end; ++s) {
    INFO("step " << s);
    schedule.apply(opt, s);
    opt.zero_grad();
    Tensor loss = net.loss();
    Errors loss_err;
    check_values({loss.item()}, {ref.at("losses")[s].get<double>()}, tol, loss_err);
    loss.backward();
    if (cfg.contains("clip")) {
      const double norm = clip_grad_norm_(params, cfg.at("clip"));
      check_values({norm}, {ref.at("clip_norms")[s].get<double>()}, tol, loss_err);
    }
    opt.step();
    for (size_t k = 0; k < params.size(); ++k) {
      INFO("parameter " << fx().at("names")[k].get<std::string>());
      check_values(params[k].to_vector<double>(), ref.at("params")[s][k].get<std::vector<double>>(),
                   tol, err);
    }
  }
}

/// The whole 20-step trajectory of a case, in float64 and float32.
void check_trajectory(const std::string& name) {
  const json& c = fx().at("cases").at(name);
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(name << " " << dtype_key(dtype));
    Net net(dtype);
    auto opt = make_optimizer(c.at("config"), net);
    auto schedule = schedule_from_json(c.at("config").at("schedule"));
    Errors err;
    run_steps(c, dtype, net, *opt, *schedule, 0, fx().at("steps"), err);
    err.report(name + " " + dtype_key(dtype));
  }
}

/// Runs half a case, saves the optimizer's state (JSON through text, tensors copied), loads it
/// into a fresh optimizer over a copy of the network, and checks that both continue identically
/// and along PyTorch's trajectory.
void check_state_round_trip(const std::string& name) {
  const json& c = fx().at("cases").at(name);
  const int64_t steps = fx().at("steps"), half = steps / 2;
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(name << " " << dtype_key(dtype));
    Net net(dtype);
    auto opt = make_optimizer(c.at("config"), net);
    auto schedule = schedule_from_json(c.at("config").at("schedule"));
    Errors err;
    run_steps(c, dtype, net, *opt, *schedule, 0, half, err);

    const json saved = json::parse(opt->state_json().dump());
    NamedTensors tensors;
    for (const auto& [key, t] : opt->state_tensors()) tensors.emplace_back(key, t.clone());
    REQUIRE(!tensors.empty());
    Net net2(dtype);
    {
      NoGradGuard no_grad;
      auto p1 = net.parameters(), p2 = net2.parameters();
      for (size_t k = 0; k < p1.size(); ++k) p2[k].copy_(p1[k]);
    }
    json fresh_cfg = c.at("config");
    fresh_cfg["lr"] = 123.0;  // overwritten by load_state, as PyTorch's load_state_dict
    auto opt2 = make_optimizer(fresh_cfg, net2);
    opt2->load_state(tensors, saved);
    CHECK(opt2->state_json() == saved);
    auto schedule2 = schedule_from_json(json::parse(schedule->state_json().dump()));

    run_steps(c, dtype, net, *opt, *schedule, half, steps, err);
    run_steps(c, dtype, net2, *opt2, *schedule2, half, steps, err);
    auto p1 = net.parameters(), p2 = net2.parameters();
    for (size_t k = 0; k < p1.size(); ++k)
      CHECK(p1[k].to_vector<double>() == p2[k].to_vector<double>());
  }
}

/// A tensor from the kernel fixture's inputs.
Tensor kernel_input(const std::string& name, DType dtype) {
  return decode(fx().at("kernel").at("inputs").at(name), dtype);
}

/// Number of elements that differ from expected (bitwise, after conversion to double).
int64_t count_mismatches(const Tensor& t, const json& expected) {
  auto got = t.to_vector<double>();
  auto want = expected.at("data").get<std::vector<double>>();
  REQUIRE(got.size() == want.size());
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) n += got[i] != want[i];
  return n;
}

/// One Backend step of a kernel fixture case from its given state, compared bit for bit in both
/// dtypes. The fixture holds PyTorch's CPU results (AVX2 kernels, which round a.add(b, alpha)
/// and addcmul once, as the CPU kernel's std::fma does).
void check_kernel_step(const std::string& name) {
  const json& c = fx().at("kernel").at("cases").at(name);
  const json& cfg = c.at("config");
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(name << " " << dtype_key(dtype));
    const json& ref = c.at(dtype_key(dtype));
    Tensor p = kernel_input("p", dtype), g = kernel_input("g", dtype);
    Backend& be = p.backend();
    if (cfg.at("optimizer") == "sgd") {
      Tensor buf = cfg.at("first") ? ops::zeros_like(p) : kernel_input("buf", dtype);
      SgdStep o{cfg.at("lr"),           cfg.at("momentum"), cfg.at("dampening"),
                cfg.at("weight_decay"), cfg.at("nesterov"), cfg.at("first")};
      be.sgd_step(p.strided(), g.strided(), buf.strided(), o);
      if (ref.contains("buf")) CHECK(count_mismatches(buf, ref.at("buf")) == 0);
    } else {
      Tensor m = kernel_input("m", dtype), v = kernel_input("v", dtype);
      AdamStep o{cfg.at("lr"),
                 cfg.at("beta1"),
                 cfg.at("beta2"),
                 cfg.at("eps"),
                 cfg.at("weight_decay"),
                 cfg.at("step"),
                 cfg.at("optimizer") == "adamw"};
      be.adam_step(p.strided(), g.strided(), m.strided(), v.strided(), o);
      CHECK(count_mismatches(m, ref.at("m")) == 0);
      CHECK(count_mismatches(v, ref.at("v")) == 0);
    }
    CHECK(count_mismatches(p, ref.at("p")) == 0);
  }
}

/// A small module for param_groups_with_decay: weight [3, 2], bias [3], pos_embed [1, 2, 2],
/// scale [2] (1-D), frozen [2, 2] (requires_grad false).
struct Block : nn::Module {
  Block() {
    register_parameter("weight", ops::zeros({3, 2}));
    register_parameter("bias", ops::zeros({3}));
    register_parameter("pos_embed", ops::zeros({1, 2, 2}));
    register_parameter("scale", ops::ones({2}));
    register_parameter("frozen", ops::zeros({2, 2}), false);
  }
};
struct Model : nn::Module {
  Model() {
    register_module("block", std::make_shared<Block>());
    register_parameter("head", ops::zeros({2, 3}));
  }
};

Tensor leaf(std::initializer_list<double> v, DType dtype = kFloat64) {
  Tensor t = ops::tensor(v, dtype);
  t.requires_grad_();
  return t;
}

}  // namespace

// ---- trajectories against PyTorch ------------------------------------------------------------

TEST_CASE("adadelta: trajectory matches PyTorch (L2 weight decay, decay groups, StepLR)") {
  check_trajectory("adadelta");
  check_state_round_trip("adadelta");
}

TEST_CASE("rmsprop: trajectory matches PyTorch (defaults, and centered with momentum)") {
  for (const char* name : {"rmsprop", "rmsprop_centered"}) {
    check_trajectory(name);
    check_state_round_trip(name);
  }
}

TEST_CASE("adagrad: trajectory matches PyTorch (lr decay, initial accumulator, weight decay)") {
  check_trajectory("adagrad");
  check_state_round_trip("adagrad");
}

TEST_CASE("optimizers: PyTorch's defaults, state names, step(closure), and bad options") {
  Tensor w = leaf({1.0, -2.0});
  Adadelta adadelta({w});
  CHECK(adadelta.param_groups()[0].lr == 1.0);
  RMSprop rmsprop({w});
  CHECK(rmsprop.param_groups()[0].lr == 1e-2);
  Adagrad adagrad({w});
  CHECK(adagrad.param_groups()[0].lr == 1e-2);
  // step(closure): the loss from the closure (with gradients on), then one update.
  Tensor v = leaf({3.0});
  Adagrad opt({v}, AdagradOptions{.lr = 0.5});
  NoGradGuard outside;  // the closure still records a graph
  int calls = 0;
  const Tensor loss = opt.step([&] {
    ++calls;
    opt.zero_grad();
    Tensor l = v * v;
    l.backward();
    return l;
  });
  CHECK(calls == 1);
  CHECK(loss.item() == 9.0);
  // Adagrad's first step: sum = 36, p = 3 - 0.5 * 6 / (6 + 1e-10).
  CHECK(v.item() == doctest::Approx(3 - 0.5 * 6 / (6 + 1e-10)).epsilon(1e-15));
  CHECK(opt.step_count(0, 0) == 1);
  const NamedTensors st = opt.state_tensors();
  REQUIRE(st.size() == 1);
  CHECK(st[0].first == "0.0.sum");
  RMSprop centered({leaf({1.0})}, RMSpropOptions{.momentum = 0.9, .centered = true});
  CHECK(centered.state_tensors().empty());  // no gradient yet: no state
  CHECK_ERROR_CONTAINS(Adadelta({leaf({1.0})}, AdadeltaOptions{.rho = 1.5}),
                       "Adadelta: rho must be in [0, 1], got 1.5");
  CHECK_ERROR_CONTAINS(RMSprop({leaf({1.0})}, RMSpropOptions{.momentum = -1}),
                       "RMSprop: momentum must be >= 0, got -1");
  CHECK_ERROR_CONTAINS(Adagrad({leaf({1.0})}, AdagradOptions{.lr_decay = -0.1}),
                       "Adagrad: lr_decay must be >= 0, got -0.1");
  CHECK_ERROR_CONTAINS(opt.step(LossClosure{}), "Adagrad: step(closure) needs a closure");
}

TEST_CASE("adamw: trajectory matches PyTorch (decay/no_decay groups, warm-up cosine)") {
  check_trajectory("adamw");
}

TEST_CASE("adamw: trajectory with clip_grad_norm_ before every step matches PyTorch") {
  check_trajectory("adamw_clip");
}

TEST_CASE("adam: trajectory with L2 weight decay matches PyTorch (decay groups, warm-up cosine)") {
  check_trajectory("adam_wd");
}

TEST_CASE("adam: trajectory without weight decay matches PyTorch (constant lr)") {
  check_trajectory("adam");
}

TEST_CASE("sgd: momentum and dampening trajectory matches PyTorch (decay groups, warm-up cosine)") {
  check_trajectory("sgd_momentum");
}

TEST_CASE("sgd: nesterov trajectory matches PyTorch (step schedule)") {
  check_trajectory("sgd_nesterov");
}

// ---- one kernel step, bit for bit ------------------------------------------------------------

TEST_CASE("adam: one kernel step from given state equals PyTorch's bit for bit") {
  for (const char* name : {"adam", "adamw"}) check_kernel_step(name);
}

TEST_CASE("sgd: one kernel step from given state equals PyTorch's bit for bit") {
  for (const char* name : {"sgd", "sgd_nesterov", "sgd_first", "sgd_plain"})
    check_kernel_step(name);
}

TEST_CASE("adamw: large (parallel) and non-contiguous parameters get the same update") {
  // 40000 elements run in parallel chunks; the same values as four separate parameters of 10000
  // (one thread each) and as a transposed (non-contiguous) view must be updated identically.
  Generator gen(7);
  Tensor values = ops::randn({4, 10000}, gen), grads = ops::randn({4, 10000}, gen);
  Tensor big = values.clone().requires_grad_();
  std::vector<Tensor> parts;
  for (int64_t r = 0; r < 4; ++r) {
    parts.push_back(values.select(0, r).clone().requires_grad_());
  }
  Tensor strided = values.clone().mT().requires_grad_();  // [10000, 4], a leaf view
  REQUIRE(!strided.is_contiguous());
  AdamW big_opt({big}, {.lr = 0.01});
  AdamW parts_opt(parts, {.lr = 0.01});
  AdamW strided_opt({strided}, {.lr = 0.01});
  for (int step = 0; step < 3; ++step) {
    big.set_grad(grads * (step + 1.0));
    for (int64_t r = 0; r < 4; ++r) parts[r].set_grad(grads.select(0, r) * (step + 1.0));
    strided.set_grad((grads * (step + 1.0)).mT());
    big_opt.step();
    parts_opt.step();
    strided_opt.step();
  }
  CHECK(ops::stack(parts, 0).to_vector<float>() == big.to_vector<float>());
  CHECK(strided.mT().contiguous().to_vector<float>() == big.to_vector<float>());
  CHECK(big.to_vector<float>() != values.to_vector<float>());
}

TEST_CASE("adam: Backend::adam_step_multi equals adam_step on each tensor (the CPU's default)") {
  Generator gen(8);
  const std::vector<int64_t> sizes = {1, 7, 0, 5000, 40001};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (bool decoupled : {true, false}) {
      INFO(dtype_key(dtype) << (decoupled ? " AdamW" : " Adam"));
      std::vector<Tensor> pa, pb, ma, mb, va, vb, grads;
      for (int64_t n : sizes) {
        Tensor p = ops::randn({n}, gen, dtype);
        pa.push_back(p.clone());
        pb.push_back(p.clone());
        for (auto* v : {&ma, &mb, &va, &vb}) v->push_back(ops::zeros({n}, dtype));
        grads.push_back(ops::randn({n}, gen, dtype));
      }
      Backend& be = pa.front().backend();
      for (int64_t step = 1; step <= 3; ++step) {
        const AdamStep o{1e-2, 0.9, 0.999, 1e-8, 0.05, step, decoupled};
        std::vector<AdamTensors> multi;
        for (size_t i = 0; i < sizes.size(); ++i) {
          be.adam_step(pa[i].strided(), grads[i].strided(), ma[i].strided(), va[i].strided(), o);
          multi.push_back({pb[i].strided(), grads[i].strided(), mb[i].strided(), vb[i].strided()});
        }
        be.adam_step_multi(multi, o);
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        CHECK(pa[i].to_vector<double>() == pb[i].to_vector<double>());
        CHECK(ma[i].to_vector<double>() == mb[i].to_vector<double>());
        CHECK(va[i].to_vector<double>() == vb[i].to_vector<double>());
      }
      CHECK(pa[4].to_vector<double>() != ops::zeros({40001}, dtype).to_vector<double>());
    }
  }
}

// ---- state ---------------------------------------------------------------------------------

TEST_CASE("adamw: a fresh optimizer loaded from state continues the identical trajectory") {
  check_state_round_trip("adamw");
}

TEST_CASE("adam: a fresh optimizer loaded from state continues the identical trajectory") {
  check_state_round_trip("adam_wd");
}

TEST_CASE("sgd: a fresh optimizer loaded from state continues the identical trajectory") {
  check_state_round_trip("sgd_momentum");
}

TEST_CASE("adamw: state is created on a parameter's first gradient, others are left alone") {
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  AdamW opt({a, b}, {.lr = 0.1});
  CHECK(opt.state_tensors().empty());
  a.set_grad(ops::tensor({0.5, -0.5}, kFloat64));
  const uint64_t va = a.version(), vb = b.version();
  opt.step();
  CHECK(opt.step_count(0, 0) == 1);
  CHECK(opt.step_count(0, 1) == 0);
  CHECK(a.version() > va);
  CHECK(b.version() == vb);
  check_close(b, {3, 4}, 0, 0);
  // First step: m = 0.1 g, v = 0.001 g^2, so the update is lr * sign(g) (eps aside), after the
  // decay p *= 1 - lr wd.
  check_close(a, {1 * (1 - 0.1 * 0.01) - 0.1, 2 * (1 - 0.1 * 0.01) + 0.1}, 1e-8, 0);
  auto st = opt.state_tensors();
  REQUIRE(st.size() == 2);
  CHECK(st[0].first == "0.0.exp_avg");
  CHECK(st[1].first == "0.0.exp_avg_sq");
  check_close(st[0].second, {0.05, -0.05}, 1e-15, 0);
  const json j = opt.state_json();
  CHECK(j.at("type") == "AdamW");
  CHECK(j.at("groups")[0].at("steps") == json({1, 0}));
  CHECK(j.at("groups")[0].at("weight_decay") == 0.01);
}

TEST_CASE("adam: defaults are PyTorch's (AdamW weight decay 0.01)") {
  Tensor a = leaf({1});
  Adam adam({a});
  AdamW adamw({a});
  CHECK(adam.type_name() == "Adam");
  CHECK(adamw.type_name() == "AdamW");
  CHECK(adam.param_groups()[0].lr == 1e-3);
  CHECK(adam.param_groups()[0].weight_decay == 0);
  CHECK(adamw.param_groups()[0].weight_decay == 0.01);
  CHECK(adamw.beta1() == 0.9);
  CHECK(adamw.beta2() == 0.999);
  CHECK(adamw.eps() == 1e-8);
  CHECK(adamw.param_groups()[0].initial_lr == 1e-3);
}

TEST_CASE("sgd: plain step is p -= lr (g + wd p), zero_grad clears or zeroes") {
  Tensor a = leaf({1, -2}, kFloat32);
  SGD opt({a}, {.lr = 0.5, .weight_decay = 0.25});
  a.set_grad(ops::tensor({1, 1}, kFloat32));
  opt.step();
  check_close(a, {1 - 0.5 * (1 + 0.25), -2 - 0.5 * (1 - 0.5)}, 0, 0);
  CHECK(opt.state_tensors().empty());  // no momentum, no buffer
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  check_close(a.grad(), {0, 0}, 0, 0);
  opt.zero_grad();
  CHECK(!a.grad().defined());
  opt.step();  // no gradient: nothing changes
  check_close(a, {1 - 0.5 * (1 + 0.25), -2 - 0.5 * (1 - 0.5)}, 0, 0);
}

TEST_CASE("adamw: param_groups_with_decay splits by dims and names, skips frozen parameters") {
  Model m;
  auto groups = param_groups_with_decay(m, 0.1, 0.05);
  REQUIRE(groups.size() == 2);
  auto names = [&](const ParamGroup& g) {
    std::vector<std::string> out;
    for (const Tensor& t : g.params)
      for (const auto& [n, p] : m.named_parameters())
        if (p.same(t)) out.push_back(n);
    return out;
  };
  CHECK(groups[0].name == "decay");
  CHECK(groups[0].weight_decay == 0.05);
  CHECK(names(groups[0]) == std::vector<std::string>{"head", "block.weight"});
  CHECK(groups[1].name == "no_decay");
  CHECK(groups[1].weight_decay == 0);
  CHECK(names(groups[1]) ==
        std::vector<std::string>{"block.bias", "block.pos_embed", "block.scale"});
  CHECK(groups[0].lr == 0.1);
  CHECK(groups[1].lr == 0.1);
  auto custom = param_groups_with_decay(m, 0.1, 0.05, {"head"});
  CHECK(names(custom[0]) == std::vector<std::string>{"block.weight", "block.pos_embed"});
}

// ---- schedules -----------------------------------------------------------------------------

TEST_CASE("schedule: warm-up cosine factors") {
  WarmupCosineSchedule s(10, 110, 0.1);
  CHECK(s.factor(0) == 0);
  CHECK(s.factor(5) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(s.factor(10) == 1);
  CHECK(s.factor(60) == doctest::Approx(0.1 + 0.9 * 0.5).epsilon(1e-15));  // half way
  CHECK(s.factor(35) ==
        doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4))).epsilon(1e-15));
  CHECK(s.factor(110) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(s.factor(500) == doctest::Approx(0.1).epsilon(1e-15));
  WarmupCosineSchedule no_warmup(0, 4);
  CHECK(no_warmup.factor(0) == 1);
  CHECK(no_warmup.factor(2) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(no_warmup.factor(4) == doctest::Approx(0).epsilon(1e-15));
  // Against Hugging Face's get_cosine_schedule_with_warmup run through PyTorch's LambdaLR.
  const json& hf = fx().at("schedules").at("warmup_cosine_hf");
  WarmupCosineSchedule h(hf.at("warmup_steps"), hf.at("total_steps"), hf.at("min_factor"));
  const auto f = hf.at("factors").get<std::vector<double>>();
  for (size_t i = 0; i < f.size(); ++i) CHECK(h.factor(i) == doctest::Approx(f[i]).epsilon(1e-14));
}

TEST_CASE("schedule: step factors match PyTorch's StepLR, constant is 1") {
  const json& st = fx().at("schedules").at("step");
  StepSchedule s(st.at("step_size"), st.at("gamma"));
  const auto f = st.at("factors").get<std::vector<double>>();
  for (size_t i = 0; i < f.size(); ++i) CHECK(s.factor(i) == f[i]);
  CHECK(ConstantSchedule().factor(1000) == 1);
}

TEST_CASE("schedule: apply sets every group's lr to initial_lr * factor, state round trip") {
  ParamGroup g0, g1;
  g0.params = {leaf({1})};
  g0.lr = 0.1;
  g1.params = {leaf({2})};
  g1.lr = 0.01;
  g1.initial_lr = 0.02;  // kept when given
  SGD opt(std::vector<ParamGroup>{g0, g1});
  WarmupCosineSchedule s(4, 20, 0.05);
  s.apply(opt, 2);
  CHECK(opt.param_groups()[0].lr == 0.1 * 0.5);
  CHECK(opt.param_groups()[1].lr == 0.02 * 0.5);
  s.apply(opt, 4);
  CHECK(opt.param_groups()[0].lr == 0.1);
  CHECK(opt.param_groups()[0].initial_lr == 0.1);
  StepSchedule step(7, 0.3);
  ConstantSchedule constant;
  for (const Schedule* sc : {static_cast<const Schedule*>(&s), static_cast<const Schedule*>(&step),
                             static_cast<const Schedule*>(&constant)}) {
    auto back = schedule_from_json(json::parse(sc->state_json().dump()));
    CHECK(back->type_name() == sc->type_name());
    CHECK(back->state_json() == sc->state_json());
    for (int64_t k : {0, 3, 9, 25}) CHECK(back->factor(k) == sc->factor(k));
  }
}

TEST_CASE("schedule: MultiStepLR, ExponentialLR, OneCycleLR and LambdaLR against PyTorch's") {
  const json& sc = fx().at("schedules");
  const auto check_factors = [](const Schedule& s, const json& expected) {
    INFO(s.type_name());
    const auto f = expected.at("factors").get<std::vector<double>>();
    for (size_t i = 0; i < f.size(); ++i) {
      INFO("step " << i);
      CHECK(s.factor(static_cast<int64_t>(i)) == doctest::Approx(f[i]).epsilon(1e-13));
    }
    // The state JSON rebuilds the same schedule.
    auto back = schedule_from_json(json::parse(s.state_json().dump()));
    CHECK(back->state_json() == s.state_json());
    for (size_t i = 0; i < f.size(); ++i)
      CHECK(back->factor(static_cast<int64_t>(i)) == s.factor(static_cast<int64_t>(i)));
  };
  const json& ms = sc.at("multistep");
  check_factors(MultiStepSchedule(ms.at("milestones"), ms.at("gamma")), ms);
  check_factors(ExponentialSchedule(sc.at("exponential").at("gamma")), sc.at("exponential"));
  for (const char* name : {"onecycle_cos", "onecycle_linear_three"}) {
    const json& c = sc.at(name);
    check_factors(
        OneCycleSchedule(c.at("total_steps"), c.at("pct_start"), c.at("anneal_strategy"),
                         c.at("div_factor"), c.at("final_div_factor"), c.at("three_phase")),
        c);
  }
  const OneCycleSchedule one(20);
  CHECK_ERROR_CONTAINS(one.factor(20), "onecycle schedule: step 20 is past the last",
                       "steps 0 to 19");
  // LambdaLR: any function of the step; its JSON cannot bring the function back.
  LambdaSchedule lambda([](int64_t s) { return 1.0 / static_cast<double>(s + 1); });
  CHECK(lambda.factor(3) == 0.25);
  CHECK_ERROR_CONTAINS(schedule_from_json(lambda.state_json()),
                       "a lambda schedule's function cannot be read back");
}

TEST_CASE("schedule: ReduceLROnPlateau follows PyTorch's on a metric (min/rel, max/abs)") {
  for (const char* name : {"plateau_min", "plateau_max"}) {
    INFO(name);
    const json& c = fx().at("schedules").at(name);
    const json& o = c.at("options");
    ReduceLROnPlateau::Options options{.mode = o.at("mode"),
                                       .factor = o.at("factor"),
                                       .patience = o.at("patience"),
                                       .threshold = o.at("threshold"),
                                       .threshold_mode = o.at("threshold_mode"),
                                       .cooldown = o.at("cooldown"),
                                       .min_lr = o.at("min_lr")};
    ReduceLROnPlateau plateau(options);
    SGD opt({leaf({1.0})}, SGDOptions{.lr = 1.0});
    const auto metrics = c.at("metrics").get<std::vector<double>>();
    const auto lrs = c.at("lrs").get<std::vector<double>>();
    for (size_t i = 0; i < metrics.size(); ++i) {
      INFO("step " << i);
      plateau.step(opt, metrics[i]);
      CHECK(opt.param_groups()[0].lr == doctest::Approx(lrs[i]).epsilon(1e-13));
      if (i == 6) {  // a copy restored from the state JSON continues the same way
        ReduceLROnPlateau restored(options);
        restored.load_state(json::parse(plateau.state_json().dump()));
        CHECK(restored.state_json() == plateau.state_json());
      }
    }
  }
  CHECK_ERROR_CONTAINS(ReduceLROnPlateau({.mode = "lowest"}), "mode must be min or max");
  CHECK_ERROR_CONTAINS(ReduceLROnPlateau({.factor = 1.0}), "factor must be in [0, 1)");
}

TEST_CASE("schedule: errors") {
  CHECK_ERROR_CONTAINS(WarmupCosineSchedule(10, 5), "warmup_cosine schedule", "warmup_steps 10",
                       "total_steps 5");
  CHECK_ERROR_CONTAINS(WarmupCosineSchedule(1, 5, 1.5), "min_factor", "1.5");
  CHECK_ERROR_CONTAINS(StepSchedule(0), "step_size must be > 0");
  CHECK_ERROR_CONTAINS(WarmupCosineSchedule(1, 5).factor(-1), "step must be >= 0", "-1");
  CHECK_ERROR_CONTAINS(schedule_from_json({{"type", "linear"}}), "unknown schedule type", "linear");
  CHECK_ERROR_CONTAINS(schedule_from_json({{"type", "step"}}), "schedule_from_json",
                       "malformed schedule JSON");
}

// ---- clipping ------------------------------------------------------------------------------

TEST_CASE("clip_grad_norm: total norm and clipped gradients match PyTorch") {
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(dtype_key(dtype));
    const json& ref = fx().at("clip").at(dtype_key(dtype));
    const Tolerance tol = tolerance(dtype);
    Net net(dtype);
    auto params = net.parameters();
    net.loss().backward();
    Errors err;
    for (size_t k = 0; k < params.size(); ++k)  // our autograd's gradients against PyTorch's
      check_values(params[k].grad().to_vector<double>(),
                   ref.at("grads")[k].at("data").get<std::vector<double>>(), tol, err);
    const std::vector<Tensor> grads0 = [&] {
      std::vector<Tensor> g;
      for (const Tensor& p : params) g.push_back(p.grad().clone());
      return g;
    }();
    for (const json& c : ref.at("cases")) {
      for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(grads0[k].clone());
      const double norm = clip_grad_norm_(params, c.at("max_norm"));
      check_values({norm}, {c.at("total_norm").get<double>()}, tol, err);
      for (size_t k = 0; k < params.size(); ++k)
        check_values(params[k].grad().to_vector<double>(),
                     c.at("grads")[k].at("data").get<std::vector<double>>(), tol, err);
    }
    err.report(std::string("clip_grad_norm_ ") + dtype_key(dtype));
  }
}

TEST_CASE("clip_grad_norm: parameters without gradients are skipped, no gradients give 0") {
  Tensor a = leaf({3, 4}), b = leaf({1});
  CHECK(clip_grad_norm_({a, b}, 1.0) == 0);
  a.set_grad(ops::tensor({3, 4}, kFloat64));
  CHECK(clip_grad_norm_({a, b}, 10.0) == 5);
  check_close(a.grad(), {3, 4}, 0, 0);  // not clipped
  CHECK(clip_grad_norm_({a, b}, 1.0) == 5);
  check_close(a.grad(), {3 / (5 + 1e-6), 4 / (5 + 1e-6)}, 1e-15, 0);
  CHECK(!b.grad().defined());
  CHECK_ERROR_CONTAINS(clip_grad_norm_({a}, -1), "clip_grad_norm_", "max_norm", "-1");
}

// ---- errors --------------------------------------------------------------------------------

TEST_CASE("adamw: constructor errors name the optimizer, group and parameter") {
  Tensor a = leaf({1, 2}), b = leaf({3});
  ParamGroup g0, g1;
  g0.params = {a};
  g0.name = "decay";
  g1.params = {b, a};
  g1.name = "no_decay";
  CHECK_ERROR_CONTAINS(AdamW(std::vector<ParamGroup>{g0, g1}), "AdamW", "appears more than once",
                       "param group 0 (\"decay\"), parameter 0",
                       "param group 1 (\"no_decay\"), parameter 1");
  CHECK_ERROR_CONTAINS(AdamW({a}, {.lr = -0.1}), "AdamW", "param group 0", "lr must be >= 0",
                       "-0.1");
  CHECK_ERROR_CONTAINS(Adam({a}, {.weight_decay = -1}), "Adam: param group 0",
                       "weight_decay must be >= 0");
  CHECK_ERROR_CONTAINS(AdamW({a}, {.beta1 = 1.0}), "AdamW", "beta1 must be in [0, 1)");
  CHECK_ERROR_CONTAINS(Adam({a}, {.beta2 = -0.5}), "Adam", "beta2 must be in [0, 1)");
  CHECK_ERROR_CONTAINS(Adam({a}, {.eps = -1e-8}), "Adam", "eps must be >= 0");
  CHECK_ERROR_CONTAINS(AdamW(std::vector<Tensor>{}), "AdamW", "no parameters");
  CHECK_ERROR_CONTAINS(SGD({ops::tensor({1, 2}, kInt64)}), "SGD", "parameter 0", "int64",
                       "only float32 and float64");
  Tensor nonleaf = a * 2;
  CHECK_ERROR_CONTAINS(SGD({nonleaf}), "SGD", "not a leaf");
  CHECK_ERROR_CONTAINS(SGD({Tensor()}), "SGD", "undefined");
  CHECK_ERROR_CONTAINS(SGD({a}, {.dampening = 0.1, .nesterov = true}), "SGD", "Nesterov",
                       "dampening");
  CHECK_ERROR_CONTAINS(SGD({a}, {.momentum = 0, .nesterov = true}), "SGD", "Nesterov",
                       "momentum > 0");
  CHECK_ERROR_CONTAINS(SGD({a}, {.momentum = -0.9}), "SGD", "momentum must be >= 0");
}

TEST_CASE("adamw: step refuses a gradient of another dtype") {
  Tensor a = leaf({1, 2});
  AdamW opt({a});
  a.set_grad(ops::tensor({1, 1}, kFloat32));
  CHECK_ERROR_CONTAINS(opt.step(), "AdamW", "param group 0, parameter 0", "float32", "float64");
}

TEST_CASE("adamw: load_state errors name the mismatching key, shape or group") {
  Tensor a = leaf({1, 2}), b = leaf({3});
  AdamW opt({a, b});
  a.set_grad(ops::tensor({1, 1}, kFloat64));
  b.set_grad(ops::tensor({1}, kFloat64));
  opt.step();
  const NamedTensors tensors = opt.state_tensors();
  const json j = opt.state_json();

  Tensor c = leaf({1, 2}), d = leaf({3});
  AdamW fresh({c, d});
  NamedTensors missing(tensors.begin() + 1, tensors.end());
  CHECK_ERROR_CONTAINS(fresh.load_state(missing, j), "AdamW: load_state", "0.0.exp_avg", "missing");
  NamedTensors wrong_shape = tensors;
  wrong_shape[2].second = ops::zeros({2}, kFloat64);  // 0.1.exp_avg
  CHECK_ERROR_CONTAINS(fresh.load_state(wrong_shape, j), "0.1.exp_avg", "shape [2]",
                       "expected [1]");
  NamedTensors extra = tensors;
  extra.emplace_back("0.7.exp_avg", ops::zeros({1}, kFloat64));
  CHECK_ERROR_CONTAINS(fresh.load_state(extra, j), "unexpected state tensor 0.7.exp_avg");
  CHECK_ERROR_CONTAINS(Adam({c, d}).load_state(tensors, j), "saved by AdamW, not Adam");
  CHECK_ERROR_CONTAINS(SGD({c, d}).load_state(tensors, j), "SGD", "saved by AdamW");
  CHECK_ERROR_CONTAINS(AdamW({c}).load_state(tensors, j), "param group 0", "2 parameters",
                       "1 in this optimizer");
  json bad = j;
  bad["groups"].push_back(bad["groups"][0]);
  CHECK_ERROR_CONTAINS(fresh.load_state(tensors, bad), "2 param groups", "this optimizer 1");
  json malformed = j;
  malformed.erase("beta1");
  CHECK_ERROR_CONTAINS(fresh.load_state(tensors, malformed), "malformed state JSON");
  // A failed load changes nothing; a good one restores everything.
  CHECK(fresh.state_tensors().empty());
  fresh.load_state(tensors, j);
  CHECK(fresh.state_json() == j);
}
