// vitrine-explain's command line (cli.h): its options and flags (CLI11), and the report's table
// of the settings they give.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <variant>

#include "tools/explain/cli.h"

namespace vitrine::explain::cli {

namespace {

/// The check of an entry's range on the command line (CLI11's own where it has one).
CLI::Validator range_check(const ex::OptionSpec& s) {
  const bool lo = std::isfinite(s.min), hi = std::isfinite(s.max);
  if (lo && hi && !s.min_open && !s.max_open)
    return s.type == ex::OptionType::Integer
               ? CLI::Range(static_cast<int64_t>(s.min), static_cast<int64_t>(s.max))
               : CLI::Range(s.min, s.max);
  if (lo && !hi && s.min == 0) return s.min_open ? CLI::PositiveNumber : CLI::NonNegativeNumber;
  const std::string range =
      fmt::format("{}{}, {}{}", s.min_open ? "(" : "[", s.min, s.max, s.max_open ? ")" : "]");
  return CLI::Validator(
      [s, range](std::string& input) {
        double x = 0;
        if (!CLI::detail::lexical_cast(input, x)) return fmt::format("{} is not a number", input);
        const bool below = x < s.min || (s.min_open && x == s.min);
        const bool above = x > s.max || (s.max_open && x == s.max);
        return below || above ? fmt::format("Value {} not in {}", input, range) : std::string();
      },
      range);
}

/// One entry as a CLI11 option bound to its field of values.
void add_request_option(CLI::App& app, const ex::OptionSpec& s, ex::RequestValues& values) {
  std::visit(
      [&](auto get) {
        auto& field = get(values);
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, bool>) {
          return;  // the server's alone (kServerOption)
        } else {
          CLI::Option* o = app.add_option("--" + s.name, field, s.help);
          if constexpr (std::is_same_v<T, std::vector<float>>)
            o->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
          else if (const nlohmann::json d = ex::option_value(s, values);
                   !(d.is_string() && d.get<std::string>().empty()))
            o->capture_default_str();
          if (!s.choices.empty()) o->check(CLI::IsMember(s.choices));
          if (std::isfinite(s.min) || std::isfinite(s.max)) o->check(range_check(s));
          if (s.check) o->check([check = s.check](const std::string& v) { return check(v); });
          if (!s.value_name.empty()) o->type_name(s.value_name);
        }
      },
      s.field);
}

/// The images and the model: where they come from, where the output goes.
void add_input_options(CLI::App& app, Cli& cli) {
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
  app.add_option("--out", cli.out, "the output folder (an earlier output there is replaced)")
      ->capture_default_str();
  app.add_option("--device", cli.device, "cpu or cuda")->capture_default_str();
  app.add_option("--init", cli.init,
                 "--checkpoint random:PRESET's initialisation: timm (the default), torchvision, "
                 "vit-pytorch or dino (DINO's own, as its visualize_attention's random=True "
                 "draws it)")
      ->check(CLI::IsMember({"timm", "torchvision", "vit-pytorch", "dino"}));
}

void add_evaluate_options(CLI::App& app, Cli& cli) {
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
}

void add_serve_options(CLI::App& app, Cli& cli) {
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

}  // namespace

void add_request_options(CLI::App& app, ex::RequestValues& values) {
  for (const ex::OptionSpec& s : ex::request_options())
    if (s.scope & ex::kCliOption) add_request_option(app, s, values);
}

void add_options(CLI::App& app, Cli& cli) {
  // A repeated option: the last one wins, as with argparse (`--count 3 --count 2` explains 2).
  // The options that take several values (the images, --mean, --std) collect them all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_input_options(app, cli);
  add_request_options(app, cli);
  add_evaluate_options(app, cli);
  add_serve_options(app, cli);
  app.add_flag("--list-options", cli.list_options,
               "print the request options (the flags above that the server also reads as JSON "
               "fields) as a Markdown table, and exit");
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
