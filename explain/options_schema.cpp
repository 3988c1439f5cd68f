// One request's options, named once (options_schema.h): the table, its JSON reading and report.
#include "explain/options_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "explain/model.h"
#include "nn/json.h"

namespace vitrine::explain {

using json = nlohmann::json;
using R = RequestValues;

namespace {

/// resize's check: empty, or what is wrong (the command line's words, as it always said them).
std::string resize_check(const std::string& v) {
  try {
    if (valid_resize(v)) return "";
  } catch (const Error& e) {
    return e.what();  // a malformed factor:F, named
  }
  return fmt::format("expected {}, got {}", kResizeValues, v);
}

/// The method names for --method's help: the registry's (method.h) relevance maps, then those
/// named only.
std::string method_list() {
  std::vector<std::string> extra;
  for (const Method* m : methods())
    if (m->extra()) extra.emplace_back(m->name());
  return fmt::format("methods, comma-separated, or all: {}; and, by name only, {}",
                     fmt::join(method_names(false), ", "), fmt::join(extra, " and "));
}

ServerRange max_steps_range(const ServerContext& c, double min, const char* what) {
  return {min, static_cast<double>(c.max_steps),
          fmt::format("{} (--max-steps {})", what, c.max_steps)};
}

/// What is explained, and the attention methods' options.
std::vector<OptionSpec> what_options() {
  return {
      {.name = "method",
       .aliases = {"methods"},
       .type = OptionType::Methods,
       .field = +[](R& r) -> std::string& { return r.methods; },
       .help = method_list()},
      {.name = "target",
       .type = OptionType::Class,
       .field = +[](R& r) -> std::string& { return r.target; },
       .help = "the class explained: predicted, label (--dataset), a class index or name (JSON: "
               "-1 for the predicted class, an index or a name)"},
      {.name = "layer",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.layer; },
       .help = "a ViT's attention, gradcam: the block (negative from the end)",
       .server_range = +[](const ServerContext& c) -> ServerRange {
         return {-static_cast<double>(c.depth), static_cast<double>(c.depth - 1),
                 "a block, negative from the end, for a model of that many blocks"};
       }},
      {.name = "head",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.head; },
       .help = "attention: the head, -1 for the mean",
       .server_range = +[](const ServerContext& c) -> ServerRange {
         return {-1, static_cast<double>(c.heads - 1), "a head, or -1 for the mean over heads"};
       }},
      {.name = "threshold",
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.opt.threshold; },
       .help = "attention: DINO's mask keeping this fraction of the attention mass (0: none)",
       .min = 0,
       .max = 1,
       .what = "the fraction of attention kept"},
      {.name = "head-fusion",
       .aliases = {"head_fusion"},
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.head_fusion; },
       .help = "rollout: mean, max or min",
       .choices = {"mean", "max", "min"}},
      {.name = "discard-ratio",
       .aliases = {"discard_ratio"},
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.opt.discard_ratio; },
       .help = "rollout, grad-rollout: fraction of the smallest attention entries dropped",
       .min = 0,
       .max = 1,
       .max_open = true,
       .what = "the fraction discarded"},
  };
}

/// The input-gradient methods' options (integrated gradients, SmoothGrad) and the seed.
std::vector<OptionSpec> gradient_options() {
  return {
      {.name = "steps",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.steps; },
       .help = "integrated-gradients: points on the path",
       .min = 1,
       .max = 100000,
       .server_range = +[](const ServerContext& c) { return max_steps_range(c, 1, "steps"); }},
      {.name = "ig-method",
       .aliases = {"ig_rule"},
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.ig_method; },
       .help = "integrated-gradients: gausslegendre or trapezoid",
       .choices = {"gausslegendre", "trapezoid"}},
      {.name = "baseline",
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.baseline; },
       .help = "integrated-gradients: black (a black image) or blur (Gaussian blur, kernel 11, "
               "sigma 5)",
       .choices = {"black", "blur"}},
      {.name = "samples",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.samples; },
       .help = "smoothgrad: noisy samples",
       .min = 1,
       .max = 100000,
       .server_range = +[](const ServerContext& c) { return max_steps_range(c, 1, "samples"); }},
      {.name = "sigma",
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.opt.sigma; },
       .help = "smoothgrad: noise level, a fraction of the input's value range",
       .min = 0,
       .what = "the noise level",
       .server_range = +[](const ServerContext&) -> ServerRange {
         return {0, 10, "the noise level"};
       }},
      {.name = "seed",
       .type = OptionType::Integer,
       .field = +[](R& r) -> uint64_t& { return r.opt.seed; },
       .help = "the seed of smoothgrad's noise, --sample's draw, activation-max's start and "
               "--checkpoint random:PRESET's initialisation",
       .min = 0,
       .server_range = +[](const ServerContext&) -> ServerRange {
         return {0, 9007199254740992.0, "the seed of SmoothGrad's noise"};
       }},
  };
}

