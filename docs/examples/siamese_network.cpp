// pytorch/examples' siamese_network/main.py in Vitrine: two images through one backbone (a
// ResNet-18 whose first convolution reads one channel and whose fc is dropped), the two feature
// vectors concatenated, two Linear layers (xavier_uniform_ weights, biases 0.01) and a sigmoid:
// the probability that the two show the same class. BCELoss, Adadelta (lr 1.0) whose learning
// rate a StepLR schedule multiplies by 0.7 after every epoch; the test pairs' loss and accuracy
// after each epoch. On Fashion-MNIST (the Debian package's files) instead of MNIST: pair i has
// its first image from a random class and its second from the same class (i even, target 1) or
// from another class (i odd, target 0); pixels 0-255, unnormalised, as the original's. Its
// PyTorch twin: siamese_network.py, beside it. The suite runs a few steps of it with --small
// (ResNet-8 instead of ResNet-18; ctest -R examples/).
//   example_siamese_network [--epochs 14] [--steps-per-epoch 0] [--test-batches 0] [--small]
//                           [--data DIR] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "models/resnet.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
namespace data = vitrine::nn::data;
using vt::Tensor;

// two images [B, 1, 28, 28] -> the probability [B, 1] that they show the same class
class SiameseNetwork : public nn::Module {
 public:
  SiameseNetwork(const vt::models::ResNetConfig& backbone, vt::Generator& gen) {
    resnet = register_module("resnet", std::make_shared<vt::models::ResNet>(backbone, gen));
    // The original gives torchvision's resnet18 a new conv1, nn.Conv2d(1, 64, 7, 2, 3,
    // bias=False), initialised as any Conv2d rather than as the ResNet's convolutions.
    if (backbone.stem == "imagenet")
      resnet->conv1 = resnet->set_module(
          "conv1", std::make_shared<nn::Conv2d>(1, backbone.width, 7, 2, 3, false, gen));
    // It keeps the ResNet's children but the last (fc): forward_features is that.
    resnet->set_module("fc", std::make_shared<nn::Identity>());
    resnet->fc.reset();
    const int64_t fc_in_features = backbone.features();
    fc = register_module(
        "fc", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                  std::make_shared<nn::Linear>(fc_in_features * 2, 256, true, gen),
                  std::make_shared<nn::ReLU>(),
                  std::make_shared<nn::Linear>(256, 1, true, gen),
              }));
    sigmoid = register_module("sigmoid", std::make_shared<nn::Sigmoid>());
    auto init_weights = [&gen](nn::Module& m) {
      if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
        nn::init::xavier_uniform_(linear->weight, 1, gen);
        nn::init::constant_(linear->bias, 0.01);
      }
    };
    resnet->apply(init_weights);
    fc->apply(init_weights);
  }
  Tensor forward_once(const Tensor& x) { return resnet->forward_features(x); }  // [B, features]
  using nn::Module::forward;
  Tensor forward(const Tensor& input1, const Tensor& input2) {
    Tensor output = ops::cat({forward_once(input1), forward_once(input2)}, 1);  // [B, 2 features]
    return (*sigmoid)((*fc)(output));                                           // [B, 1]
  }
  std::string type_name() const override { return "SiameseNetwork"; }

  std::shared_ptr<vt::models::ResNet> resnet;
  std::shared_ptr<nn::Sequential> fc;
  std::shared_ptr<nn::Sigmoid> sigmoid;
};

// The original's APP_MATCHER: the data set's examples grouped by class; pair `index` drawn from
// rng (the original draws from Python's global random module).
struct AppMatcher {
  explicit AppMatcher(std::shared_ptr<data::IdxDataset> set) : dataset(std::move(set)) {
    grouped_examples.resize(10);
    const auto& labels = dataset->labels();
    for (size_t i = 0; i < labels.size(); ++i)
      grouped_examples[size_t(labels[i])].push_back(int64_t(i));
  }
  int64_t size() const { return dataset->size(); }
  // image_1, image_2 [1, 28, 28] appended to the two vectors (pixels 0-255); returns the target.
  float get(int64_t index, data::Rng& rng, std::vector<float>& images_1,
            std::vector<float>& images_2) const {
    const int64_t selected_class = rng.below(10);
    const auto& group_1 = grouped_examples[size_t(selected_class)];
    const int64_t random_index_1 = rng.below(int64_t(group_1.size()));
    append(group_1[size_t(random_index_1)], images_1);
    if (index % 2 == 0) {  // same class, another image
      int64_t random_index_2 = rng.below(int64_t(group_1.size()));
      while (random_index_2 == random_index_1) random_index_2 = rng.below(int64_t(group_1.size()));
      append(group_1[size_t(random_index_2)], images_2);
      return 1;
    }
    int64_t other_selected_class = rng.below(10);
    while (other_selected_class == selected_class) other_selected_class = rng.below(10);
    const auto& group_2 = grouped_examples[size_t(other_selected_class)];
    append(group_2[size_t(rng.below(int64_t(group_2.size())))], images_2);
    return 0;
  }
  void append(int64_t i, std::vector<float>& out) const {
    for (float v : dataset->get(i).image.pixels) out.push_back(v * 255);  // the uint8 value
  }

  std::shared_ptr<data::IdxDataset> dataset;
  std::vector<std::vector<int64_t>> grouped_examples;
};

