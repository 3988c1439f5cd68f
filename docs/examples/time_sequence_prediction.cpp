// pytorch/examples' time_sequence_prediction in Vitrine: two stacked LSTM cells (1 -> 51 -> 51)
// and a linear layer, in float64, learn sine waves by L-BFGS (lr 0.8) on the whole training set
// at once, through a closure that the optimizer calls as often as it needs; after each step the
// model extends three held-out waves by `future` values of its own. The waves are
// generate_sine_wave.py's (numpy's RandomState(2) is MT19937 seeded with 2, and randint draws its
// offsets from it by masking and rejection, which std::mt19937 reproduces), generated here rather
// than read from traindata.pt. Its PyTorch twin: time_sequence_prediction.py, beside it. The test
// suite runs a short version (ctest -R examples/time_sequence_prediction).
//   example_time_sequence_prediction [--steps 15] [--length 999] [--future 1000] [--check]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "nn/optim/lbfgs.h"
#include "nn/recurrent.h"
#include "ops/sequence.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

// generate_sine_wave.py: N waves of L points, wave n at x = l + offset_n (offset_n uniform in
// [-4T, 4T)), y = sin(x / T). Returns [N, L] float64.
Tensor generate_sine_wave(int64_t N = 100, int64_t L = 1000, int64_t T = 20) {
  std::mt19937 mt(2);  // np.random.seed(2)
  std::vector<double> data(N * L);
  for (int64_t n = 0; n < N; ++n) {
    // np.random.randint(-4T, 4T): numpy's legacy bounded draw, (32 bits & mask) until <= range
    const uint32_t range = 8 * T - 1, mask = 255;
    uint32_t v;
    while ((v = mt() & mask) > range) {
    }
    const int64_t offset = int64_t(v) - 4 * T;
    for (int64_t l = 0; l < L; ++l) data[n * L + l] = std::sin(double(l + offset) / 1.0 / T);
  }
  return ops::from_vector(data, {N, L}, vt::kFloat64);
}

// input [B, T] -> outputs [B, T + future]: output t predicts input[:, t + 1]; the future values
// feed each prediction back in as the next input.
class Sequence : public nn::Module {
 public:
  explicit Sequence(vt::Generator& gen) {
    lstm1 = register_module("lstm1", std::make_shared<nn::LSTMCell>(1, 51, true, gen));
    lstm2 = register_module("lstm2", std::make_shared<nn::LSTMCell>(51, 51, true, gen));
    linear = register_module("linear", std::make_shared<nn::Linear>(51, 1, true, gen));
  }
  Tensor forward(const Tensor& input, int64_t future) {
    std::vector<Tensor> outputs;
    const int64_t B = input.size(0);
    nn::RnnState s1{ops::zeros({B, 51}, vt::kFloat64), ops::zeros({B, 51}, vt::kFloat64)};
    nn::RnnState s2 = s1;
    Tensor output;
    auto step = [&](const Tensor& input_t) {  // input_t [B, 1]
      s1 = lstm1->forward(input_t, s1);
      s2 = lstm2->forward(s1.h, s2);
      output = (*linear)(s2.h);  // [B, 1]
      outputs.push_back(output);
    };
    for (const Tensor& input_t : ops::split(input, 1, 1)) step(input_t);
    for (int64_t i = 0; i < future; ++i) step(output);  // predict the future
    return ops::cat(outputs, 1);
  }
  Tensor forward(const Tensor& input) override { return forward(input, 0); }
  std::string type_name() const override { return "Sequence"; }

  std::shared_ptr<nn::LSTMCell> lstm1, lstm2;
  std::shared_ptr<nn::Linear> linear;
};

int main(int argc, char** argv) {
  int64_t steps = 15, length = 999, future = 1000;
  bool check = false;
  std::string out_prefix;
  CLI::App app{"pytorch/examples' time_sequence_prediction: LSTM cells learn sine waves."};
  app.add_option("--steps", steps, "steps to run (each up to 20 L-BFGS iterations)")
      ->capture_default_str();
  app.add_option("--length", length, "time steps trained on, at most 999")->capture_default_str();
  app.add_option("--future", future, "values predicted past the test input")->capture_default_str();
  app.add_option("--out", out_prefix,
                 "write PREFIX<step>.csv: the 3 test waves' predictions, one row each (the "
                 "original draws predict<step>.pdf)");
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    if (length < 1 || length > 999) vt::fail("--length {} is not in [1, 999]", length);
    // The waves; the first three are the test set. input = data[:, :-1], target = data[:, 1:]
    // (cut to --length time steps).
    const Tensor data = generate_sine_wave();
    const auto first = data.select(1, 0).to_vector<double>();
    std::printf("data[:3, 0]: %.17g %.17g %.17g  sum: %.17g\n", first[0], first[1], first[2],
                data.sum().item());
    const Tensor input = data.slice(0, 3, 100).narrow(1, 0, length);
    const Tensor target = data.slice(0, 3, 100).narrow(1, 1, length);
    const Tensor test_input = data.slice(0, 0, 3).narrow(1, 0, length);
    const Tensor test_target = data.slice(0, 0, 3).narrow(1, 1, length);

    vt::Generator gen(0);  // torch.manual_seed(0) (Vitrine's draws, not PyTorch's)
    Sequence seq(gen);
    seq.to(vt::kFloat64);  // seq.double()
    nn::MSELoss criterion;
    // LBFGS as the data fits at once: max_iter 20, no line search (PyTorch's defaults).
    nn::optim::LBFGS optimizer(seq.parameters(), {.lr = 0.8});

    double first_loss = -1, last_loss = 0;
    for (int64_t i = 0; i < steps; ++i) {
      std::printf("STEP: %ld\n", long(i));
      auto closure = [&] {
        optimizer.zero_grad();
        Tensor out = seq.forward(input, 0);
        Tensor loss = criterion.forward(out, target);
        std::printf("loss: %.12g\n", loss.item());
        if (first_loss < 0) first_loss = loss.item();
        last_loss = loss.item();
        loss.backward();
        return loss;
      };
      optimizer.step(closure);
      // Predict, without tracking gradients.
      vt::NoGradGuard no_grad;
      Tensor pred = seq.forward(test_input, future);  // [3, length + future]
      Tensor loss = criterion.forward(pred.narrow(1, 0, length), test_target);
      std::printf("test loss: %.12g\n", loss.item());
      if (!out_prefix.empty()) {
        std::ofstream csv(out_prefix + std::to_string(i) + ".csv");
        for (int64_t r = 0; r < 3; ++r) {
          const auto y = pred.select(0, r).to_vector<double>();
          for (size_t t = 0; t < y.size(); ++t) csv << (t ? "," : "") << y[t];
          csv << "\n";
        }
      }
    }
    std::printf("first loss %.6g, last %.6g (%ld closure evaluations)\n", first_loss, last_loss,
                long(optimizer.func_evals()));
    if (check && !(last_loss < first_loss)) {
      std::fprintf(stderr, "error: the training loss did not fall (%.6g -> %.6g)\n", first_loss,
                   last_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
