// pytorch/examples' fast_neural_style/neural_style/neural_style.py in Vitrine: Johnson et al.'s
// perceptual-loss style transfer. `train` fits a TransformerNet (fast_neural_style.h, upstream's
// transformer_net.py) to a folder of images, so that a frozen VGG16's relu2_2 activations of its
// output stay those of the input (content, weight 1e5) while the Gram matrices of relu1_2,
// relu2_2, relu3_3 and relu4_3 become the style image's (style, weight 1e10); Adam at lr 1e-3.
// `eval` stylizes one image with a trained model and writes it as a PNG. Its PyTorch twin:
// fast_neural_style.py, beside it. The test suite trains it for a few steps on small pattern
// images it writes with --synthetic (ctest -R examples/fast_neural_style).
//   example_fast_neural_style train --dataset DIR --style-image FILE --save-model-dir DIR
//       [--epochs 2] [--batch-size 4] [--image-size 256] [--style-size N] [--vgg FILE]
//       [--synthetic N] [--check] ...
//   example_fast_neural_style eval --content-image FILE --model FILE --output-image FILE
//       [--content-scale F]
// A model trained by the twin (or by upstream) loads after
//   /usr/bin/python3 tools/convert/convert.py model.pth model.safetensors --by-name
// and --vgg takes torchvision's ImageNet vgg16 weights converted the same way.
#include "fast_neural_style.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "nn/data/image_grid.h"

namespace fs = std::filesystem;
using namespace fast_neural_style;
namespace data = vitrine::nn::data;

namespace {

// Upstream's utils.load_image: RGB, resized to size x size or scaled down by `scale` (PIL's
// LANCZOS there, an antialiased bicubic here); then ToTensor and * 255: [1, 3, H, W] in [0, 255].
Tensor load_image(const std::string& filename, std::optional<int64_t> size = std::nullopt,
                  std::optional<double> scale = std::nullopt) {
  data::Image img = data::read_image(filename, 3);
  if (size)
    img = data::resize(img, *size, *size, data::Interpolation::Bicubic);
  else if (scale)
    img = data::resize(img, int64_t(double(img.height) / *scale),
                       int64_t(double(img.width) / *scale), data::Interpolation::Bicubic);
  return ops::from_vector(img.pixels, {1, 3, img.height, img.width}) * 255.0;
}

// Upstream's utils.save_image: one image [3, H, W] in [0, 255], clamped and truncated to 8 bits
// (numpy's astype("uint8")), as a PNG. vt::save_image rounds v * 255, which keeps k / 255.
void save_image(const std::string& filename, const Tensor& image) {
  std::vector<float> v = ops::clamp(image, 0.0, 255.0).to_vector<float>();
  for (float& x : v) x = std::trunc(x) / 255;
  vt::save_image(ops::from_vector(v, image.shape()), filename, /*nrow=*/1, /*padding=*/0);
}

// --synthetic: count content images of size x size into dataset/patterns/ (an ImageFolder
// class), gradients and a disk that move with the index, and a style image of coloured checks
// and stripes. Integer formulas, so the twin writes the same pixels.
void write_patterns(const std::string& dataset, const std::string& style_image, int64_t count,
                    int64_t size) {
  auto png = [size](const std::string& path, auto pixel) {
    std::vector<float> v(size_t(3 * size * size));
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        const std::array<int64_t, 3> rgb = pixel(x, y);
        for (int64_t c = 0; c < 3; ++c) v[size_t((c * size + y) * size + x)] = float(rgb[c]) / 255;
      }
    vt::save_image(ops::from_vector(v, {1, 3, size, size}), path, 1, 0);
  };
  fs::create_directories(fs::path(dataset) / "patterns");
  for (int64_t i = 0; i < count; ++i) {
    const int64_t cx = (i * 7 + 3) % size, cy = (i * 13 + 5) % size, r = size / 4 + i % 5;
    png(fmt::format("{}/patterns/{:03d}.png", dataset, i), [=](int64_t x, int64_t y) {
      const bool disk = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
      return std::array<int64_t, 3>{x * 255 / (size - 1), y * 255 / (size - 1),
                                    disk ? 255 - (40 * i) % 256 : (40 * i) % 256};
    });
  }
  if (fs::path(style_image).has_parent_path())
    fs::create_directories(fs::path(style_image).parent_path());
  png(style_image, [](int64_t x, int64_t y) {
    if ((x + y) % 8 < 2) return std::array<int64_t, 3>{240, 200, 30};
    return (x / 4 + y / 4) % 2 ? std::array<int64_t, 3>{230, 60, 40}
                               : std::array<int64_t, 3>{30, 90, 200};
  });
}

std::string ctime_now() {
  const std::time_t now = std::time(nullptr);
  std::string s = std::ctime(&now);
  return s.substr(0, s.size() - 1);  // without its '\n'
}

struct TrainArgs {
  int64_t epochs = 2, batch_size = 4, image_size = 256, log_interval = 500;
  int64_t checkpoint_interval = 2000, synthetic = 0;
  std::optional<int64_t> style_size;
  std::string dataset, style_image, save_model_dir, checkpoint_model_dir, vgg;
  uint64_t seed = 42;
  double content_weight = 1e5, style_weight = 1e10, lr = 1e-3;
  bool check = false;
};

