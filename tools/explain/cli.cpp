// vitrine-explain's command line (cli.h): its options and flags (CLI11), and the report's table
// of the settings they give.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "tools/explain/cli.h"

namespace vitrine::explain::cli {

void add_options(CLI::App& app, Cli& cli) {
  // A repeated option: the last one wins, as with argparse (`--count 3 --count 2` explains 2).
  // The options that take several values (the images, --mean, --std) collect them all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--checkpoint", cli.checkpoint,
                 "the model: a safetensors checkpoint (Vitrine's, timm's, torchvision's, Hugging "
                 "Face's, DINO's), or random:PRESET, an untrained ViT of a preset initialised "
                 "from --seed (random:vit_small_patch16_224, random:fmnist)")
      ->required();
  app.add_option("--model-config", cli.model_config,
                 "the model's config when the checkpoint has none: a preset "
                 "(vit_small_patch16_224, fmnist, ...) or a JSON file (ours, a vitrine-train "
                 "config, or a Hugging Face config.json)");
  app.add_option("images", cli.images, "image files (PNG, JPEG, BMP)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--dataset", cli.dataset, "explain a data set's test images (fashion-mnist, ...)");
  app.add_option("--data", cli.data, "the data set's folder (default: its usual place)");
  app.add_option("--first", cli.first, "the first test image (--dataset)")->capture_default_str();
  app.add_option("--count", cli.count, "how many test images (--dataset)")->capture_default_str();
  app.add_option("--sample", cli.sample,
                 "--dataset: this many test images drawn at random (with --seed) instead of "
                 "--first/--count; each method also gets a labelled montage, <method>.grid.png")
      ->check(CLI::PositiveNumber);
  app.add_option("--input", cli.input,
                 "a .npy of the model's input [N, C, H, W] (normalised already), used exactly");
  app.add_option("--method", cli.methods,
                 "methods, comma-separated, or all: attention, rollout, grad-rollout, chefer, "
                 "gradcam, saliency, smoothgrad, integrated-gradients; and, by name only, "
                 "activation-max and qkv")
      ->capture_default_str();
  app.add_option("--target", cli.target,
                 "the class explained: predicted, label (--dataset), a class index or name")
      ->capture_default_str();
  app.add_option("--out", cli.out, "the output folder (an earlier output there is replaced)")
      ->capture_default_str();
  app.add_option("--device", cli.device, "cpu or cuda")->capture_default_str();
  app.add_option("--resize", cli.resize,
                 "model: as torchvision's evaluation transforms, the shorter side to the model's "
                 "size (antialiased bilinear), then a centre crop to the model's size; stretch: "
                 "resize to the model's size, whatever the aspect; none: keep their size, cropped "
                 "to a multiple of the patch (--crop); factor:F: scale them by F first "
                 "(factor:0.5, as DINO's notebooks)")
      ->check([](const std::string& v) {
        try {
          return ex::valid_resize(v) ? std::string()
                                     : fmt::format("expected {}, got {}", ex::kResizeValues, v);
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      })
      ->type_name("model|stretch|none|factor:F")
      ->capture_default_str();
  app.add_option("--crop", cli.crop,
                 "--resize none/factor: crop to a multiple of the patch at the centre or, as "
                 "DINO's visualize_attention, at the top left")
      ->check(CLI::IsMember({"center", "topleft"}))
      ->capture_default_str();
  app.add_option("--pos-interp", cli.pos_interp,
                 "position embedding for inputs of another size: size (timm: bicubic to the "
                 "grid) or dino (DINO's interpolate_pos_encoding)")
      ->check(CLI::IsMember({"size", "dino"}))
      ->capture_default_str();
  app.add_option("--mean", cli.mean,
                 "input normalisation mean per channel (default: the "
                 "checkpoint's)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--normalise", cli.normalise,
                 "input normalisation: checkpoint (its metadata, else the default for its "
                 "naming), imagenet, or none (the pixels in [0, 1] as they are, as DINO's "
                 "visualize_attention feeds them)")
      ->check(CLI::IsMember({"checkpoint", "imagenet", "none"}));
  app.add_option("--std", cli.std, "input normalisation std per channel")
      ->check(CLI::PositiveNumber)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--layer", cli.opt.layer,
                 "a ViT's attention, gradcam: the block (negative from the end)")
      ->capture_default_str();
  app.add_option("--gradcam-layer", cli.gradcam_layer,
                 "a model other than a ViT: the submodule whose activations Grad-CAM weighs, by "
                 "its dotted name (a ResNet: its last stage, layer3 or layer4, by default)");
  app.add_option("--cell", cli.cell,
                 "a model other than a ViT (no patches): the side in pixels of the squares the "
                 "grid maps average over and --evaluate deletes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--head", cli.opt.head, "attention: the head, -1 for the mean")
      ->capture_default_str();
  app.add_option("--threshold", cli.opt.threshold,
                 "attention: DINO's mask keeping this fraction of the attention mass (0: none)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--head-fusion", cli.head_fusion, "rollout: mean, max or min")
      ->check(CLI::IsMember({"mean", "max", "min"}))
      ->capture_default_str();
  app.add_option("--discard-ratio", cli.opt.discard_ratio,
                 "rollout, grad-rollout: fraction of the smallest attention entries dropped")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--steps", cli.opt.steps, "integrated-gradients: points on the path")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--ig-method", cli.ig_method, "integrated-gradients: gausslegendre or trapezoid")
      ->check(CLI::IsMember({"gausslegendre", "trapezoid"}))
      ->capture_default_str();
  app.add_option("--baseline", cli.baseline,
                 "integrated-gradients: black (a black image) or blur (Gaussian blur, kernel 11, "
                 "sigma 5)")
      ->check(CLI::IsMember({"black", "blur"}))
      ->capture_default_str();
  app.add_option("--samples", cli.opt.samples, "smoothgrad: noisy samples")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--sigma", cli.opt.sigma,
                 "smoothgrad: noise level, a fraction of the input's value range")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--init", cli.init,
                 "--checkpoint random:PRESET's initialisation: timm (the default), torchvision, "
                 "vit-pytorch or dino (DINO's own, as its visualize_attention's random=True "
                 "draws it)")
      ->check(CLI::IsMember({"timm", "torchvision", "vit-pytorch", "dino"}));
  app.add_option("--seed", cli.opt.seed,
                 "the seed of smoothgrad's noise, --sample's draw, activation-max's start and "
                 "--checkpoint random:PRESET's initialisation")
      ->capture_default_str();
  app.add_option("--patch", cli.patch,
                 "qkv: the query patch as ROW,COL on the grid (default: the centre)");
  app.add_option("--neuron", cli.opt.neuron,
                 "activation-max: maximise this channel of block --layer's MLP hidden layer "
                 "instead of the target's logit (-1: the logit)")
      ->capture_default_str();
  app.add_option("--am-steps", cli.opt.am_steps, "activation-max: gradient-ascent steps")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--am-lr", cli.opt.am_lr,
                 "activation-max: the step, a fraction of the pixel range per normalised gradient")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--jitter", cli.opt.am_jitter,
                 "activation-max: shift the image by up to this many pixels each step (-1: "
                 "the image's side / 28, 8 at 224)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--blur-every", cli.opt.am_blur_every,
                 "activation-max: a Gaussian blur every this many steps (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--blur-sigma", cli.opt.am_blur_sigma, "activation-max: the blur's sigma, pixels")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--l2", cli.opt.am_l2, "activation-max: the L2 decay's weight")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--colormap", cli.colormap, "inferno, jet or viridis")
      ->check(CLI::IsMember({"inferno", "jet", "viridis"}))
      ->capture_default_str();
  app.add_option("--alpha", cli.alpha, "heatmap opacity over the image")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--upsample", cli.upsample,
                 "how a patch-grid map is brought to the image's size: bilinear, or nearest "
                 "(each patch one block, as DINO's visualize_attention)")
      ->check(CLI::IsMember({"bilinear", "nearest"}))
      ->capture_default_str();
  app.add_option("--style", cli.style,
                 "how a map is drawn: overlay (a heat map over the image, --colormap, --alpha) or "
                 "mask (the image multiplied by the map scaled to [0, 1])")
      ->check(CLI::IsMember({"overlay", "mask"}))
      ->capture_default_str();
  app.add_option("--distance-norm", cli.distance_norm,
                 "the mean attention distance's weights: raw (the attention as it is, the ViT "
                 "paper's) or patches (each query's row renormalised over the patches, the class "
                 "token dropped)")
      ->check(CLI::IsMember({"raw", "patches"}))
      ->capture_default_str();
  app.add_flag("--evaluate", cli.evaluate,
               "measure the methods instead of drawing them: deletion/insertion, the pointing "
               "game and energy in the box (on fashion-mnist-pasted), sanity checks");
  app.add_option("--sanity-count", cli.sanity_count,
                 "--evaluate: images for the cascading-randomisation checks (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--patches-per-step", cli.patches_per_step,
                 "--evaluate: patches deleted or inserted per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--removal", cli.removal,
                 "--evaluate: what replaces a deleted patch: zero (black), mean or blur")
      ->check(CLI::IsMember({"zero", "mean", "blur"}))
      ->capture_default_str();
  app.add_option("--boxes", cli.boxes,
                 "--evaluate: the objects' boxes for the pointing game and the energy in the box, "
                 "in each image's own pixels: a CSV (image,x0,y0,x1,y1[,label], x1 and y1 past "
                 "the box), a JSON ({\"image.jpg\": [[x0, y0, x1, y1], ...]}) or tiny-imagenet's "
                 "val_annotations.txt (read by itself for such a folder)");
  app.add_flag("--serve", cli.serve,
               "serve a page (and a JSON API) where you drop your own images and see every "
               "method, layer and head: http://127.0.0.1:8080/ by default (Ctrl-C stops)");
  app.add_option("--host", cli.http.host,
                 "--serve: the address to listen on (another than 127.0.0.1 opens the server to "
                 "other machines, with a warning)")
      ->capture_default_str();
  app.add_option("--port", cli.http.port, "--serve: the port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--threads", cli.http.threads, "--serve: threads reading and writing requests")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-body-mb", cli.max_body_mb, "--serve: the largest request body, MB")
      ->check(CLI::Range(0.001, 1024.0))
      ->capture_default_str();
  app.add_option("--max-image-side", cli.limits.max_image_side,
                 "--serve: the largest image width or height, pixels (read from the header "
                 "before decoding)")
      ->check(CLI::Range(int64_t{1}, int64_t{32768}))
      ->capture_default_str();
  app.add_option("--request-timeout", cli.limits.request_timeout_s,
                 "--serve: seconds a request may wait for the model and run")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--queue", cli.limits.queue,
                 "--serve: requests that may wait while one runs; more get 503 with Retry-After")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--max-steps", cli.limits.max_steps,
                 "--serve: the most integrated-gradients steps or SmoothGrad samples a request "
                 "may ask")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--max-attention-mb", cli.limits.max_attention_mb,
                 "--serve: the most memory one image's attention and its gradients may take "
                 "(bounds images kept at their own size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
}

