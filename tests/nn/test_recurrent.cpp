// Recurrent layers against PyTorch (tests/fixtures/rnn.json, made by make_rnn_fixtures.py):
// RNN (tanh, relu), LSTM and GRU with 2 layers, bidirectional, batch_first, no bias, unbatched,
// given and zero initial states, and the cells run over several steps with the state fed back.
// Outputs, final states and every gradient (input, initial state, each parameter) in float64 at
// 1e-10 and float32 at 1e-5, through the fused path and the composed one; float64 gradchecks of
// the sequence op in every mode and direction; bad input with its messages.
#include <memory>
#include <nlohmann/json.hpp>

#include "nn/recurrent.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace nn = vitrine::nn;

namespace {

const json& rnn_case(const std::string& name) { return fixture_case("rnn.json", name); }

std::shared_ptr<nn::Module> make_module(const json& c) {
  const json& a = c.at("args");
  const std::string kind = c.at("kind");
  const int64_t in = a.at("input_size"), hid = a.at("hidden_size");
  nn::RnnOptions o(in, hid);
  o.num_layers(a.value("num_layers", 1))
      .bias(a.value("bias", true))
      .batch_first(a.value("batch_first", false))
      .bidirectional(a.value("bidirectional", false))
      .nonlinearity(a.value("nonlinearity", std::string("tanh")));
  if (kind == "RNN") return std::make_shared<nn::RNN>(o);
  if (kind == "LSTM") return std::make_shared<nn::LSTM>(o);
  if (kind == "GRU") return std::make_shared<nn::GRU>(o);
  const bool bias = a.value("bias", true);
  if (kind == "RNNCell")
    return std::make_shared<nn::RNNCell>(in, hid, bias, a.value("nonlinearity", "tanh"));
  if (kind == "LSTMCell") return std::make_shared<nn::LSTMCell>(in, hid, bias);
  REQUIRE(kind == "GRUCell");
  return std::make_shared<nn::GRUCell>(in, hid, bias);
}

struct Result {
  Tensor output, h_n, c_n;
};

/// Runs a case's module on its input (a cell: steps steps with the state fed back).
Result run(nn::Module& m, const json& c, const Tensor& x, const Tensor& h0, const Tensor& c0) {
  const std::string kind = c.at("kind");
  if (auto* layer = dynamic_cast<nn::RNNBase*>(&m)) {
    nn::RnnOutput out = layer->forward(x, {h0, c0});
    return {out.output, out.state.h, out.state.c};
  }
  const int64_t steps = c.at("steps");
  nn::RnnState st{h0, c0};
  std::vector<Tensor> hs;
  for (int64_t t = 0; t < steps; ++t) {
    const Tensor xt = x.select(0, t);
    if (auto* lstm = dynamic_cast<nn::LSTMCell*>(&m))
      st = lstm->forward(xt, st);
    else if (auto* rnn = dynamic_cast<nn::RNNCell*>(&m))
      st.h = rnn->forward(xt, st.h);
    else
      st.h = dynamic_cast<nn::GRUCell&>(m).forward(xt, st.h);
    hs.push_back(st.h);
  }
  return {ops::stack(hs, 0), st.h, st.c};
}

/// The case in dtype: every output and gradient against PyTorch's.
void check_case(const std::string& name, DType dtype, bool fused) {
  CAPTURE(name);
  CAPTURE(fused);
  const json& c = rnn_case(name);
  ops::set_fused_rnn(fused);
  auto m = make_module(c);
  // The parameter names and their order are PyTorch's.
  std::vector<std::string> names;
  for (const auto& [n, p] : m->named_parameters()) names.push_back(n);
  std::vector<std::string> want;
  for (const auto& [n, v] : c.at("params").items()) want.push_back(n);
  std::sort(want.begin(), want.end());
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == want);
  m->to(dtype);
  for (auto& [n, p] : m->named_parameters()) {
    NoGradGuard ng;
    p.copy_(fixture_tensor(c.at("params").at(n), dtype));
  }
  const double tol = dtype == kFloat64 ? 1e-10 : 1e-5;
  auto leaf = [&](const char* key) {
    if (!c.contains(key)) return Tensor();
    Tensor t = fixture_tensor(c.at(key), dtype);
    t.requires_grad_();
    return t;
  };
  Tensor x = leaf("input"), h0 = leaf("h0"), c0 = leaf("c0");
  Result r = run(*m, c, x, h0, c0);
  check_close(r.output, fixture_tensor(c.at("output"), dtype), tol, tol);
  check_close(r.h_n, fixture_tensor(c.at("h_n"), dtype), tol, tol);
  Tensor loss = ops::sum(r.output * fixture_tensor(c.at("r"), dtype)) +
                ops::sum(r.h_n * fixture_tensor(c.at("r_h"), dtype));
  REQUIRE(r.c_n.defined() == c.contains("c_n"));
  if (r.c_n.defined()) {
    check_close(r.c_n, fixture_tensor(c.at("c_n"), dtype), tol, tol);
    loss = loss + ops::sum(r.c_n * fixture_tensor(c.at("r_c"), dtype));
  }
  loss.backward();
  check_close(x.grad(), fixture_tensor(c.at("input_grad"), dtype), tol, tol);
  if (h0.defined()) check_close(h0.grad(), fixture_tensor(c.at("h0_grad"), dtype), tol, tol);
  if (c0.defined()) check_close(c0.grad(), fixture_tensor(c.at("c0_grad"), dtype), tol, tol);
  for (auto& item : m->named_parameters()) {
    auto& n = item.first;
    auto& p = item.second;
    INFO("gradient of " << n);
    check_close(p.grad(), fixture_tensor(c.at("param_grads").at(n), dtype), tol, tol);
  }
  ops::set_fused_rnn(true);
}

