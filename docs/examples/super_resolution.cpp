// pytorch/examples' super_resolution (model.py, data.py, main.py) in Vitrine: the efficient
// sub-pixel CNN of Shi et al. (2016), four convolutions ending in upscale_factor^2 channels that
// PixelShuffle rearranges into an image upscale_factor times larger; orthogonal_ init (ReLU gain
// for the first three); trained by Adam on the MSE of the Y channel against the original; the
// held-out set's average PSNR after each epoch, and a checkpoint model_epoch_<n>.safetensors.
// On Fashion-MNIST (the Debian package's files) instead of a download of BSDS300: every 28 x 28
// item is centre-cropped to the largest multiple of the factor (27) as the target and shrunk to
// 9 x 9 as the input, as data.py does to BSDS300's 256 x 256 crops; the items are grey, so the Y
// channel is the image. The bicubic upscaling's PSNR is printed beside the network's. Its PyTorch
// twin: super_resolution.py, beside it. The suite runs a few steps (ctest -R examples/).
//   example_super_resolution [--upscale_factor 3] [--nEpochs 2] [--steps-per-epoch 0]
//                            [--test-batches 0] [--data DIR] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
namespace data = vitrine::nn::data;
using vt::Tensor;

// images [B, 1, H, W] -> [B, 1, H r, W r]
class Net : public nn::Module {
 public:
  Net(int64_t upscale_factor, vt::Generator& gen) {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 64, 5, 1, 2, true, gen));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(64, 64, 3, 1, 1, true, gen));
    conv3 = register_module("conv3", std::make_shared<nn::Conv2d>(64, 32, 3, 1, 1, true, gen));
    conv4 = register_module("conv4", std::make_shared<nn::Conv2d>(
                                         32, upscale_factor * upscale_factor, 3, 1, 1, true, gen));
    pixel_shuffle =
        register_module("pixel_shuffle", std::make_shared<nn::PixelShuffle>(upscale_factor));
    const double relu_gain = nn::init::calculate_gain("relu");
    nn::init::orthogonal_(conv1->weight, relu_gain, gen);
    nn::init::orthogonal_(conv2->weight, relu_gain, gen);
    nn::init::orthogonal_(conv3->weight, relu_gain, gen);
    nn::init::orthogonal_(conv4->weight, 1, gen);
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = ops::relu((*conv1)(input));  // [B, 64, H, W]
    x = ops::relu((*conv2)(x));             // [B, 64, H, W]
    x = ops::relu((*conv3)(x));             // [B, 32, H, W]
    return (*pixel_shuffle)((*conv4)(x));   // [B, r^2, H, W] -> [B, 1, H r, W r]
  }
  std::string type_name() const override { return "Net"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3, conv4;
  std::shared_ptr<nn::PixelShuffle> pixel_shuffle;
};

// data.py's DatasetFromFolder: item i gives (input_transform(y), target_transform(y)) of its Y
// channel y. Batch = items order[start, start + count) as tensors [count, 1, h, w].
struct Pairs {
  Tensor input, target;
};
Pairs load_batch(const data::Dataset& set, const std::vector<int64_t>& order, int64_t start,
                 int64_t count, const data::Compose& input_transform,
                 const data::Compose& target_transform) {
  std::vector<float> inputs, targets;
  data::ImageShape in_shape{}, target_shape{};
  for (int64_t k = start; k < start + count; ++k) {
    data::Image y = set.get(order[size_t(k)]).image;
    data::Image in = input_transform(y), target = target_transform(y);
    in_shape = {in.channels, in.height, in.width};
    target_shape = {target.channels, target.height, target.width};
    inputs.insert(inputs.end(), in.pixels.begin(), in.pixels.end());
    targets.insert(targets.end(), target.pixels.begin(), target.pixels.end());
  }
  return {ops::from_vector(inputs, {count, in_shape[0], in_shape[1], in_shape[2]}),
          ops::from_vector(targets, {count, target_shape[0], target_shape[1], target_shape[2]})};
}

