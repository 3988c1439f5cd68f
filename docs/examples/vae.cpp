// pytorch/examples' vae/main.py in Vitrine: the variational autoencoder of Kingma and Welling
// (2014), 784-400-20 with a mean and a log-variance head, the reparameterisation z = mu + eps
// exp(logvar / 2), a 20-400-784 sigmoid decoder; the loss is the reconstruction's summed binary
// cross-entropy plus the KL divergence from N(0, I), trained by Adam (lr 1e-3). After each epoch
// the test set's loss, results/reconstruction_<epoch>.png (the first 8 test images over their
// reconstructions) and results/sample_<epoch>.png (64 decodings of z ~ N(0, I)), written by
// vitrine::save_image as torchvision's. On Fashion-MNIST (the Debian package's files) instead of
// MNIST. Its PyTorch twin: vae.py, beside it. The suite runs a few steps (ctest -R examples/).
//   example_vae [--epochs 10] [--steps-per-epoch 0] [--test-batches 0] [--out-dir results]
//               [--data DIR] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "nn/data/image_grid.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

struct VaeOutput {
  Tensor recon, mu, logvar;  // [B, 784] in (0, 1), [B, 20], [B, 20]
};

class VAE : public nn::Module {
 public:
  explicit VAE(vt::Generator& gen) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 400, true, gen));
    fc21 = register_module("fc21", std::make_shared<nn::Linear>(400, 20, true, gen));
    fc22 = register_module("fc22", std::make_shared<nn::Linear>(400, 20, true, gen));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(20, 400, true, gen));
    fc4 = register_module("fc4", std::make_shared<nn::Linear>(400, 784, true, gen));
  }
  // x [B, 784] -> (mu, logvar), each [B, 20]
  std::pair<Tensor, Tensor> encode(const Tensor& x) {
    Tensor h1 = ops::relu((*fc1)(x));
    return {(*fc21)(h1), (*fc22)(h1)};
  }
  Tensor reparameterize(const Tensor& mu, const Tensor& logvar, vt::Generator& gen) {
    Tensor std = (logvar * 0.5).exp();
    Tensor eps = ops::randn(std.shape(), gen);  // randn_like
    return mu + eps * std;
  }
  // z [B, 20] -> [B, 784]
  Tensor decode(const Tensor& z) {
    Tensor h3 = ops::relu((*fc3)(z));
    return ops::sigmoid((*fc4)(h3));
  }
  // images [B, 1, 28, 28] (or [B, 784]); gen draws the reparameterisation's noise
  VaeOutput forward(const Tensor& x, vt::Generator& gen) {
    auto [mu, logvar] = encode(x.reshape({-1, 784}));
    Tensor z = reparameterize(mu, logvar, gen);
    return {decode(z), mu, logvar};
  }
  using nn::Module::forward;
  std::string type_name() const override { return "VAE"; }

  std::shared_ptr<nn::Linear> fc1, fc21, fc22, fc3, fc4;
};

// Reconstruction + KL divergence losses summed over all elements and batch. Appendix B of the
// paper: KLD = 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2), negated.
Tensor loss_function(const Tensor& recon_x, const Tensor& x, const Tensor& mu,
                     const Tensor& logvar) {
  Tensor bce =
      nn::binary_cross_entropy(recon_x, x.reshape({-1, 784}), Tensor(), ops::Reduction::Sum);
  Tensor kld = (1 + logvar - mu.pow(2) - logvar.exp()).sum() * -0.5;
  return bce + kld;
}

