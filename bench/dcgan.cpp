// DCGAN's speed in Vitrine (issue 61): a training step of pytorch/examples' dcgan (the models of
// docs/examples/dcgan.h at 32 x 32, nz 100, ngf = ndf = 64, one channel: D on a real and a fake
// batch, then G; BCE, Adam) in images per second, and each transposed convolution of the
// generator against the convolution it is the gradient of (the same shapes, weight [Cin, Cout,
// 4, 4] read as the convolution's [Cout', Cin', 4, 4]), forward + backward, in calls per second.
// bench/dcgan_torch.py is its PyTorch twin; bench/dcgan.py runs both, alternating. Prints one
// JSON line.
//   dcgan_bench --what step|convt|conv [--layer 1..4] [--batch 64] [--steps 10] [--threads 2]
#include <vitrine.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "docs/examples/dcgan.h"
#include "ops/conv_transpose.h"

namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vitrine::Tensor;

// The generator's layers at 32 x 32: (in, out, size in, stride, padding).
struct Layer {
  int64_t in, out, size, stride, padding;
};
constexpr Layer kLayers[4] = {
    {100, 256, 1, 1, 0}, {256, 128, 4, 2, 1}, {128, 64, 8, 2, 1}, {64, 1, 16, 2, 1}};

int main(int argc, char** argv) {
  try {
    std::string what = "step";
    int64_t layer = 1, batch = 64, steps = 10, warmup = 2, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--what")
        what = v;
      else if (k == "--layer")
        layer = std::stoll(v);
      else if (k == "--batch")
        batch = std::stoll(v);
      else if (k == "--steps")
        steps = std::stoll(v);
      else if (k == "--threads")
        threads = std::stoll(v);
      else
        throw vitrine::Error("unknown flag " + k);
    }
    vitrine::set_num_threads(static_cast<int>(threads));
    vitrine::Generator gen(999);
    std::function<void()> step;
    dcgan::Generator netG(100, 64, 1, 32, gen);
    dcgan::Discriminator netD(64, 1, 32, gen);
    netG.apply([&](nn::Module& m) { dcgan::weights_init(m, gen); });
    netD.apply([&](nn::Module& m) { dcgan::weights_init(m, gen); });
    nn::optim::Adam optD(netD.parameters(), {.lr = 2e-4, .beta1 = 0.5});
    nn::optim::Adam optG(netG.parameters(), {.lr = 2e-4, .beta1 = 0.5});
    const Tensor real = ops::rand({batch, 1, 32, 32}, gen) * 2.0 - 1.0;
    const Tensor ones = ops::full({batch}, 1.0), zeros = ops::full({batch}, 0.0);
    Tensor x, w;
    if (what == "step") {
      step = [&] {
        netD.zero_grad();
        nn::binary_cross_entropy(netD(real), ones).backward();
        const Tensor fake = netG(ops::randn({batch, 100, 1, 1}, gen));
        nn::binary_cross_entropy(netD(fake.detach()), zeros).backward();
        optD.step();
        netG.zero_grad();
        nn::binary_cross_entropy(netD(fake), ones).backward();
        optG.step();
      };
    } else {
      VT_CHECK(layer >= 1 && layer <= 4, "--layer 1 to 4, got {}", layer);
      const Layer l = kLayers[layer - 1];
      const int64_t out_size = (l.size - 1) * l.stride - 2 * l.padding + 4;
      // conv_transpose2d: x [B, in, s, s] -> [B, out, S, S]; its convolution: [B, out, S, S] ->
      // [B, in, s, s], the same weight [in, out, 4, 4].
      w = (ops::randn({l.in, l.out, 4, 4}, gen) * 0.02).requires_grad_(true);
      const bool transposed = what == "convt";
      VT_CHECK(transposed || what == "conv", "--what step, convt or conv, got {}", what);
      x = ops::randn(transposed ? vitrine::Dims{batch, l.in, l.size, l.size}
                                : vitrine::Dims{batch, l.out, out_size, out_size},
                     gen)
              .requires_grad_(true);
      step = [&, l, transposed] {
        const Tensor y =
            transposed ? ops::conv_transpose2d(x, w, Tensor(), {l.stride, l.stride},
                                               {l.padding, l.padding})
                       : ops::conv2d(x, w, Tensor(), {l.stride, l.stride}, {l.padding, l.padding});
        y.sum().backward();
        x.grad() = Tensor();
        w.grad() = Tensor();
      };
    }
    for (int64_t s = 0; s < warmup; ++s) step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) step();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = what == "step" ? double(steps * batch) / secs : double(steps) / secs;
    std::printf(
        "{\"side\": \"vitrine\", \"what\": \"%s\", \"layer\": %lld, \"threads\": %lld, "
        "\"steps\": %lld, \"rate\": %.2f}\n",
        what.c_str(), static_cast<long long>(what == "step" ? 0 : layer),
        static_cast<long long>(threads), static_cast<long long>(steps), rate);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