int main(int argc, char** argv) {
  int64_t upscale_factor = 3, batch_size = 64, test_batch_size = 10, epochs = 2;
  int64_t log_interval = 10, steps_per_epoch = 0, test_batches = 0;  // 0: all
  double lr = 0.01;
  uint64_t seed = 123;
  std::string data_dir;  // "": the Debian package's folder
  bool check = false;

  CLI::App app{"pytorch/examples' super_resolution: a sub-pixel CNN on Fashion-MNIST."};
  app.add_option("--upscale_factor", upscale_factor, "super resolution upscale factor")
      ->capture_default_str();
  app.add_option("--batchSize,--batch-size", batch_size, "training batch size")
      ->capture_default_str();
  app.add_option("--testBatchSize,--test-batch-size", test_batch_size, "testing batch size")
      ->capture_default_str();
  app.add_option("--nEpochs,--epochs", epochs, "number of epochs to train for")
      ->capture_default_str();
  app.add_option("--lr", lr, "learning rate")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--log-interval", log_interval, "batches between training status lines")
      ->capture_default_str();
  app.add_option("--steps-per-epoch", steps_per_epoch, "stop an epoch after this many batches")
      ->capture_default_str();
  app.add_option("--test-batches", test_batches, "test batches per evaluation (0: all)")
      ->capture_default_str();
  app.add_option("--data", data_dir, "Fashion-MNIST folder (default: the Debian package's)");
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    VT_CHECK(upscale_factor >= 1 && upscale_factor <= 28,
             "super_resolution: --upscale_factor must be in [1, 28], got {}", upscale_factor);
    VT_CHECK(batch_size >= 1 && test_batch_size >= 1,
             "super_resolution: batch sizes must be positive, got {} and {}", batch_size,
             test_batch_size);
    // data.py: crop_size = calculate_valid_crop_size(28, r); the input is that crop resized to
    // crop_size / r (bilinear, antialiased: torchvision's Resize on a PIL image).
    data::DatasetFiles files = data::open_dataset({.name = "fashion-mnist", .path = data_dir});
    const int64_t crop_size = 28 - 28 % upscale_factor;
    data::Compose target_transform, input_transform;
    target_transform.add(std::make_shared<data::CenterCrop>(crop_size, crop_size));
    input_transform.add(std::make_shared<data::CenterCrop>(crop_size, crop_size))
        .add(
            std::make_shared<data::Resize>(crop_size / upscale_factor, crop_size / upscale_factor));

    vt::Generator gen(seed);
    Net model(upscale_factor, gen);
    nn::optim::Adam optimizer(model.parameters(), {.lr = lr});
    const int64_t n_train = files.train->size(), n_test = files.test->size();
    const int64_t train_batches = (n_train + batch_size - 1) / batch_size;
    ops::InterpolateOptions bicubic_upscaling;  // the baseline the network should beat
    bicubic_upscaling.scale_factor = {double(upscale_factor), double(upscale_factor)};
    bicubic_upscaling.mode = "bicubic";
    std::vector<int64_t> test_order(static_cast<size_t>(n_test));
    for (int64_t i = 0; i < n_test; ++i) test_order[size_t(i)] = i;

    double first_loss = -1, last_losses = 0;
    int64_t counted = 0;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      // train: shuffled, as the original's training_data_loader
      std::vector<int64_t> order = data::permutation(n_train, seed, uint64_t(epoch));
      double epoch_loss = 0;
      int64_t iterations = 0;
      for (int64_t iteration = 1; iteration <= train_batches; ++iteration) {
        if (steps_per_epoch > 0 && iteration > steps_per_epoch) break;
        const int64_t start = (iteration - 1) * batch_size;
        Pairs batch = load_batch(*files.train, order, start, std::min(batch_size, n_train - start),
                                 input_transform, target_transform);
        optimizer.zero_grad();
        Tensor loss = nn::mse_loss(model(batch.input), batch.target);
        loss.backward();
        optimizer.step();
        const double value = loss.item();
        epoch_loss += value, ++iterations;
        if (first_loss < 0) first_loss = value;
        if (epoch == epochs) last_losses += value, ++counted;
        if ((iteration - 1) % log_interval == 0)
          std::printf("===> Epoch[%ld](%ld/%ld): Loss: %.4f\n", long(epoch), long(iteration),
                      long(train_batches), value);
      }
      std::printf("===> Epoch %ld Complete: Avg. Loss: %.4f\n", long(epoch),
                  epoch_loss / double(iterations));

      // test: the average of the batches' PSNR, 10 log10(1 / mse) (pixels in [0, 1])
      vt::NoGradGuard no_grad;
      double avg_psnr = 0, avg_bicubic = 0;
      int64_t tested = 0;
      for (int64_t start = 0; start < n_test; start += test_batch_size) {
        if (test_batches > 0 && tested == test_batches) break;
        Pairs batch =
            load_batch(*files.test, test_order, start, std::min(test_batch_size, n_test - start),
                       input_transform, target_transform);
        const double mse = nn::mse_loss(model(batch.input), batch.target).item();
        Tensor bicubic = ops::interpolate(batch.input, bicubic_upscaling);
        avg_psnr += 10 * std::log10(1 / mse);
        avg_bicubic += 10 * std::log10(1 / nn::mse_loss(bicubic, batch.target).item());
        ++tested;
      }
      std::printf("===> Avg. PSNR: %.4f dB (bicubic upscaling: %.4f dB)\n",
                  avg_psnr / double(tested), avg_bicubic / double(tested));
      const std::string path = "model_epoch_" + std::to_string(epoch) + ".safetensors";
      nn::save_checkpoint(path, model);
      std::printf("Checkpoint saved to %s\n", path.c_str());
    }

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