int train(const TrainArgs& args) {
  vt::Generator gen(args.seed);
  fs::create_directories(args.save_model_dir);  // upstream's check_paths
  if (!args.checkpoint_model_dir.empty()) fs::create_directories(args.checkpoint_model_dir);
  if (args.synthetic > 0)
    write_patterns(args.dataset, args.style_image, args.synthetic, args.image_size);

  // Resize(image_size) (the shorter side), CenterCrop(image_size), ToTensor; * 255 in the loop.
  data::Compose transform;
  transform.add(std::make_shared<data::Resize>(data::Resize::shorter_side(args.image_size)));
  transform.add(std::make_shared<data::CenterCrop>(args.image_size, args.image_size));
  auto train_dataset = std::make_shared<data::ImageFolder>(args.dataset);
  data::DataLoader train_loader(train_dataset, transform,
                                {.batch_size = args.batch_size, .shuffle = false});

  TransformerNet transformer(gen);
  nn::optim::Adam optimizer(transformer.parameters(), {.lr = args.lr});

  Vgg16 vgg(gen, /*requires_grad=*/false);
  if (!args.vgg.empty()) {
    // torchvision's vgg16 state dict: features.0 ... features.21 are used, the rest (features.24
    // on, the classifier) is not part of this network.
    nn::LoadResult r = nn::load_state_dict(vgg, nn::read_safetensors(args.vgg).tensors, false);
    VT_CHECK(r.missing.empty() && r.mismatched.empty(),
             "--vgg {}: not torchvision's vgg16 weights: {}{}{}", args.vgg,
             r.missing.empty() ? "" : fmt::format("missing {}", fmt::join(r.missing, ", ")),
             r.missing.empty() || r.mismatched.empty() ? "" : "; ",
             r.mismatched.empty()
                 ? ""
                 : fmt::format("shapes differ: {}", fmt::join(r.mismatched, "; ")));
  } else {
    std::printf("note: no --vgg: the VGG16 has random weights (torchvision's initialisation)\n");
  }

  // The style's Gram matrices, one per VGG slice, [1, C, C] (upstream repeats the style image
  // batch_size times and takes the first n_batch: the same matrices).
  std::array<Tensor, 4> gram_style;
  {
    vt::NoGradGuard no_grad;
    Tensor style = load_image(args.style_image, args.style_size);
    VggOutputs features_style = vgg.slices(normalize_batch(style));
    for (size_t i = 0; i < 4; ++i) gram_style[i] = gram_matrix(features_style.all()[i]);
  }

  double first_epoch_total = 0, last_epoch_total = 0;
  for (int64_t e = 0; e < args.epochs; ++e) {
    transformer.train();
    double agg_content_loss = 0, agg_style_loss = 0;
    int64_t count = 0, batch_id = 0;
    train_loader.start_epoch(e);
    for (; auto batch = train_loader.next(); ++batch_id) {
      const int64_t n_batch = batch->images.size(0);
      count += n_batch;
      optimizer.zero_grad();

      Tensor x = batch->images * 255.0;
      Tensor y = transformer(x);

      y = normalize_batch(y);
      x = normalize_batch(x);

      VggOutputs features_y = vgg.slices(y);
      VggOutputs features_x;
      {
        vt::NoGradGuard no_grad;     // x needs no graph (upstream's has none either: nothing in it
        features_x = vgg.slices(x);  // requires grad)
      }

      Tensor content_loss =
          args.content_weight * nn::mse_loss(features_y.relu2_2, features_x.relu2_2);

      Tensor style_loss = ops::scalar(0.0);
      for (size_t i = 0; i < 4; ++i) {
        Tensor gm_y = gram_matrix(features_y.all()[i]);
        style_loss = style_loss + nn::mse_loss(gm_y, gram_style[i].expand(gm_y.shape()));
      }
      style_loss = style_loss * args.style_weight;

      Tensor total_loss = content_loss + style_loss;
      total_loss.backward();
      optimizer.step();

      agg_content_loss += content_loss.item();
      agg_style_loss += style_loss.item();

      if ((batch_id + 1) % args.log_interval == 0)
        std::printf("%s\tEpoch %ld:\t[%ld/%ld]\tcontent: %.6f\tstyle: %.6f\ttotal: %.6f\n",
                    ctime_now().c_str(), long(e + 1), long(count), long(train_dataset->size()),
                    agg_content_loss / double(batch_id + 1), agg_style_loss / double(batch_id + 1),
                    (agg_content_loss + agg_style_loss) / double(batch_id + 1));

      if (!args.checkpoint_model_dir.empty() && (batch_id + 1) % args.checkpoint_interval == 0) {
        transformer.eval();
        const std::string path = fmt::format("{}/ckpt_epoch_{}_batch_id_{}.safetensors",
                                             args.checkpoint_model_dir, e, batch_id + 1);
        nn::save_checkpoint(path, transformer);
        transformer.train();
      }
    }
    const double mean_total = (agg_content_loss + agg_style_loss) / double(batch_id);
    if (e == 0) first_epoch_total = mean_total;
    last_epoch_total = mean_total;
  }

  // save model
  transformer.eval();
  const std::string save_model_path =
      fmt::format("{}/epoch_{}_{:g}_{:g}.safetensors", args.save_model_dir, args.epochs,
                  args.content_weight, args.style_weight);
  nn::save_checkpoint(save_model_path, transformer);
  std::printf("\nDone, trained model saved at %s\n", save_model_path.c_str());

  std::printf("mean total loss: first epoch %.1f, last epoch %.1f\n", first_epoch_total,
              last_epoch_total);
  if (args.check && !(last_epoch_total < first_epoch_total)) {
    std::fprintf(stderr, "error: the total loss did not fall (%.1f -> %.1f)\n", first_epoch_total,
                 last_epoch_total);
    return 1;
  }
  return 0;
}

