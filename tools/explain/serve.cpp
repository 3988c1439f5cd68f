// The explanation service (serve.h): options, admission, the per-image cache, the answer.
#include "tools/explain/serve.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "nn/json.h"
#include "ops/ops.h"
#include "tools/common/html.h"
#include "tools/explain/detail.h"
#include "tools/explain/render.h"

namespace vitrine::explain {

using json = nlohmann::json;
using clock = std::chrono::steady_clock;
using detail::seconds_since;

namespace {

[[noreturn]] void bad_request(const std::string& message) { throw ClientError(400, message); }

const std::vector<std::string> kOptionKeys = {
    "methods",       "target",   "layer",    "head",          "threshold", "head_fusion",
    "discard_ratio", "steps",    "ig_rule",  "baseline",      "samples",   "sigma",
    "seed",          "colormap", "alpha",    "resize",        "crop",      "pos_interp",
    "heads",         "grids",    "upsample", "distance_norm", "patch",     "neuron",
    "am_steps",      "normalise"};

/// options.key as an integer in [lo, hi].
int64_t integer_in(const json& o, const char* key, int64_t lo, int64_t hi, const char* what) {
  const int64_t x = o.at(key).get<int64_t>();  // the caller checked that it is an integer
  if (x < lo || x > hi)
    bad_request(
        fmt::format("option {}: {} is out of range: expected {} to {} ({})", key, x, lo, hi, what));
  return x;
}

int64_t integer_option(const json& o, const char* key, int64_t lo, int64_t hi, const char* what) {
  const json& v = o.at(key);
  if (!v.is_number_integer())
    bad_request(fmt::format("option {}: expected a whole number from {} to {} ({}), got {}", key,
                            lo, hi, what, nn::json_brief(v)));
  return integer_in(o, key, lo, hi, what);
}

double number_option(const json& o, const char* key, double lo, double hi, bool hi_open,
                     const char* what) {
  const json& v = o.at(key);
  if (!v.is_number())
    bad_request(
        fmt::format("option {}: expected a number ({}), got {}", key, what, nn::json_brief(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (hi_open && x == hi))
    bad_request(fmt::format("option {}: {} is out of range: expected {} in [{}, {}{}", key, x, what,
                            lo, hi, hi_open ? ")" : "]"));
  return x;
}

std::string choice_option(const json& o, const char* key, const std::vector<std::string>& choices) {
  const json& v = o.at(key);
  if (!v.is_string() ||
      std::find(choices.begin(), choices.end(), v.get<std::string>()) == choices.end())
    bad_request(fmt::format("option {}: expected one of {}, got {}", key, fmt::join(choices, ", "),
                            nn::json_brief(v)));
  return v.get<std::string>();
}

bool bool_option(const json& o, const char* key) {
  const json& v = o.at(key);
  if (!v.is_boolean())
    bad_request(fmt::format("option {}: expected true or false, got {}", key, nn::json_brief(v)));
  return v.get<bool>();
}

/// The methods a model has: a ViT with a head every one, a backbone without one the attention
/// methods that need no class score.
std::vector<Method> methods_of(const LoadedModel& m) {
  std::vector<Method> out;
  for (Method x : all_methods())
    if (!m.headless || !needs_class_score(x)) out.push_back(x);
  return out;
}

std::string png_uri(const Rgb8& image) { return tools::data_uri("image/png", encode_png(image)); }

/// The enlargement that makes an image's longer side at least 224 pixels on the page.
int64_t enlargement(int64_t h, int64_t w) {
  const int64_t side = std::max<int64_t>(1, std::max(h, w));
  return std::max<int64_t>(1, (224 + side - 1) / side);
}

}  // namespace

RequestOptions parse_request_options(std::string_view json_text, const LoadedModel& model,
                                     const ServeLimits& limits) {
  RequestOptions r;
  r.methods = methods_of(model);
  r.mean = model.mean, r.std = model.std;
  // The integrated-gradients baseline and range of the normalisation chosen.
  const auto set_black_white = [&r] {
    r.method.black.clear(), r.method.white.clear();
    for (size_t c = 0; c < r.mean.size(); ++c) {
      r.method.black.push_back(-r.mean[c] / r.std[c]);
      r.method.white.push_back((1 - r.mean[c]) / r.std[c]);
    }
  };
  set_black_white();
  // The defaults (50 steps, 16 samples) within --max-steps too.
  r.method.steps = std::min(r.method.steps, limits.max_steps);
  r.method.samples = std::min(r.method.samples, limits.max_steps);
  if (json_text.empty()) return r;
  json o;
  try {
    o = nn::parse_json(std::string(json_text), "the options",
                       {.max_depth = 8, .max_bytes = 64 << 10});
  } catch (const Error& e) {
    bad_request(e.what());
  }
  if (!o.is_object())
    bad_request(
        fmt::format("the options: expected a JSON object ({{\"methods\": \"all\", ...}}), "
                    "got {}",
                    nn::json_brief(o)));
  for (const auto& [key, value] : o.items())
    if (std::find(kOptionKeys.begin(), kOptionKeys.end(), key) == kOptionKeys.end())
      bad_request(fmt::format("the options: unknown option \"{}\"; the options are {}",
                              key.substr(0, 64), fmt::join(kOptionKeys, ", ")));
  const auto& vit = *model.vit;
  const int64_t depth = vit.config().depth, heads = vit.config().heads;
  if (o.contains("methods")) {
    const json& v = o["methods"];
    std::string list;
    if (v.is_string()) {
      list = v.get<std::string>();
    } else if (v.is_array() && !v.empty()) {
      for (const json& m : v) {
        if (!m.is_string())
          bad_request(
              fmt::format("option methods: expected method names, got {}", nn::json_brief(m)));
        list += (list.empty() ? "" : ",") + m.get<std::string>();
      }
    } else {
      bad_request(fmt::format(
          "option methods: expected \"all\", a comma-separated list or an array of names, got {}",
          nn::json_brief(v)));
    }
    try {
      r.methods = list == "all" ? methods_of(model) : parse_methods(list);
    } catch (const Error& e) {
      bad_request(fmt::format("option methods: {}", e.what()));
    }
    std::vector<std::string> need;
    for (Method m : r.methods)
      if (model.headless && needs_class_score(m)) need.push_back(method_name(m));
    if (!need.empty())
      bad_request(
          fmt::format("option methods: the model has no classification head (a feature "
                      "extractor), so {} has no class score to explain; it has attention "
                      "and rollout",
                      fmt::join(need, ", ")));
  }
  if (o.contains("target")) {
    const json& v = o["target"];
    const int64_t K = static_cast<int64_t>(model.classes.size());
    if (model.headless) {
      if (!(v.is_number_integer() && v.get<int64_t>() == -1))
        bad_request(
            "option target: the model has no classification head, so there is no class "
            "to target");
    } else if (v.is_string()) {
      auto it = std::find(model.classes.begin(), model.classes.end(), v.get<std::string>());
      if (it == model.classes.end())
        bad_request(fmt::format("option target: {} is not a class of the model ({})",
                                nn::json_brief(v), fmt::join(model.classes, ", ")));
      r.target = it - model.classes.begin();
    } else if (v.is_number_integer()) {
      r.target = integer_in(o, "target", -1, K - 1, "a class index, or -1 for the predicted class");
    } else {
      bad_request(fmt::format("option target: expected a class index, -1 or a class name, got {}",
                              nn::json_brief(v)));
    }
  }
  Options& m = r.method;
  if (o.contains("layer"))
    m.layer = integer_option(o, "layer", -depth, depth - 1,
                             "a block, negative from the end, for a model of that many blocks");
  if (o.contains("head"))
    m.head = integer_option(o, "head", -1, heads - 1, "a head, or -1 for the mean over heads");
  if (o.contains("threshold"))
    m.threshold = number_option(o, "threshold", 0, 1, false, "the fraction of attention kept");
  if (o.contains("head_fusion")) {
    const std::string f = choice_option(o, "head_fusion", {"mean", "max", "min"});
    m.head_fusion = f == "max" ? HeadFusion::Max : f == "min" ? HeadFusion::Min : HeadFusion::Mean;
  }
  if (o.contains("discard_ratio"))
    m.discard_ratio = number_option(o, "discard_ratio", 0, 1, true, "the fraction discarded");
  const std::string limit = fmt::format("steps (--max-steps {})", limits.max_steps);
  if (o.contains("steps")) m.steps = integer_option(o, "steps", 1, limits.max_steps, limit.c_str());
  if (o.contains("ig_rule"))
    m.ig_rule = choice_option(o, "ig_rule", {"gausslegendre", "trapezoid"}) == "trapezoid"
                    ? IgRule::Trapezoid
                    : IgRule::GaussLegendre;
  if (m.ig_rule == IgRule::Trapezoid && m.steps < 2)
    bad_request("option steps: the trapezoid rule needs at least 2 steps");
  if (o.contains("baseline"))
    m.baseline = choice_option(o, "baseline", {"black", "blur"}) == "blur" ? IgBaseline::Blur
                                                                           : IgBaseline::Black;
  const std::string slimit = fmt::format("samples (--max-steps {})", limits.max_steps);
  if (o.contains("samples"))
    m.samples = integer_option(o, "samples", 1, limits.max_steps, slimit.c_str());
  if (o.contains("sigma")) m.sigma = number_option(o, "sigma", 0, 10, false, "the noise level");
  if (o.contains("seed"))
    m.seed = static_cast<uint64_t>(
        integer_option(o, "seed", 0, int64_t{1} << 53, "the seed of SmoothGrad's noise"));
  if (o.contains("colormap"))
    r.colormap = parse_colormap(choice_option(o, "colormap", {"inferno", "jet", "viridis"}));
  if (o.contains("alpha")) r.alpha = number_option(o, "alpha", 0, 1, false, "the opacity");
  if (o.contains("resize")) {
    const json& v = o["resize"];
    const std::string s = v.is_string() ? v.get<std::string>() : std::string();
    try {
      if (!valid_resize(s)) throw Error("");
    } catch (const Error&) {
      bad_request(
          fmt::format("option resize: expected \"model\", \"stretch\", \"none\" or "
                      "\"factor:F\" with F in (0, 16], got {}",
                      nn::json_brief(v)));
    }
    r.geometry.resize = s;
  }
  if (o.contains("crop")) r.geometry.crop = choice_option(o, "crop", {"center", "topleft"});
  if (o.contains("pos_interp"))
    m.pos_interp = choice_option(o, "pos_interp", {"size", "dino"}) == "dino"
                       ? models::PosInterp::Dino
                       : models::PosInterp::Size;
  if (o.contains("upsample"))
    m.upsample = parse_upsample(choice_option(o, "upsample", {"bilinear", "nearest"}));
  if (o.contains("distance_norm"))
    m.distance_norm = choice_option(o, "distance_norm", {"raw", "patches"}) == "patches"
                          ? DistanceNorm::Patches
                          : DistanceNorm::Raw;
  if (o.contains("patch")) {
    const json& v = o["patch"];
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
        v[0].get<int64_t>() < 0 || v[1].get<int64_t>() < 0)
      bad_request(
          fmt::format("option patch: expected [row, column] on the patch grid (qkv), got {}",
                      nn::json_brief(v)));
    m.patch_row = v[0].get<int64_t>();
    m.patch_col = v[1].get<int64_t>();
  }
  if (o.contains("neuron"))
    m.neuron = integer_option(o, "neuron", -1, vit.config().mlp_dim - 1,
                              "activation-max: an MLP channel of the block, or -1 for the logit");
  const std::string am_limit =
      fmt::format("activation-max steps (--max-steps {})", limits.max_steps);
  if (o.contains("am_steps"))
    m.am_steps = integer_option(o, "am_steps", 0, limits.max_steps, am_limit.c_str());
  m.am_steps = std::min(m.am_steps, limits.max_steps);
  if (o.contains("normalise")) {
    r.normalise = choice_option(o, "normalise", {"checkpoint", "imagenet", "none"});
    const auto channels = static_cast<size_t>(model.spec.channels);
    if (r.normalise == "imagenet") {
      if (channels != 3)
        bad_request(
            fmt::format("option normalise: imagenet's mean and std are for 3 channels; "
                        "this model takes {}",
                        channels));
      r.mean = models::kImageNetMean, r.std = models::kImageNetStd;
    } else if (r.normalise == "none") {
      r.mean.assign(channels, 0.0f), r.std.assign(channels, 1.0f);
    }
    set_black_white();
  }
  if (o.contains("heads")) r.heads = bool_option(o, "heads");
  if (o.contains("grids")) r.grids = bool_option(o, "grids");
  return r;
}

/// One image's cached work: its model input, the pass, the expensive methods' results.
struct ExplainService::CachedImage {
  Sample sample;
  Pass pass;
  std::map<std::string, Explanation> slow;  // smoothgrad / integrated gradients, by options
  double pass_seconds = 0;
};

ExplainService::ExplainService(LoadedModel model, ServeLimits limits)
    : model_(std::move(model)), limits_(limits) {
  VT_CHECK(model_.vit != nullptr,
           "--serve: the page shows a Vision Transformer's attention, and the checkpoint holds a "
           "{} ({}); explain it on the command line instead (vitrine-explain without --serve)",
           model_.model->type_name(), model_.spec.describe());
  VT_CHECK(limits_.max_body_bytes >= 1 && limits_.max_image_side >= 1 && limits_.queue >= 0 &&
               limits_.request_timeout_s > 0 && limits_.max_steps >= 1 &&
               limits_.max_attention_mb >= 1 && limits_.cache_images >= 1,
           "--serve: every limit must be positive (--queue may be 0)");
  model_.model->eval();
}

ExplainService::~ExplainService() = default;

json ExplainService::model_info() const {
  const models::ViTConfig& c = model_.vit->config();
  std::vector<std::string> methods;
  for (Method m : methods_of(model_)) methods.push_back(method_name(m));
  ServeStats s = stats();
  return {
      {"checkpoint", model_.checkpoint_name},
      {"description", model_.spec.describe()},
      {"architecture", c.to_json()},
      {"image", {{"height", c.image_h}, {"width", c.image_w}, {"channels", c.channels}}},
      {"patch", c.patch},
      {"layers", c.depth},
      {"heads", c.heads},
      {"headless", model_.headless},
      {"classes", model_.classes},
      {"normalisation",
       {{"mean", model_.mean}, {"std", model_.std}, {"from", model_.normalisation}}},
      {"methods", methods},
      {"colormaps", {"inferno", "jet", "viridis"}},
      {"limits",
       {{"max_body_bytes", limits_.max_body_bytes},
        {"max_image_side", limits_.max_image_side},
        {"request_timeout_s", limits_.request_timeout_s},
        {"queue", limits_.queue},
        {"max_steps", limits_.max_steps},
        {"max_attention_mb", limits_.max_attention_mb}}},
      {"stats",
       {{"requests", s.requests},
        {"answered", s.answered},
        {"refused_busy", s.refused_busy},
        {"client_errors", s.client_errors},
        {"pass_cache_hits", s.pass_cache_hits}}},
  };
}

ServeStats ExplainService::stats() const {
  std::lock_guard lock(mutex_);
  ServeStats s = stats_;
  s.running = running_;
  s.waiting = waiting_;
  return s;
}

json ExplainService::explain(std::string_view image_bytes, std::string_view options_json,
                             const std::string& image_name) {
  const auto start = clock::now();
  const auto deadline = start + std::chrono::duration_cast<clock::duration>(
                                    std::chrono::duration<double>(limits_.request_timeout_s));
  std::unique_lock lock(mutex_);
  ++stats_.requests;
  try {
    lock.unlock();
    const RequestOptions o = parse_request_options(options_json, model_, limits_);
    lock.lock();
    // Admission: one runs, at most `queue` wait, the rest are refused now.
    if (running_ && waiting_ >= limits_.queue) {
      ++stats_.refused_busy;
      const auto retry =
          static_cast<int64_t>(std::ceil(recent_seconds_ * static_cast<double>(waiting_ + 1)));
      throw ClientError(503,
                        fmt::format("busy: one request is running and {} are waiting (--queue {}); "
                                    "try again in {} s",
                                    waiting_, limits_.queue, std::max<int64_t>(1, retry)),
                        std::max<int64_t>(1, retry));
    }
    ++waiting_;
    const bool turn = turn_.wait_until(lock, deadline, [&] { return !running_; });
    --waiting_;
    if (!turn) {
      ++stats_.refused_busy;
      throw ClientError(503,
                        fmt::format("busy: waited {:.0f} s for the model, the limit of one request "
                                    "(--request-timeout {})",
                                    seconds_since(start), limits_.request_timeout_s),
                        static_cast<int64_t>(std::ceil(recent_seconds_)));
    }
    running_ = true;
    lock.unlock();
    const auto run_start = clock::now();
    json out;
    try {
      out = run(image_bytes, o, image_name, deadline);
    } catch (...) {
      lock.lock();
      running_ = false;
      turn_.notify_one();
      throw;
    }
    lock.lock();
    running_ = false;
    // A running mean of the requests' own times (not their waits): the Retry-After estimate.
    recent_seconds_ = 0.7 * recent_seconds_ + 0.3 * seconds_since(run_start);
    ++stats_.answered;
    turn_.notify_one();
    out["timings"]["total"] = seconds_since(start);
    return out;
  } catch (const ClientError& e) {
    if (!lock.owns_lock()) lock.lock();
    if (e.status != 503) ++stats_.client_errors;
    throw;
  }
}

std::shared_ptr<ExplainService::CachedImage> ExplainService::cached_pass(const std::string& key,
                                                                         const Sample& sample,
                                                                         const RequestOptions& o,
                                                                         bool& hit) {
  for (auto it = cache_.begin(); it != cache_.end(); ++it)
    if (it->first == key) {
      cache_.splice(cache_.begin(), cache_, it);  // most recently used first
      hit = true;
      return cache_.front().second;
    }
  hit = false;
  auto c = std::make_shared<CachedImage>();
  c->sample = sample;
  // The pass alone (no methods yet), with its gradients whenever the model has a head: the
  // methods of this and later requests read it.
  Result r = explain::explain(*model_.model, {.images = sample.input.unsqueeze(0),
                                              .targets = {o.target},
                                              .options = o.method,
                                              .gradients = !model_.headless});
  c->pass = std::move(r.pass);
  c->pass_seconds = r.seconds.front().second;
  for (float v : c->pass.logits.contiguous().to_vector<float>())
    if (!std::isfinite(v))
      fail("the model's output holds {} for {}: the checkpoint's weights hold non-finite values", v,
           sample.name);
  cache_.emplace_front(key, c);
  while (static_cast<int64_t>(cache_.size()) > limits_.cache_images) cache_.pop_back();
  return c;
}

json ExplainService::run(std::string_view bytes, const RequestOptions& o, const std::string& name,
                         clock::time_point deadline) {
  const auto t_start = clock::now();
  if (bytes.empty())
    throw ClientError(400,
                      "no image: the request's \"image\" part is empty (send a PNG, JPEG or "
                      "BMP file)");
  if (static_cast<int64_t>(bytes.size()) > limits_.max_body_bytes)
    throw ClientError(413, fmt::format("{}: {} bytes, over the limit of {} (--max-body-mb)", name,
                                       bytes.size(), limits_.max_body_bytes));
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  nn::data::DecodedImage header;
  const nn::data::ImageLimits any{.max_side = int64_t{1} << 30,
                                  .max_pixels = int64_t{1} << 60,
                                  .max_file_bytes = int64_t{1} << 40};
  try {
    header = nn::data::read_image_header(data, name, any);
  } catch (const Error& e) {
    throw ClientError(415, e.what());
  }
  const int64_t side = limits_.max_image_side;
  if (header.width > side || header.height > side)
    throw ClientError(413,
                      fmt::format("{}: the {} image is {}x{} pixels, over the limit of {} a "
                                  "side (--max-image-side {}); nothing was decoded",
                                  name, header.format, header.width, header.height, side, side));
  Sample sample;
  try {
    const nn::data::DecodedImage d = nn::data::decode_image(
        data, name, {.max_side = side, .max_pixels = side * side, .max_file_bytes = 1LL << 40});
    const nn::data::Image image = nn::data::to_image(d, static_cast<int>(model_.spec.channels));
    if (o.normalise == "checkpoint") {
      sample = prepare_image(name, image, -1, o.geometry, model_);
    } else {  // the model as loaded, with the request's normalisation
      LoadedModel normalised = model_;
      normalised.mean = o.mean, normalised.std = o.std;
      sample = prepare_image(name, image, -1, o.geometry, normalised);
    }
  } catch (const Error& e) {
    throw ClientError(400, e.what());
  }
  const double decode_seconds = seconds_since(t_start);
  const models::ViTConfig& c = model_.vit->config();
  const int64_t H = sample.input.size(1), W = sample.input.size(2);
  const int64_t tokens = c.prefix_tokens() + (H / c.patch) * (W / c.patch);
  const double attention_mb =
      2.0 * c.depth * c.heads * static_cast<double>(tokens) * tokens * 4 / (1 << 20);
  if (attention_mb > static_cast<double>(limits_.max_attention_mb))
    throw ClientError(413, fmt::format("{}: at {}x{} the model sees {} tokens, whose attention "
                                       "and gradients take {:.0f} MB, over the limit of {} MB "
                                       "(--max-attention-mb); use resize \"model\" or a smaller "
                                       "factor",
                                       name, H, W, tokens, attention_mb, limits_.max_attention_mb));

  // The pass: cached by the file's bytes and everything that changes it.
  const std::string key = fmt::format(
      "{:016x}/{}/{}/{}/{}/{}/{}/{}", std::hash<std::string_view>{}(bytes), bytes.size(),
      o.geometry.resize, o.geometry.crop, static_cast<int>(o.method.pos_interp), o.target,
      (o.method.layer + c.depth) % c.depth, o.normalise);
  bool hit = false;
  std::shared_ptr<CachedImage> cached = cached_pass(key, sample, o, hit);
  if (hit) {
    std::lock_guard lock(mutex_);
    ++stats_.pass_cache_hits;
  }
  const Pass& pass = cached->pass;
  const Tensor batch = cached->sample.input.unsqueeze(0);
  const Tensor& display = cached->sample.display;
  const int64_t enlarge = enlargement(H, W);

  json out;
  out["image"] = {{"name", name},
                  {"format", header.format},
                  {"width", header.width},
                  {"height", header.height}};
  out["input"] = {{"height", H},
                  {"width", W},
                  {"grid", {pass.grid_h, pass.grid_w}},
                  {"tokens", tokens},
                  {"normalisation", {{"from", o.normalise}, {"mean", o.mean}, {"std", o.std}}},
                  {"png", png_uri(enlarge > 1 ? explain::enlarge(to_rgb8(display), enlarge)
                                              : to_rgb8(display))}};
  out["timings"] = {{"decode", decode_seconds},
                    {hit               ? "pass (cached)"
                     : model_.headless ? "forward"
                                       : "forward + backward",
                     hit ? 0.0 : cached->pass_seconds}};
  if (!model_.headless) {
    const auto p = ops::softmax(pass.logits.to(kFloat32), -1).to_vector<double>();
    std::vector<int64_t> order(p.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    json top = json::array();
    for (size_t k = 0; k < std::min<size_t>(5, order.size()); ++k)
      top.push_back(
          {{"class", order[k]}, {"name", model_.classes[order[k]]}, {"probability", p[order[k]]}});
    const int64_t target = pass.targets.at(0);
    out["prediction"] = {{"top", top},
                         {"predicted", order[0]},
                         {"target", target},
                         {"target_name", model_.classes[target]},
                         {"target_probability", p[target]}};
  }
  const auto draw = [&](const Tensor& map) {  // map [H, W] in [0, 1]
    return png_uri(draw_map(display, map, Style::Overlay, o.colormap, o.alpha, enlarge));
  };
  // One method from the cached pass (the same call as the command line's).
  const auto method = [&](Method m) {
    return explain::explain(*model_.model,
                            {.images = batch, .methods = {m}, .options = o.method, .pass = &pass})
        .explanations.front();
  };
  const auto check_time = [&](const std::string& next) {
    if (clock::now() > deadline)
      throw ClientError(503,
                        fmt::format("the request took longer than --request-timeout {} s and "
                                    "stopped before {}; ask for fewer methods or steps",
                                    limits_.request_timeout_s, next),
                        1);
  };
  json methods = json::array();
  for (Method m : o.methods) {
    check_time(method_name(m));
    const auto t0 = clock::now();
    Explanation e;
    bool method_cached = false;
    if (m == Method::SmoothGrad || m == Method::IntegratedGradients) {
      const Options& p = o.method;
      const std::string k = m == Method::SmoothGrad
                                ? fmt::format("sg/{}/{}/{}", p.samples, p.sigma, p.seed)
                                : fmt::format("ig/{}/{}/{}", p.steps, static_cast<int>(p.ig_rule),
                                              static_cast<int>(p.baseline));
      auto it = cached->slow.find(k);
      method_cached = it != cached->slow.end();
      if (!method_cached) it = cached->slow.emplace(k, method(m)).first;
      e = it->second;
    } else {
      e = method(m);
    }
    // activation-max's picture is the optimised image, un-normalised; every other method a map.
    const auto picture = [&] {
      return png_uri(
          explain::enlarge(to_rgb8(unnormalised(e.picture.select(0, 0), o.mean, o.std)), enlarge));
    };
    json r = {{"method", method_name(m)},
              {"png", e.picture.defined() ? picture() : draw(e.map.select(0, 0))},
              {"cached", method_cached}};
    if (e.picture.defined())
      r["activation_max"] = {{"start", e.start_score[0]}, {"end", e.end_score[0]}};
    if (m == Method::Qkv) {  // per head: the query-key scores, the values' norms
      r["patch"] = {e.query_row, e.query_col};
      for (const auto& [key, per_head] :
           {std::pair{"head_pngs", e.heads}, std::pair{"value_pngs", e.values}}) {
        const Tensor up = minmax(upsample(per_head.select(0, 0), H, W, o.method.upsample));
        json pngs = json::array();
        for (int64_t h = 0; h < up.size(0); ++h) pngs.push_back(draw(up.select(0, h)));
        r[key] = pngs;
      }
    }
    if (e.mask.defined())
      r["mask_png"] = draw(upsample(e.mask, H, W, o.method.upsample).select(0, 0));
    if (!e.completeness_gap.empty()) r["completeness_gap"] = e.completeness_gap[0];
    if (o.grids && e.grid.defined())
      r["grid"] = {{"rows", e.grid.size(1)},
                   {"cols", e.grid.size(2)},
                   {"values", e.grid.to(kFloat64).contiguous().to_vector<double>()}};
    r["seconds"] = seconds_since(t0);
    methods.push_back(std::move(r));
  }
  out["methods"] = std::move(methods);
  if (o.heads) {  // every head of the layer, DINO's figure; with a threshold, each head's mask
    check_time("the heads");
    Tensor per_head;
    (void)attention_map(pass, o.method.layer, -1, &per_head);
    const Tensor heads = per_head.select(0, 0);  // [heads, gh, gw]
    const Tensor up = minmax(upsample(heads, H, W, o.method.upsample));
    json pngs = json::array(), masks = json::array();
    for (int64_t h = 0; h < heads.size(0); ++h) pngs.push_back(draw(up.select(0, h)));
    if (o.method.threshold > 0) {
      const Tensor mask_up =
          upsample(threshold_mask(heads, o.method.threshold), H, W, o.method.upsample);
      for (int64_t h = 0; h < heads.size(0); ++h) masks.push_back(draw(mask_up.select(0, h)));
    }
    out["heads"] = {
        {"layer", (o.method.layer + c.depth) % c.depth}, {"pngs", pngs}, {"mask_pngs", masks}};
  }
  const Tensor distance_lh = attention_distance(pass, model_.patch, o.method.distance_norm);
  const int64_t L = distance_lh.size(0), nh = distance_lh.size(1);
  const auto dist = distance_lh.to_vector<double>();
  json distance = json::array();
  for (int64_t l = 0; l < L; ++l)
    distance.push_back(std::vector<double>(dist.begin() + l * nh, dist.begin() + (l + 1) * nh));
  out["attention_distance"] = distance;
  return out;
}

}  // namespace vitrine::explain
