// pytorch/examples' mnist/main.py in Vitrine: two convolutions, max pooling, dropout and two
// linear layers ending in log_softmax, trained with nll_loss by Adadelta (lr 1.0) whose learning
// rate a StepLR schedule multiplies by 0.7 after every epoch; the test set's average loss and
// accuracy after each epoch. On Fashion-MNIST (the Debian package's files) instead of MNIST,
// normalised with its own mean and std. Its PyTorch twin: mnist_adadelta.py, beside it. The test
// suite runs a few steps of it (ctest -R examples/mnist_adadelta).
//   example_mnist_adadelta [--epochs 14] [--steps-per-epoch 0] [--data DIR] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

// images [B, 1, 28, 28] -> log-probabilities [B, 10]
class Net : public nn::Module {
 public:
  explicit Net(vt::Generator& gen) {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 32, 3, 1, 0, true, gen));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(32, 64, 3, 1, 0, true, gen));
    dropout1 = register_module("dropout1", std::make_shared<nn::Dropout>(0.25, gen));
    dropout2 = register_module("dropout2", std::make_shared<nn::Dropout>(0.5, gen));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(9216, 128, true, gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10, true, gen));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = ops::relu((*conv1)(input));   // [B, 32, 26, 26]
    x = ops::relu((*conv2)(x));              // [B, 64, 24, 24]
    x = ops::max_pool2d(x, {2, 2}, {2, 2});  // [B, 64, 12, 12]
    x = (*dropout1)(x).flatten(1);           // [B, 9216]
    x = (*dropout2)(ops::relu((*fc1)(x)));   // [B, 128]
    return ops::log_softmax((*fc2)(x), 1);   // [B, 10]
  }
  std::string type_name() const override { return "Net"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

int main(int argc, char** argv) {
  int64_t batch_size = 64, test_batch_size = 1000, epochs = 14, log_interval = 10;
  int64_t steps_per_epoch = 0, test_batches = 0;  // 0: the whole epoch, the whole test set
  double lr = 1.0, gamma = 0.7;
  uint64_t seed = 1;
  std::string data_dir;  // "": the Debian package's folder
  bool check = false, save_model = false;

  CLI::App app{"pytorch/examples' mnist/main.py: a CNN trained by Adadelta on Fashion-MNIST."};
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
                 "stop an epoch after this many batches "
                 "(0: all)")
      ->capture_default_str();
  app.add_option("--test-batches", test_batches, "test batches per evaluation (0: all)")
      ->capture_default_str();
  app.add_option("--data", data_dir, "Fashion-MNIST folder (default: the Debian package's)");
  app.add_flag("--save-model", save_model, "save the model to mnist_cnn.safetensors");
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    // Data: ToTensor and Normalize as the original's, with Fashion-MNIST's mean and std (MNIST's
    // are 0.1307 and 0.3081); the training batches shuffled, as the original's with an
    // accelerator.
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
      // train
      model.train();
      train_loader.start_epoch(epoch);
      const int64_t batches = train_loader.batches_per_epoch();
      for (int64_t batch_idx = 0; auto batch = train_loader.next(); ++batch_idx) {
        if (steps_per_epoch > 0 && batch_idx == steps_per_epoch) break;
        optimizer.zero_grad();
        Tensor output = model(batch->images);
        Tensor loss = nn::nll_loss(output, batch->labels);
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
      // test
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
        Tensor pred = ops::argmax(output, 1);
        correct += ops::eq(pred, batch->labels).to(vt::kInt64).sum().item<int64_t>();
        seen += batch->labels.numel();
      }
      test_loss /= double(seen);
      std::printf("\nTest set: Average loss: %.4f, Accuracy: %ld/%ld (%.0f%%)\n\n", test_loss,
                  long(correct), long(seen), 100.0 * double(correct) / double(seen));
    }
    if (save_model) nn::save_checkpoint("mnist_cnn.safetensors", model, {});

    // The mean loss of the last epoch's batches against the very first batch's.
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