struct EvalArgs {
  std::string content_image, output_image, model;
  std::optional<double> content_scale;
};

int stylize(const EvalArgs& args) {
  Tensor content_image = load_image(args.content_image, std::nullopt, args.content_scale);
  vt::NoGradGuard no_grad;
  vt::Generator gen(0);
  TransformerNet style_model(gen);
  nn::NamedTensors state_dict = nn::read_safetensors(args.model).tensors;
  // drop the running_* statistics that InstanceNorm saved in PyTorch before 0.4 (upstream's
  // saved models hold them)
  const std::regex deprecated(R"(in\d+\.running_(mean|var)$)");
  std::erase_if(state_dict,
                [&](const auto& kv) { return std::regex_search(kv.first, deprecated); });
  nn::load_state_dict(style_model, state_dict);
  style_model.eval();
  Tensor output = style_model(content_image);
  save_image(args.output_image, output.select(0, 0));
  std::printf("wrote %s (%ld x %ld)\n", args.output_image.c_str(), long(output.size(3)),
              long(output.size(2)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"parser for fast-neural-style (pytorch/examples' neural_style.py)"};
  app.require_subcommand(1);

  TrainArgs t;
  CLI::App* train_cmd = app.add_subcommand("train", "parser for training arguments");
  train_cmd->add_option("--epochs", t.epochs, "number of training epochs")->capture_default_str();
  train_cmd->add_option("--batch-size", t.batch_size, "batch size for training")
      ->capture_default_str();
  train_cmd
      ->add_option("--dataset", t.dataset,
                   "path to training dataset, the path should point to a folder containing "
                   "another folder with all the training images")
      ->required();
  train_cmd->add_option("--style-image", t.style_image, "path to style-image")->required();
  train_cmd
      ->add_option("--save-model-dir", t.save_model_dir,
                   "path to folder where trained model will be saved.")
      ->required();
  train_cmd->add_option("--checkpoint-model-dir", t.checkpoint_model_dir,
                        "path to folder where checkpoints of trained models will be saved");
  train_cmd->add_option("--image-size", t.image_size, "size of training images")
      ->capture_default_str();
  train_cmd->add_option("--style-size", t.style_size,
                        "size of style-image, default is the original size of style image");
  train_cmd->add_option("--seed", t.seed, "random seed for training")->capture_default_str();
  train_cmd->add_option("--content-weight", t.content_weight, "weight for content-loss")
      ->capture_default_str();
  train_cmd->add_option("--style-weight", t.style_weight, "weight for style-loss")
      ->capture_default_str();
  train_cmd->add_option("--lr", t.lr, "learning rate")->capture_default_str();
  train_cmd
      ->add_option("--log-interval", t.log_interval,
                   "batches between training loss lines (upstream's help says images)")
      ->capture_default_str();
  train_cmd
      ->add_option("--checkpoint-interval", t.checkpoint_interval,
                   "number of batches after which a checkpoint of the trained model will be "
                   "created")
      ->capture_default_str();
  train_cmd->add_option("--vgg", t.vgg,
                        "torchvision's vgg16 weights as .safetensors (default: random weights)");
  train_cmd->add_option("--synthetic", t.synthetic,
                        "first write this many pattern images into DATASET/patterns/ and a "
                        "pattern style image at --style-image");
  train_cmd->add_flag("--check", t.check,
                      "exit 1 unless the last epoch's mean total loss is below the first's");

  EvalArgs ev;
  CLI::App* eval_cmd = app.add_subcommand("eval", "parser for evaluation/stylizing arguments");
  eval_cmd
      ->add_option("--content-image", ev.content_image, "path to content image you want to stylize")
      ->required();
  eval_cmd->add_option("--content-scale", ev.content_scale,
                       "factor for scaling down the content image");
  eval_cmd->add_option("--output-image", ev.output_image, "path for saving the output image")
      ->required();
  eval_cmd->add_option("--model", ev.model, "saved model to be used for stylizing the image")
      ->required();
  CLI11_PARSE(app, argc, argv);

  try {
    return train_cmd->parsed() ? train(t) : stylize(ev);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
