// pytorch/examples' dcgan/main.py in Vitrine: a generator of transposed convolutions, batch norm
// and ReLU (tanh at the end) against a discriminator of strided convolutions, batch norm and
// LeakyReLU(0.2) (sigmoid at the end), both initialised by weights_init through Module::apply,
// trained by Adam (lr 2e-4, betas 0.5 and 0.999) on BCE: D on real (label 1) and fake (label 0)
// images, then G to make D say 1. On Fashion-MNIST (the Debian package's files) at 32 x 32 (the
// original's --dataset mnist resizes to --imageSize, 64 by default; a layer per doubling, so 32
// has one layer fewer on each side). Each epoch writes real_samples.png and
// fake_samples_epoch_NNN.png (vitrine::save_image, normalize as the original) and, with
// --save-model, netG/netD_epoch_N.safetensors. Its PyTorch twin: dcgan.py, beside it.
//   example_dcgan [--niter 25] [--imageSize 32] [--ngf 64] [--ndf 64] [--steps-per-epoch 0]
//                 [--outf results] [--data DIR] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "dcgan.h"
#include "nn/data/image_grid.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

using dcgan::Discriminator;
using dcgan::Generator;
using dcgan::weights_init;

int main(int argc, char** argv) {
  int64_t batch_size = 64, image_size = 32, nz = 100, ngf = 64, ndf = 64, niter = 25;
  int64_t steps_per_epoch = 0, log_interval = 50;
  double lr = 0.0002, beta1 = 0.5;
  uint64_t seed = 999;
  std::string data_dir, outf = "results";  // "": the Debian package's folder
  bool check = false, save_model = false;

  CLI::App app{"pytorch/examples' dcgan/main.py: a DCGAN on Fashion-MNIST."};
  app.add_option("--batchSize", batch_size, "input batch size")->capture_default_str();
  app.add_option("--imageSize", image_size, "the height / width of the images")
      ->capture_default_str();
  app.add_option("--nz", nz, "size of the latent z vector")->capture_default_str();
  app.add_option("--ngf", ngf, "generator width")->capture_default_str();
  app.add_option("--ndf", ndf, "discriminator width")->capture_default_str();
  app.add_option("--niter", niter, "number of epochs to train for")->capture_default_str();
  app.add_option("--lr", lr, "learning rate")->capture_default_str();
  app.add_option("--beta1", beta1, "beta1 for adam")->capture_default_str();
  app.add_option("--manualSeed", seed, "manual seed")->capture_default_str();
  app.add_option("--outf", outf, "folder to output images and model checkpoints")
      ->capture_default_str();
  app.add_option("--steps-per-epoch", steps_per_epoch,
                 "stop an epoch after this many batches "
                 "(0: all)")
      ->capture_default_str();
  app.add_option("--log-interval", log_interval, "batches between status lines")
      ->capture_default_str();
  app.add_option("--data", data_dir, "Fashion-MNIST folder (default: the Debian package's)");
  app.add_flag("--save-model", save_model, "save netG and netD after every epoch");
  app.add_flag("--check", check, "exit 1 unless D's loss on the last batches fell below the first");
  CLI11_PARSE(app, argc, argv);

  try {
    std::filesystem::create_directories(outf);
    // Resize(imageSize), ToTensor, Normalize((0.5,), (0.5,)) as the original's mnist branch.
    nn::data::DatasetFiles files =
        nn::data::open_dataset({.name = "fashion-mnist", .path = data_dir});
    auto transform = nn::data::from_config(
        {{"resize", {image_size, image_size}}, {"mean", {0.5}}, {"std", {0.5}}}, 1, false);
    nn::data::DataLoader loader(files.train, transform, {.batch_size = batch_size, .seed = seed});

    vt::Generator gen(seed);
    const int64_t nc = 1;
    Generator netG(nz, ngf, nc, image_size, gen);
    netG.apply([&](nn::Module& m) { weights_init(m, gen); });
    Discriminator netD(ndf, nc, image_size, gen);
    netD.apply([&](nn::Module& m) { weights_init(m, gen); });

    const Tensor fixed_noise = ops::randn({batch_size, nz, 1, 1}, gen);
    const double real_label = 1, fake_label = 0;
    nn::optim::Adam optimizerD(netD.parameters(), {.lr = lr, .beta1 = beta1, .beta2 = 0.999});
    nn::optim::Adam optimizerG(netG.parameters(), {.lr = lr, .beta1 = beta1, .beta2 = 0.999});

    std::vector<double> errD_history;
    for (int64_t epoch = 0; epoch < niter; ++epoch) {
      loader.start_epoch(epoch);
      const int64_t batches = loader.batches_per_epoch();
      for (int64_t i = 0; auto batch = loader.next(); ++i) {
        if (steps_per_epoch > 0 && i == steps_per_epoch) break;
        // (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad();
        const Tensor real = batch->images;
        const int64_t b = real.size(0);
        Tensor output = netD(real);
        Tensor errD_real = nn::binary_cross_entropy(output, ops::full({b}, real_label));
        errD_real.backward();
        const double D_x = output.mean().item();

        const Tensor noise = ops::randn({b, nz, 1, 1}, gen);
        const Tensor fake = netG(noise);
        output = netD(fake.detach());
        Tensor errD_fake = nn::binary_cross_entropy(output, ops::full({b}, fake_label));
        errD_fake.backward();
        const double D_G_z1 = output.mean().item();
        const double errD = errD_real.item() + errD_fake.item();
        optimizerD.step();

        // (2) Update G: maximize log(D(G(z)))
        netG.zero_grad();
        output = netD(fake);  // fake labels are real for the generator's cost
        Tensor errG = nn::binary_cross_entropy(output, ops::full({b}, real_label));
        errG.backward();
        const double D_G_z2 = output.mean().item();
        optimizerG.step();

        errD_history.push_back(errD);
        if (i % log_interval == 0) {
          std::printf(
              "[%ld/%ld][%ld/%ld] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f\n",
              long(epoch), long(niter), long(i), long(batches), errD, errG.item(), D_x, D_G_z1,
              D_G_z2);
          std::fflush(stdout);
        }
        if (i == 0 && epoch == 0)
          vt::save_image(real, outf + "/real_samples.png", 8, 2, /*normalize=*/true);
      }
      {
        vt::NoGradGuard no_grad;  // in training mode, as the original's (batch statistics)
        const Tensor fake = netG(fixed_noise);
        char name[64];
        std::snprintf(name, sizeof name, "/fake_samples_epoch_%03ld.png", long(epoch));
        vt::save_image(fake, outf + name, 8, 2, /*normalize=*/true);
      }
      if (save_model) {
        nn::save_checkpoint(outf + "/netG_epoch_" + std::to_string(epoch) + ".safetensors", netG);
        nn::save_checkpoint(outf + "/netD_epoch_" + std::to_string(epoch) + ".safetensors", netD);
      }
    }

    // D learns first: its mean loss over the last quarter of the batches against the first.
    const size_t q = std::max<size_t>(1, errD_history.size() / 4);
    double first = 0, last = 0;
    for (size_t i = 0; i < q; ++i) first += errD_history[i] / double(q);
    for (size_t i = errD_history.size() - q; i < errD_history.size(); ++i)
      last += errD_history[i] / double(q);
    std::printf("Loss_D: first batches' mean %.4f, last batches' mean %.4f\n", first, last);
    if (check && !(last < first)) {
      std::fprintf(stderr, "error: the discriminator's loss did not fall (%.4f -> %.4f)\n", first,
                   last);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