/// The options of the methods named only: qkv's patch, activation-max's.
std::vector<OptionSpec> extra_options() {
  return {
      {.name = "patch",
       .type = OptionType::Patch,
       .field = +[](R& r) -> std::string& { return r.patch; },
       .help = "qkv: the query patch as ROW,COL on the grid (default: the centre; JSON: [row, "
               "column])"},
      {.name = "neuron",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.neuron; },
       .help = "activation-max: maximise this channel of block --layer's MLP hidden layer "
               "instead of the target's logit (-1: the logit)",
       .server_range = +[](const ServerContext& c) -> ServerRange {
         return {-1, static_cast<double>(c.mlp_dim - 1),
                 "activation-max: an MLP channel of the block, or -1 for the logit"};
       }},
      {.name = "am-steps",
       .aliases = {"am_steps"},
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.am_steps; },
       .help = "activation-max: gradient-ascent steps",
       .min = 0,
       .max = 100000,
       .server_range =
           +[](const ServerContext& c) { return max_steps_range(c, 0, "activation-max steps"); }},
      {.name = "am-lr",
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.opt.am_lr; },
       .help = "activation-max: the step, a fraction of the pixel range per normalised gradient",
       .min = 0,
       .min_open = true,
       .what = "activation-max's step"},
      {.name = "jitter",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.am_jitter; },
       .help = "activation-max: shift the image by up to this many pixels each step (-1: the "
               "image's side / 28, 8 at 224)",
       .min = -1,
       .max = 1 << 20,
       .what = "activation-max's jitter, pixels"},
      {.name = "blur-every",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.opt.am_blur_every; },
       .help = "activation-max: a Gaussian blur every this many steps (0: none)",
       .min = 0,
       .what = "activation-max's steps between blurs"},
      {.name = "blur-sigma",
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.opt.am_blur_sigma; },
       .help = "activation-max: the blur's sigma, pixels",
       .min = 0,
       .min_open = true,
       .what = "activation-max's blur sigma"},
      {.name = "l2",
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.opt.am_l2; },
       .help = "activation-max: the L2 decay's weight",
       .min = 0,
       .what = "activation-max's L2 weight"},
  };
}

/// How an image becomes the model's input, and a model other than a ViT.
std::vector<OptionSpec> input_options() {
  return {
      {.name = "resize",
       .type = OptionType::Text,
       .field = +[](R& r) -> std::string& { return r.resize; },
       .help = "model: as torchvision's evaluation transforms, the shorter side to the model's "
               "size (antialiased bilinear), then a centre crop to the model's size; stretch: "
               "resize to the model's size, whatever the aspect; none: keep their size, cropped "
               "to a multiple of the patch (--crop); factor:F: scale them by F first "
               "(factor:0.5, as DINO's notebooks)",
       .check = resize_check,
       .value_name = "model|stretch|none|factor:F"},
      {.name = "crop",
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.crop; },
       .help = "--resize none/factor: crop to a multiple of the patch at the centre or, as "
               "DINO's visualize_attention, at the top left",
       .choices = {"center", "topleft"}},
      {.name = "pos-interp",
       .aliases = {"pos_interp"},
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.pos_interp; },
       .help = "position embedding for inputs of another size: size (timm: bicubic to the "
               "grid) or dino (DINO's interpolate_pos_encoding)",
       .choices = {"size", "dino"}},
      {.name = "normalise",
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.normalise; },
       .help = "input normalisation: checkpoint (its metadata, else the default for its "
               "naming), imagenet, or none (the pixels in [0, 1] as they are, as DINO's "
               "visualize_attention feeds them)",
       .choices = {"checkpoint", "imagenet", "none"}},
      {.name = "mean",
       .type = OptionType::Numbers,
       .field = +[](R& r) -> std::vector<float>& { return r.mean; },
       .help = "input normalisation mean per channel (default: the checkpoint's)",
       .scope = kCliOption},
      {.name = "std",
       .type = OptionType::Numbers,
       .field = +[](R& r) -> std::vector<float>& { return r.std; },
       .help = "input normalisation std per channel",
       .min = 0,
       .min_open = true,
       .scope = kCliOption},
      {.name = "gradcam-layer",
       .type = OptionType::Text,
       .field = +[](R& r) -> std::string& { return r.gradcam_layer; },
       .help = "a model other than a ViT: the submodule whose activations Grad-CAM weighs, by "
               "its dotted name (a ResNet: its last stage, layer3 or layer4, by default)",
       .scope = kCliOption},
      {.name = "cell",
       .type = OptionType::Integer,
       .field = +[](R& r) -> int64_t& { return r.cell; },
       .help = "a model other than a ViT (no patches): the side in pixels of the squares the "
               "grid maps average over and --evaluate deletes",
       .min = 0,
       .min_open = true,
       .scope = kCliOption},
  };
}