int main(int argc, char** argv) {
  int64_t batch_size = 128, epochs = 10, log_interval = 10;
  int64_t steps_per_epoch = 0, test_batches = 0;  // 0: the whole epoch, the whole test set
  uint64_t seed = 1;
  std::string data_dir, out_dir = "results";  // data "": the Debian package's folder
  bool check = false;

  CLI::App app{"pytorch/examples' vae: a variational autoencoder on Fashion-MNIST."};
  app.add_option("--batch-size", batch_size, "input batch size for training")
      ->capture_default_str();
  app.add_option("--epochs", epochs, "number of epochs to train")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--log-interval", log_interval, "batches between training status lines")
      ->capture_default_str();
  app.add_option("--steps-per-epoch", steps_per_epoch, "stop an epoch after this many batches")
      ->capture_default_str();
  app.add_option("--test-batches", test_batches, "test batches per evaluation (0: all)")
      ->capture_default_str();
  app.add_option("--out-dir", out_dir, "where the PNG images go")->capture_default_str();
  app.add_option("--data", data_dir, "Fashion-MNIST folder (default: the Debian package's)");
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    // Data: ToTensor only (pixels in [0, 1], the targets of the binary cross-entropy).
    nn::data::DatasetFiles files =
        nn::data::open_dataset({.name = "fashion-mnist", .path = data_dir});
    nn::data::DataLoader train_loader(files.train, {}, {.batch_size = batch_size, .seed = seed});
    nn::data::DataLoader test_loader(files.test, {}, {.batch_size = batch_size, .shuffle = false});
    std::filesystem::create_directories(out_dir);
    auto out_path = [&out_dir](const std::string& name, int64_t epoch) {
      return (std::filesystem::path(out_dir) / (name + "_" + std::to_string(epoch) + ".png"))
          .string();
    };

    vt::Generator gen(seed);
    VAE model(gen);
    nn::optim::Adam optimizer(model.parameters(), {.lr = 1e-3});

    double first_loss = -1, last_epoch_loss = 0;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      // train
      model.train();
      train_loader.start_epoch(epoch);
      const int64_t batches = train_loader.batches_per_epoch();
      double train_loss = 0;
      int64_t trained = 0;
      for (int64_t batch_idx = 0; auto batch = train_loader.next(); ++batch_idx) {
        if (steps_per_epoch > 0 && batch_idx == steps_per_epoch) break;
        const Tensor& data = batch->images;  // [B, 1, 28, 28]
        optimizer.zero_grad();
        auto [recon_batch, mu, logvar] = model.forward(data, gen);
        Tensor loss = loss_function(recon_batch, data, mu, logvar);
        loss.backward();
        const double value = loss.item();
        train_loss += value, trained += data.size(0);
        optimizer.step();
        if (first_loss < 0) first_loss = value / double(data.size(0));
        if (batch_idx % log_interval == 0)
          std::printf("Train Epoch: %ld [%ld/%ld (%.0f%%)]\tLoss: %.6f\n", long(epoch),
                      long(batch_idx * batch_size), long(train_loader.size()),
                      100.0 * double(batch_idx) / double(batches), value / double(data.size(0)));
      }
      last_epoch_loss = train_loss / double(trained);
      std::printf("====> Epoch: %ld Average loss: %.4f\n", long(epoch), last_epoch_loss);

      // test, with the first batch's first 8 images over their reconstructions
      model.eval();
      vt::NoGradGuard no_grad;
      test_loader.start_epoch(0);
      double test_loss = 0;
      int64_t seen = 0;
      for (int64_t i = 0; auto batch = test_loader.next(); ++i) {
        if (test_batches > 0 && i == test_batches) break;
        const Tensor& data = batch->images;
        auto [recon_batch, mu, logvar] = model.forward(data, gen);
        test_loss += loss_function(recon_batch, data, mu, logvar).item();
        seen += data.size(0);
        if (i == 0) {
          const int64_t n = std::min<int64_t>(data.size(0), 8);
          Tensor comparison = ops::cat(
              {data.narrow(0, 0, n), recon_batch.reshape({-1, 1, 28, 28}).narrow(0, 0, n)}, 0);
          vt::save_image(comparison, out_path("reconstruction", epoch), n);
        }
      }
      std::printf("====> Test set loss: %.4f\n", test_loss / double(seen));

      Tensor sample = model.decode(ops::randn({64, 20}, gen));
      vt::save_image(sample.reshape({64, 1, 28, 28}), out_path("sample", epoch));
    }

    // The last epoch's mean loss per image against the very first batch's.
    std::printf("first batch loss %.4f, last epoch's mean %.4f\n", first_loss, last_epoch_loss);
    if (check && !(last_epoch_loss < first_loss)) {
      std::fprintf(stderr, "error: the training loss did not fall (%.4f -> %.4f)\n", first_loss,
                   last_epoch_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
