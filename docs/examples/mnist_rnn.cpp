// pytorch/examples' mnist_rnn/main.py in Vitrine: an LSTM reads an image's 28 rows as a sequence
// of 28 steps of 28 pixels; its last output goes through batch norm, dropout, two linear layers
// and log_softmax; nll_loss, Adadelta (lr 0.1) and StepLR (x0.7 per epoch) as the original. On
// Fashion-MNIST (the Debian package's files) instead of MNIST. Its PyTorch twin: mnist_rnn.py,
// beside it. The test suite runs a few steps of it (ctest -R examples/mnist_rnn).
//   example_mnist_rnn [--epochs 14] [--steps-per-epoch 0] [--data DIR] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "nn/recurrent.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

// images [B, 1, 28, 28] -> log-probabilities [B, 10]
class Net : public nn::Module {
 public:
  explicit Net(vt::Generator& gen) {
    rnn = register_module(
        "rnn", std::make_shared<nn::LSTM>(nn::RnnOptions(28, 64).batch_first(true), gen));
    batchnorm = register_module("batchnorm", std::make_shared<nn::BatchNorm1d>(64));
    // The original's Dropout2d on a 2-D [B, 64] input zeroes single elements: plain dropout.
    dropout1 = register_module("dropout1", std::make_shared<nn::Dropout>(0.25, gen));
    dropout2 = register_module("dropout2", std::make_shared<nn::Dropout>(0.5, gen));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(64, 32, true, gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 10, true, gen));
  }
  Tensor forward(const Tensor& input) override {
    Tensor rows = input.reshape({-1, 28, 28});      // [B, T = 28 rows, 28 pixels]
    Tensor output = rnn->forward(rows, {}).output;  // [B, 28, 64]
    output = output.select(1, output.size(1) - 1);  // the last step's output [B, 64]
    output = (*batchnorm)(output);
    output = (*dropout1)(output);
    output = ops::relu((*fc1)(output));    // [B, 32]
    output = (*fc2)((*dropout2)(output));  // [B, 10]
    return ops::log_softmax(output, 1);
  }
  std::string type_name() const override { return "Net"; }

  std::shared_ptr<nn::LSTM> rnn;
  std::shared_ptr<nn::BatchNorm1d> batchnorm;
  std::shared_ptr<nn::Dropout> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

int main(int argc, char** argv) {
  int64_t batch_size = 64, test_batch_size = 1000, epochs = 14, log_interval = 10;
  int64_t steps_per_epoch = 0, test_batches = 0;  // 0: the whole epoch, the whole test set
  double lr = 0.1, gamma = 0.7;
  uint64_t seed = 1;
  std::string data_dir;  // "": the Debian package's folder
  bool check = false, save_model = false;

  CLI::App app{"pytorch/examples' mnist_rnn/main.py: an LSTM over the image's rows."};
  app.add_option("--batch-size", batch_size, "input batch size for training")
      ->capture_default_str();
  app.add_option("--test-batch-size", test_batch_size, "input batch size for testing")
      ->capture_default_str();
  app.add_option("--epochs", epochs, "number of epochs to train")->capture_default_str();
  app.add_option("--lr", lr, "learning rate")->capture_default_str();
  app.add_option("--gamma", gamma, "learning rate step gamma")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--log-interval", log_interval, "batches between training status lines")
      ->capture_default_str();
  app.add_option("--steps-per-epoch", steps_per_epoch,
                 "stop an epoch after this many batches (0: all)")
      ->capture_default_str();
  app.add_option("--test-batches", test_batches, "test batches per evaluation (0: all)")
      ->capture_default_str();
  app.add_option("--data", data_dir, "Fashion-MNIST folder (default: the Debian package's)");
  app.add_flag("--save-model", save_model, "save the model to mnist_rnn.safetensors");
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    // ToTensor and Normalize, with Fashion-MNIST's mean and std (MNIST's: 0.1307, 0.3081).
    nn::data::DatasetFiles files =
        nn::data::open_dataset({.name = "fashion-mnist", .path = data_dir});
    auto transform = nn::data::from_config({{"mean", {0.2860}}, {"std", {0.3530}}}, 1, false);
    nn::data::DataLoader train_loader(files.train, transform,
                                      {.batch_size = batch_size, .seed = seed});
    nn::data::DataLoader test_loader(files.test, transform,
                                     {.batch_size = test_batch_size, .shuffle = false});

    vt::Generator gen(seed);
    Net model(gen);
    nn::optim::Adadelta optimizer(model.parameters(), {.lr = lr});
    nn::optim::StepSchedule scheduler(/*step_size=*/1, gamma);  // lr = lr gamma^(epoch - 1)

    double first_loss = -1, last_losses = 0;
    int64_t counted = 0;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      scheduler.apply(optimizer, epoch - 1);
      model.train();
      train_loader.start_epoch(epoch);
      const int64_t batches = train_loader.batches_per_epoch();
      for (int64_t batch_idx = 0; auto batch = train_loader.next(); ++batch_idx) {
        if (steps_per_epoch > 0 && batch_idx == steps_per_epoch) break;
        optimizer.zero_grad();
        Tensor loss = nn::nll_loss(model(batch->images), batch->labels);
        loss.backward();
        optimizer.step();
        const double value = loss.item();
        if (first_loss < 0) first_loss = value;
        if (epoch == epochs) last_losses += value, ++counted;
        if (batch_idx % log_interval == 0)
          std::printf("Train Epoch: %ld [%ld/%ld (%.0f%%)]\tLoss: %.6f\n", long(epoch),
                      long(batch_idx * batch_size), long(train_loader.size()),
                      100.0 * double(batch_idx) / double(batches), value);
      }
      model.eval();
      vt::NoGradGuard no_grad;
      test_loader.start_epoch(0);
      double test_loss = 0;
      int64_t correct = 0, seen = 0;
      for (int64_t b = 0; auto batch = test_loader.next(); ++b) {
        if (test_batches > 0 && b == test_batches) break;
        Tensor output = model(batch->images);
        test_loss +=
            nn::nll_loss(output, batch->labels, Tensor(), -100, ops::Reduction::Sum).item();
        correct +=
            ops::eq(ops::argmax(output, 1), batch->labels).to(vt::kInt64).sum().item<int64_t>();
        seen += batch->labels.numel();
      }
      test_loss /= double(seen);
      std::printf("\nTest set: Average loss: %.4f, Accuracy: %ld/%ld (%.0f%%)\n\n", test_loss,
                  long(correct), long(seen), 100.0 * double(correct) / double(seen));
    }
    if (save_model) nn::save_checkpoint("mnist_rnn.safetensors", model, {});

    const double last = last_losses / double(counted);
    std::printf("first batch loss %.4f, last epoch's mean %.4f\n", first_loss, last);
    if (check && !(last < first_loss)) {
      std::fprintf(stderr, "error: the training loss did not fall (%.4f -> %.4f)\n", first_loss,
                   last);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