/// How the maps are drawn, and what the server's answer holds.
std::vector<OptionSpec> drawing_options() {
  return {
      {.name = "colormap",
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.colormap; },
       .help = "inferno, jet or viridis",
       .choices = {"inferno", "jet", "viridis"}},
      {.name = "alpha",
       .type = OptionType::Number,
       .field = +[](R& r) -> double& { return r.alpha; },
       .help = "heatmap opacity over the image",
       .min = 0,
       .max = 1,
       .what = "the opacity"},
      {.name = "upsample",
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.upsample; },
       .help = "how a patch-grid map is brought to the image's size: bilinear, or nearest "
               "(each patch one block, as DINO's visualize_attention)",
       .choices = {"bilinear", "nearest"}},
      {.name = "style",
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.style; },
       .help = "how a map is drawn: overlay (a heat map over the image, --colormap, --alpha) or "
               "mask (the image multiplied by the map scaled to [0, 1])",
       .choices = {"overlay", "mask"}},
      {.name = "distance-norm",
       .aliases = {"distance_norm"},
       .type = OptionType::Choice,
       .field = +[](R& r) -> std::string& { return r.distance_norm; },
       .help = "the mean attention distance's weights: raw (the attention as it is, the ViT "
               "paper's) or patches (each query's row renormalised over the patches, the class "
               "token dropped)",
       .choices = {"raw", "patches"}},
      {.name = "heads",
       .type = OptionType::Flag,
       .field = +[](R& r) -> bool& { return r.heads; },
       .help = "the answer holds every head of the layer drawn (and each head's threshold mask)",
       .scope = kServerOption},
      {.name = "grids",
       .type = OptionType::Flag,
       .field = +[](R& r) -> bool& { return r.grids; },
       .help = "the answer holds each method's raw patch-grid values",
       .scope = kServerOption},
  };
}

std::vector<OptionSpec> make_table() {
  std::vector<OptionSpec> table;
  for (auto* group :
       {what_options, gradient_options, extra_options, input_options, drawing_options})
    for (OptionSpec& s : group()) table.push_back(std::move(s));
  return table;
}

[[noreturn]] void bad_option(const std::string& message) { throw Error(message); }

/// "[0, 1)", "(0, inf)": the interval an entry's numbers lie in.
std::string interval(double min, double max, bool min_open, bool max_open) {
  return fmt::format("{}{}, {}{}", min_open ? "(" : "[", min, max,
                     max_open || !std::isfinite(max) ? ")" : "]");
}

int64_t read_integer(const OptionSpec& s, const std::string& key, const json& v,
                     const ServerRange& r) {
  if (!v.is_number_integer())
    bad_option(fmt::format("option {}: expected a whole number from {} to {} ({}), got {}", key,
                           r.min, r.max, r.what, nn::json_brief(v)));
  // An unsigned beyond int64 is out of every range here.
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}
                        ? INT64_MAX
                        : v.get<int64_t>();
  const auto d = static_cast<double>(x);
  if (d < r.min || d > r.max || (s.min_open && d == r.min) || (s.max_open && d == r.max))
    bad_option(fmt::format("option {}: {} is out of range: expected {} to {} ({})", key, x, r.min,
                           r.max, r.what));
  return x;
}