const std::vector<std::string> kCases = {"rnn_tanh_2layer_bidirectional",
                                         "rnn_relu_batch_first",
                                         "lstm_2layer_bidirectional",
                                         "lstm_batch_first_no_bias",
                                         "lstm_unbatched",
                                         "lstm_2layer_batch_first_bidirectional",
                                         "gru_2layer_bidirectional_batch_first",
                                         "gru_single",
                                         "rnncell_tanh",
                                         "rnncell_relu_unbatched",
                                         "lstmcell",
                                         "lstmcell_no_bias_zero_state",
                                         "grucell",
                                         "grucell_unbatched"};

}  // namespace

TEST_CASE("recurrent: RNN, LSTM, GRU and their cells match PyTorch in float64 (fused path)") {
  for (const auto& name : kCases) check_case(name, kFloat64, true);
}

TEST_CASE("recurrent: RNN, LSTM, GRU and their cells match PyTorch in float64 (composed path)") {
  for (const auto& name : kCases) check_case(name, kFloat64, false);
}

TEST_CASE("recurrent: RNN, LSTM, GRU and their cells match PyTorch in float32") {
  for (const auto& name : kCases) {
    check_case(name, kFloat32, true);
    check_case(name, kFloat32, false);
  }
}

TEST_CASE("recurrent: rnn_sequence gradcheck in float64, every cell, both directions") {
  for (auto mode : {ops::RnnMode::Tanh, ops::RnnMode::Relu, ops::RnnMode::Lstm, ops::RnnMode::Gru})
    for (bool reverse : {false, true}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(reverse);
      const int64_t T = 3, B = 2, H = 3, G = ops::rnn_gates(mode);
      const bool lstm = mode == ops::RnnMode::Lstm;
      std::vector<Tensor> in = {rand64({T, B, G * H}, 1), rand64({G * H, H}, 2, 0.5),
                                rand64({G * H}, 3), rand64({B, H}, 4)};
      if (lstm) in.push_back(rand64({B, H}, 5));
      check_grad(
          [&](const std::vector<Tensor>& v) {
            ops::RnnSequence r =
                ops::rnn_sequence(mode, v[0], v[1], v[2], v[3], lstm ? v[4] : Tensor(), reverse);
            // every output: the sequence, h_n (and c_n), weighted so that no gradient cancels
            Tensor y =
                ops::sum(r.output * ops::arange(1, 1 + T * B * H, 1, kFloat64).reshape({T, B, H})) +
                ops::sum(r.h_n * r.h_n);
            if (lstm)
              y = y + ops::sum(r.c_n * ops::arange(1, 1 + B * H, 1, kFloat64).reshape({B, H}));
            return y;
          },
          in);
    }
}

TEST_CASE("recurrent: the fused path and the composed one agree on a larger LSTM and GRU") {
  for (auto mode : {ops::RnnMode::Lstm, ops::RnnMode::Gru, ops::RnnMode::Tanh}) {
    CAPTURE(static_cast<int>(mode));
    const int64_t T = 9, B = 5, H = 33, G = ops::rnn_gates(mode);
    std::vector<Tensor> grads[2];
    Tensor outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      ops::set_fused_rnn(fused == 1);
      Generator g(7);
      Tensor xp = ops::randn({T, B, G * H}, g), w = ops::randn({G * H, H}, g) * 0.2,
             b = ops::randn({G * H}, g), h0 = ops::randn({B, H}, g), c0 = ops::randn({B, H}, g);
      for (Tensor* t : {&xp, &w, &b, &h0, &c0}) t->requires_grad_();
      ops::RnnSequence r =
          ops::rnn_sequence(mode, xp, w, b, h0, mode == ops::RnnMode::Lstm ? c0 : Tensor(), true);
      Tensor loss = ops::sum(r.output * r.output) + ops::sum(r.h_n);
      if (r.c_n.defined()) loss = loss + ops::sum(r.c_n);
      loss.backward();
      outs[fused] = r.output;
      for (Tensor* t : {&xp, &w, &b, &h0}) grads[fused].push_back(t->grad());
    }
    ops::set_fused_rnn(true);
    check_close(outs[1], outs[0], 1e-5, 1e-5);
    for (size_t i = 0; i < grads[0].size(); ++i) check_close(grads[1][i], grads[0][i], 1e-4, 1e-4);
  }
}

