// pytorch/examples' DCGAN models (dcgan/main.py's Generator, Discriminator and weights_init), for
// images of any size 4 x 2^n: dcgan.cpp trains them, bench/dcgan.cpp times them against PyTorch.
#pragma once
#include <vitrine.h>

#include <string>

#include "nn/activations.h"
#include "nn/conv.h"

namespace dcgan {

namespace nn = vitrine::nn;
using vitrine::Tensor;

// The number of doublings from 4 x 4 to the image size (3 at 32, 4 at 64, as the original's).
inline int64_t doublings(int64_t image_size) {
  int64_t n = 0;
  for (int64_t s = 4; s < image_size; s *= 2) ++n;
  VT_CHECK(n >= 1 && (int64_t{4} << n) == image_size,
           "dcgan: --imageSize must be 8, 16, 32, 64, ... (4 times a power of 2), got {}",
           image_size);
  return n;
}

// z [B, nz, 1, 1] -> images [B, nc, S, S] in [-1, 1]; parameters under the original's names
// (main.0.weight, main.1.running_mean, ...).
class Generator : public nn::Module {
 public:
  Generator(int64_t nz, int64_t ngf, int64_t nc, int64_t image_size, vitrine::Generator& gen) {
    main = register_module("main", std::make_shared<nn::Sequential>());
    const int64_t n = doublings(image_size);
    int64_t ch = ngf << (n - 1);  // ngf * 8 at 64 x 64
    // nz -> ch, 1 x 1 -> 4 x 4
    main->push_back(std::make_shared<nn::ConvTranspose2d>(nz, ch, 4, 1, 0, 0, 1, false, 1, gen));
    main->push_back(std::make_shared<nn::BatchNorm2d>(ch));
    main->push_back(std::make_shared<nn::ReLU>());
    for (int64_t i = 1; i < n; ++i, ch /= 2) {  // ch -> ch / 2, size doubled
      main->push_back(
          std::make_shared<nn::ConvTranspose2d>(ch, ch / 2, 4, 2, 1, 0, 1, false, 1, gen));
      main->push_back(std::make_shared<nn::BatchNorm2d>(ch / 2));
      main->push_back(std::make_shared<nn::ReLU>());
    }
    // ngf -> nc, the last doubling
    main->push_back(std::make_shared<nn::ConvTranspose2d>(ch, nc, 4, 2, 1, 0, 1, false, 1, gen));
    main->push_back(std::make_shared<nn::Tanh>());
  }
  Tensor forward(const Tensor& z) override { return (*main)(z); }
  std::string type_name() const override { return "Generator"; }
  std::shared_ptr<nn::Sequential> main;
};

// images [B, nc, S, S] -> the probability that each is real [B]
class Discriminator : public nn::Module {
 public:
  Discriminator(int64_t ndf, int64_t nc, int64_t image_size, vitrine::Generator& gen) {
    main = register_module("main", std::make_shared<nn::Sequential>());
    const int64_t n = doublings(image_size);
    int64_t ch = ndf;
    // nc -> ndf, size halved (no batch norm on the first layer)
    main->push_back(std::make_shared<nn::Conv2d>(nc, ch, 4, 2, 1, false, gen));
    main->push_back(std::make_shared<nn::LeakyReLU>(0.2));
    for (int64_t i = 1; i < n; ++i, ch *= 2) {  // ch -> 2 ch, size halved
      main->push_back(std::make_shared<nn::Conv2d>(ch, ch * 2, 4, 2, 1, false, gen));
      main->push_back(std::make_shared<nn::BatchNorm2d>(ch * 2));
      main->push_back(std::make_shared<nn::LeakyReLU>(0.2));
    }
    // ch, 4 x 4 -> 1 x 1
    main->push_back(std::make_shared<nn::Conv2d>(ch, 1, 4, 1, 0, false, gen));
    main->push_back(std::make_shared<nn::Sigmoid>());
  }
  Tensor forward(const Tensor& x) override { return (*main)(x).reshape({-1}); }
  std::string type_name() const override { return "Discriminator"; }
  std::shared_ptr<nn::Sequential> main;
};

// The original's weights_init: conv weights N(0, 0.02), batch norm weights N(1, 0.02), biases 0.
inline void weights_init(nn::Module& m, vitrine::Generator& gen) {
  const std::string name = m.type_name();
  if (name.find("Conv") != std::string::npos) {
    nn::init::normal_(m.named_parameters(false)[0].second, 0.0, 0.02, gen);
  } else if (name.find("BatchNorm") != std::string::npos) {
    auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m);
    nn::init::normal_(bn->weight, 1.0, 0.02, gen);
    nn::init::zeros_(bn->bias);
  }
}

}  // namespace dcgan