double read_number(const OptionSpec& s, const std::string& key, const json& v,
                   const ServerRange& r) {
  if (!v.is_number())
    bad_option(
        fmt::format("option {}: expected a number ({}), got {}", key, r.what, nn::json_brief(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < r.min || x > r.max || (s.min_open && x == r.min) ||
      (s.max_open && x == r.max))
    bad_option(fmt::format("option {}: {} is out of range: expected {} in {}", key, x, r.what,
                           interval(r.min, r.max, s.min_open, s.max_open)));
  return x;
}

std::string read_methods(const std::string& key, const json& v) {
  std::string list;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array() && !v.empty()) {
    for (const json& m : v) {
      if (!m.is_string())
        bad_option(fmt::format("option {}: expected method names, got {}", key, nn::json_brief(m)));
      list += (list.empty() ? "" : ",") + m.get<std::string>();
    }
    return list;
  }
  bad_option(fmt::format(
      "option {}: expected \"all\", a comma-separated list or an array of names, got {}", key,
      nn::json_brief(v)));
}

/// JSON's target as the command line writes it: "predicted" for -1, else the class's index.
std::string read_class(const std::string& key, const json& v, const ServerContext& c) {
  const auto K = static_cast<int64_t>(c.classes.size());
  if (c.headless) {
    if (!(v.is_number_integer() && v.get<int64_t>() == -1))
      bad_option(fmt::format(
          "option {}: the model has no classification head, so there is no class to target", key));
    return "predicted";
  }
  if (v.is_string()) {
    auto it = std::find(c.classes.begin(), c.classes.end(), v.get<std::string>());
    if (it == c.classes.end())
      bad_option(fmt::format("option {}: {} is not a class of the model ({})", key,
                             nn::json_brief(v), fmt::join(c.classes, ", ")));
    return std::to_string(it - c.classes.begin());
  }
  if (v.is_number_integer()) {
    const OptionSpec any{.name = key, .type = OptionType::Class};
    const int64_t k = read_integer(
        any, key, v,
        {-1, static_cast<double>(K - 1), "a class index, or -1 for the predicted class"});
    return k == -1 ? "predicted" : std::to_string(k);
  }
  bad_option(fmt::format("option {}: expected a class index, -1 or a class name, got {}", key,
                         nn::json_brief(v)));
}

std::string read_patch(const std::string& key, const json& v) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
      v[0].get<int64_t>() < 0 || v[1].get<int64_t>() < 0)
    bad_option(fmt::format("option {}: expected [row, column] on the patch grid (qkv), got {}", key,
                           nn::json_brief(v)));
  return fmt::format("{},{}", v[0].get<int64_t>(), v[1].get<int64_t>());
}

/// An entry's range on the server.
ServerRange server_range(const OptionSpec& s, const ServerContext& c) {
  return s.server_range ? s.server_range(c) : ServerRange{s.min, s.max, s.what};
}

std::pair<int64_t, int64_t> parse_patch(const std::string& patch) {
  int64_t row = -1, col = -1;
  if (patch.empty()) return {row, col};
  const size_t comma = patch.find(',');
  size_t a = 0, b = 0;  // the characters each number used
  try {
    if (comma != std::string::npos) {
      row = std::stoll(patch.substr(0, comma), &a);
      col = std::stoll(patch.substr(comma + 1), &b);
    }
  } catch (const std::exception&) {
    a = 0;
  }
  VT_CHECK(a == comma && a > 0 && b == patch.size() - comma - 1 && b > 0 && row >= 0 && col >= 0,
           "--patch {}: expected ROW,COL, two whole numbers from 0 (as 3,5)", patch);
  return {row, col};
}

}  // namespace

std::string option_type_name(OptionType t) {
  switch (t) {
    case OptionType::Integer:
      return "integer";
    case OptionType::Number:
      return "number";
    case OptionType::Choice:
      return "choice";
    case OptionType::Text:
      return "text";
    case OptionType::Flag:
      return "flag";
    case OptionType::Numbers:
      return "numbers";
    case OptionType::Methods:
      return "methods";
    case OptionType::Class:
      return "class";
    case OptionType::Patch:
      return "patch";
  }
  return "?";
}

const std::vector<OptionSpec>& request_options() {
  static const std::vector<OptionSpec> table = make_table();
  return table;
}

const OptionSpec* find_request_option(std::string_view name) {
  for (const OptionSpec& s : request_options()) {
    if (s.name == name) return &s;
    if (std::find(s.aliases.begin(), s.aliases.end(), name) != s.aliases.end()) return &s;
  }
  return nullptr;
}

std::vector<std::string> request_option_names(unsigned scope) {
  std::vector<std::string> out;
  for (const OptionSpec& s : request_options())
    if (s.scope & scope) out.push_back(s.name);
  return out;
}

json option_value(const OptionSpec& spec, const RequestValues& values) {
  RequestValues& v = const_cast<RequestValues&>(values);  // the accessors only read here
  return std::visit([&v](auto get) { return json(get(v)); }, spec.field);
}