std::vector<std::pair<std::string, std::string>> report_settings(
    const Cli& cli, const ex::LoadedModel& l, const ex::Options& opt,
    const std::vector<ex::Method>& methods) {
  std::vector<std::pair<std::string, std::string>> s = {
      {"model", l.spec.describe()},
      {"methods", cli.methods},
      {"target", cli.target},
      {"layer (attention, gradcam)",
       l.vit ? std::to_string(opt.layer) : fmt::format("{} (gradcam)", l.gradcam_layer)},
      {"head (attention)", opt.head == -1 ? "mean" : std::to_string(opt.head)},
      {"threshold (attention)", fmt::format("{}", opt.threshold)},
      {"head fusion (rollout)", cli.head_fusion},
      {"discard ratio (rollout, grad-rollout)", fmt::format("{}", opt.discard_ratio)},
      {"samples, sigma (smoothgrad)", fmt::format("{}, {}", opt.samples, opt.sigma)},
      {"steps, rule, baseline (integrated-gradients)",
       fmt::format("{}, {}, {}", opt.steps, cli.ig_method, cli.baseline)},
      {"normalisation", fmt::format("mean {} std {} from {}", l.mean, l.std, l.normalisation)},
      {"input size, position embedding", fmt::format("--resize {}, --crop {}, --pos-interp {}",
                                                     cli.resize, cli.crop, cli.pos_interp)},
      {"colormap, alpha", fmt::format("{}, {}", cli.colormap, cli.alpha)},
      {"upsampling, style", fmt::format("{}, {}", cli.upsample, cli.style)},
      {"attention distance weights", cli.distance_norm},
  };
  if (std::find(methods.begin(), methods.end(), ex::Method::ActivationMax) != methods.end())
    s.emplace_back(
        "activation-max: objective, steps, lr, jitter, blur every, blur sigma, l2, seed",
        fmt::format("{}, {}, {}, {}, {}, {}, {}, {}",
                    opt.neuron >= 0 ? fmt::format("block {} MLP channel {}", opt.layer, opt.neuron)
                                    : std::string("the target's logit"),
                    opt.am_steps, opt.am_lr,
                    opt.am_jitter < 0 ? "auto" : std::to_string(opt.am_jitter), opt.am_blur_every,
                    opt.am_blur_sigma, opt.am_l2, opt.seed));
  if (std::find(methods.begin(), methods.end(), ex::Method::Qkv) != methods.end())
    s.emplace_back(
        "qkv: block, query patch",
        fmt::format("{}, {}", opt.layer,
                    opt.patch_row < 0 ? std::string("the centre")
                                      : fmt::format("({}, {})", opt.patch_row, opt.patch_col)));
  return s;
}

}  // namespace vitrine::explain::cli