TEST_CASE("recurrent: dropout between layers only in training, and the repr names the options") {
  nn::LSTM lstm(nn::RnnOptions(3, 4).num_layers(2).dropout(0.5));
  Tensor x = ops::randn({5, 2, 3});
  Tensor a = lstm.forward(x), b = lstm.forward(x);
  CHECK(ops::max(ops::abs(a - b)).item() > 0);  // different dropout masks
  lstm.eval();
  check_close(lstm.forward(x), lstm.forward(x), 1e-6, 1e-6);  // eval: no dropout (OpenBLAS's
  // products, so a tolerance rather than bits)
  CHECK(lstm.extra_repr() == "3, 4, num_layers=2, dropout=0.5");
  nn::GRU gru(4, 6, 1, true, true, 0, true);
  CHECK(gru.extra_repr() == "4, 6, batch_first=True, bidirectional=True");
  CHECK(gru.forward(ops::randn({2, 3, 4})).shape() == Dims({2, 3, 12}));
}

TEST_CASE(
    "recurrent: bad input is an error naming the layer, what was given and what was expected") {
  nn::LSTM lstm(3, 4, 2);
  CHECK_THROWS_WITH(lstm.forward(ops::randn({5, 2, 7})),
                    doctest::Contains("LSTM: input has 7 features, expected input_size 3"));
  CHECK_THROWS_WITH(lstm.forward(ops::randn({5})), doctest::Contains("LSTM: expected input"));
  CHECK_THROWS_WITH(
      lstm.forward(ops::randn({5, 2, 3}), {ops::zeros({1, 2, 4}), Tensor()}),
      doctest::Contains("LSTM: expected hidden state h of shape [2, 2, 4], got [1, 2, 4]"));
  nn::GRU gru(3, 4);
  CHECK_THROWS_WITH(gru.forward(ops::randn({5, 2, 3}), {Tensor(), ops::zeros({1, 2, 4})}),
                    doctest::Contains("only an LSTM has one"));
  CHECK_THROWS_WITH(
      nn::RNN(3, 4, 1, "sigmoid"),
      doctest::Contains("RNN: unknown nonlinearity 'sigmoid' (expected 'tanh' or 'relu')"));
  CHECK_THROWS_WITH(nn::LSTM(3, 4, 0), doctest::Contains("num_layers must be at least 1"));
  nn::LSTMCell cell(3, 4);
  CHECK_THROWS_WITH(
      cell.forward(ops::randn({2, 5}), {}),
      doctest::Contains("LSTMCell: expected input of shape [B, 3] or [3], got [2, 5]"));
  CHECK_THROWS_WITH(ops::rnn_sequence(ops::RnnMode::Lstm, ops::randn({2, 1, 8}), ops::randn({8, 2}),
                                      Tensor(), ops::zeros({1, 2})),
                    doctest::Contains("rnn_sequence: argument 'c0' is an undefined tensor"));
}

TEST_CASE("recurrent: CUDA runs the layers (the composed cell) as the CPU does, float64") {
  if (!gpu_or_skip()) return;
  const Device cuda = Device::parse("cuda");
  for (const std::string name :
       {"lstm_2layer_bidirectional", "gru_2layer_bidirectional_batch_first", "lstmcell"}) {
    CAPTURE(name);
    const json& c = rnn_case(name);
    Result r[2];
    std::vector<Tensor> grads[2];
    for (int d = 0; d < 2; ++d) {
      auto m = make_module(c);
      m->to(kFloat64);
      for (auto& [n, p] : m->named_parameters()) {
        NoGradGuard ng;
        p.copy_(fixture_tensor(c.at("params").at(n)));
      }
      if (d == 1) m->to(cuda);
      auto leaf = [&](const char* key) {
        if (!c.contains(key)) return Tensor();
        Tensor t = fixture_tensor(c.at(key));
        if (d == 1) t = t.to(cuda);
        t.requires_grad_();
        return t;
      };
      Tensor x = leaf("input"), h0 = leaf("h0"), c0 = leaf("c0");
      r[d] = run(*m, c, x, h0, c0);
      Tensor loss = ops::sum(r[d].output * r[d].output) + ops::sum(r[d].h_n);
      loss.backward();
      grads[d].push_back(x.grad().to(kCPU));
      for (auto& [n, p] : m->named_parameters()) grads[d].push_back(p.grad().to(kCPU));
    }
    check_close(r[1].output.to(kCPU), r[0].output, 1e-9, 1e-9);
    check_close(r[1].h_n.to(kCPU), r[0].h_n, 1e-9, 1e-9);
    for (size_t i = 0; i < grads[0].size(); ++i) check_close(grads[1][i], grads[0][i], 1e-9, 1e-9);
  }
}