// Pairs [start, start + count) of epoch `epoch`, in order (the original's loader does not shuffle
// on the CPU; its pairs are random anyway).
struct PairBatch {
  Tensor images_1, images_2, targets;
};
PairBatch load_batch(const AppMatcher& set, uint64_t seed, int64_t epoch, int64_t start,
                     int64_t count) {
  std::vector<float> images_1, images_2, targets;
  for (int64_t index = start; index < start + count; ++index) {
    data::Rng rng(seed, epoch, index);
    targets.push_back(set.get(index, rng, images_1, images_2));
  }
  return {ops::from_vector(images_1, {count, 1, 28, 28}),
          ops::from_vector(images_2, {count, 1, 28, 28}), ops::from_vector(targets, {count})};
}

int main(int argc, char** argv) {
  int64_t batch_size = 64, test_batch_size = 1000, epochs = 14, log_interval = 10;
  int64_t steps_per_epoch = 0, test_batches = 0;  // 0: the whole epoch, the whole test set
  double lr = 1.0, gamma = 0.7;
  uint64_t seed = 1;
  std::string data_dir;  // "": the Debian package's folder
  bool check = false, save_model = false, small = false;

  CLI::App app{"pytorch/examples' siamese_network: same-class pairs of Fashion-MNIST images."};
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
  app.add_option("--steps-per-epoch", steps_per_epoch, "stop an epoch after this many batches")
      ->capture_default_str();
  app.add_option("--test-batches", test_batches, "test batches per evaluation (0: all)")
      ->capture_default_str();
  app.add_option("--data", data_dir, "Fashion-MNIST folder (default: the Debian package's)");
  app.add_flag("--small", small, "a ResNet-8 backbone (16/32/64 channels) instead of ResNet-18");
  app.add_flag("--save-model", save_model, "save the model to siamese_network.safetensors");
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    VT_CHECK(batch_size >= 1 && test_batch_size >= 1,
             "siamese_network: batch sizes must be positive, got {} and {}", batch_size,
             test_batch_size);
    const std::string dir = data_dir.empty() ? data::fashion_mnist_dir() : data_dir;
    AppMatcher train_dataset(data::fashion_mnist(dir, true));
    AppMatcher test_dataset(data::fashion_mnist(dir, false));

    // torchvision's resnet18 with conv1 = Conv2d(1, 64, 7, 2, 3, bias=False), or a ResNet-8.
    vt::models::ResNetConfig backbone =
        vt::models::ResNetConfig::preset(small ? "resnet8" : "resnet18");
    backbone.channels = 1;
    backbone.image_h = backbone.image_w = 28;
    vt::Generator gen(seed);
    SiameseNetwork model(backbone, gen);
    nn::optim::Adadelta optimizer(model.parameters(), {.lr = lr});
    nn::optim::StepSchedule scheduler(/*step_size=*/1, gamma);  // lr = lr gamma^(epoch - 1)

    const int64_t train_batches = (train_dataset.size() + batch_size - 1) / batch_size;
    double first_loss = -1, last_losses = 0;
    int64_t counted = 0;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      scheduler.apply(optimizer, epoch - 1);
      // train
      model.train();
      for (int64_t batch_idx = 0; batch_idx < train_batches; ++batch_idx) {
        if (steps_per_epoch > 0 && batch_idx == steps_per_epoch) break;
        const int64_t start = batch_idx * batch_size;
        PairBatch batch = load_batch(train_dataset, seed, epoch, start,
                                     std::min(batch_size, train_dataset.size() - start));
        optimizer.zero_grad();
        Tensor outputs = model.forward(batch.images_1, batch.images_2).squeeze(1);
        Tensor loss = nn::binary_cross_entropy(outputs, batch.targets);
        loss.backward();
        optimizer.step();
        const double value = loss.item();
        if (first_loss < 0) first_loss = value;
        if (epoch == epochs) last_losses += value, ++counted;
        if (batch_idx % log_interval == 0)
          std::printf("Train Epoch: %ld [%ld/%ld (%.0f%%)]\tLoss: %.6f\n", long(epoch), long(start),
                      long(train_dataset.size()), 100.0 * double(batch_idx) / double(train_batches),
                      value);
      }
      // test: the batches' mean losses summed and divided by the pairs (the original's sum)
      model.eval();
      vt::NoGradGuard no_grad;
      double test_loss = 0;
      int64_t correct = 0, seen = 0;
      for (int64_t b = 0; b * test_batch_size < test_dataset.size(); ++b) {
        if (test_batches > 0 && b == test_batches) break;
        const int64_t start = b * test_batch_size;
        PairBatch batch = load_batch(test_dataset, seed + 1, epoch, start,
                                     std::min(test_batch_size, test_dataset.size() - start));
        Tensor outputs = model.forward(batch.images_1, batch.images_2).squeeze(1);
        test_loss += nn::binary_cross_entropy(outputs, batch.targets).item();
        Tensor pred = ops::gt(outputs, ops::tensor({0.5})).to(vt::kFloat32);
        correct += ops::eq(pred, batch.targets).to(vt::kInt64).sum().item<int64_t>();
        seen += batch.targets.numel();
      }
      test_loss /= double(seen);
      std::printf("\nTest set: Average loss: %.4f, Accuracy: %ld/%ld (%.0f%%)\n\n", test_loss,
                  long(correct), long(seen), 100.0 * double(correct) / double(seen));
    }
    if (save_model) nn::save_checkpoint("siamese_network.safetensors", model);

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