void read_json_option(const OptionSpec& s, const std::string& key, const json& v,
                      const ServerContext& c, RequestValues& values) {
  std::visit(
      [&](auto get) {
        auto& field = get(values);
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>) {
          field = static_cast<T>(read_integer(s, key, v, server_range(s, c)));
        } else if constexpr (std::is_same_v<T, double>) {
          field = read_number(s, key, v, server_range(s, c));
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean())
            bad_option(
                fmt::format("option {}: expected true or false, got {}", key, nn::json_brief(v)));
          field = v.get<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (s.type == OptionType::Methods) {
            field = read_methods(key, v);
          } else if (s.type == OptionType::Class) {
            field = read_class(key, v, c);
          } else if (s.type == OptionType::Patch) {
            field = read_patch(key, v);
          } else if (s.type == OptionType::Choice) {
            if (!v.is_string() || std::find(s.choices.begin(), s.choices.end(),
                                            v.get<std::string>()) == s.choices.end())
              bad_option(fmt::format("option {}: expected one of {}, got {}", key,
                                     fmt::join(s.choices, ", "), nn::json_brief(v)));
            field = v.get<std::string>();
          } else {  // Text
            if (!v.is_string())
              bad_option(
                  fmt::format("option {}: expected a string, got {}", key, nn::json_brief(v)));
            const std::string problem = s.check ? s.check(v.get<std::string>()) : std::string();
            if (!problem.empty()) bad_option(fmt::format("option {}: {}", key, problem));
            field = v.get<std::string>();
          }
        } else {
          bad_option(fmt::format("option {}: not an option of the server", key));
        }
      },
      s.field);
}

json options_report(const ServerContext& c, const RequestValues& defaults) {
  json out = json::array();
  for (const OptionSpec& s : request_options()) {
    if (!(s.scope & kServerOption)) continue;
    json e = {{"name", s.name},
              {"aliases", s.aliases},
              {"type", option_type_name(s.type)},
              {"default", option_value(s, defaults)},
              {"help", s.help}};
    if (s.type == OptionType::Integer || s.type == OptionType::Number) {
      const ServerRange r = server_range(s, c);
      // JSON has no infinity: an open end is null.
      e["min"] = std::isfinite(r.min) ? json(r.min) : json(nullptr);
      e["max"] = std::isfinite(r.max) ? json(r.max) : json(nullptr);
      e["min_open"] = s.min_open;
      e["max_open"] = s.max_open;
    }
    if (s.type == OptionType::Class && !c.headless) e["choices"] = c.classes;
    if (!s.choices.empty()) e["choices"] = s.choices;
    out.push_back(std::move(e));
  }
  return out;
}

std::string options_markdown() {
  std::string md =
      "| flag | JSON (`--serve`) | type | default | values | what |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  const RequestValues defaults;
  for (const OptionSpec& s : request_options()) {
    const std::string flag = s.scope & kCliOption ? fmt::format("`--{}`", s.name) : "-";
    std::string key = "-";
    if (s.scope & kServerOption) {
      key = fmt::format("`{}`", s.name);
      for (const std::string& a : s.aliases) key += fmt::format(", `{}`", a);
    }
    std::string values;
    if (!s.choices.empty()) values = fmt::format("{}", fmt::join(s.choices, ", "));
    if (std::isfinite(s.min) || std::isfinite(s.max))
      values = interval(s.min, s.max, s.min_open, s.max_open);
    if (s.server_range)
      values += values.empty() ? "(server: the model's)" : " (server: its limits)";
    std::string def = option_value(s, defaults).dump();
    if (def == "\"\"" || def == "[]") def = "";
    std::string help = s.help;
    for (size_t i = 0; (i = help.find('|', i)) != std::string::npos; i += 2)
      help.replace(i, 1, "\\|");
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", flag, key, option_type_name(s.type),
                      def.empty() ? "" : fmt::format("`{}`", def), values, help);
  }
  return md;
}

Options method_options(const RequestValues& v) {
  Options opt = v.opt;
  opt.head_fusion = v.head_fusion == "max"   ? HeadFusion::Max
                    : v.head_fusion == "min" ? HeadFusion::Min
                                             : HeadFusion::Mean;
  opt.ig_rule = v.ig_method == "trapezoid" ? IgRule::Trapezoid : IgRule::GaussLegendre;
  opt.baseline = v.baseline == "blur" ? IgBaseline::Blur : IgBaseline::Black;
  opt.pos_interp = v.pos_interp == "dino" ? models::PosInterp::Dino : models::PosInterp::Size;
  opt.upsample = parse_upsample(v.upsample);
  const auto [row, col] = parse_patch(v.patch);
  opt.patch_row = row, opt.patch_col = col;
  opt.distance_norm = v.distance_norm == "patches" ? DistanceNorm::Patches : DistanceNorm::Raw;
  return opt;
}

}  // namespace vitrine::explain
