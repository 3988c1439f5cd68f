// The explanation service (serve.h): options, admission, the per-image cache, the answer.
#include "explain/serve.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "common/html.h"
#include "explain/detail.h"
#include "explain/render.h"
#include "nn/json.h"
#include "ops/ops.h"

namespace vitrine::explain {

using json = nlohmann::json;
using clock = std::chrono::steady_clock;
using detail::seconds_since;

namespace {

[[noreturn]] void bad_request(const std::string& message) { throw ClientError(400, message); }

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

ServerContext server_context(const LoadedModel& model, const ServeLimits& limits) {
  const models::ViTConfig& c = model.vit->config();
  return {.depth = c.depth,
          .heads = c.heads,
          .mlp_dim = c.mlp_dim,
          .max_steps = limits.max_steps,
          .classes = model.classes,
          .headless = model.headless};
}

RequestValues request_defaults(const ServeLimits& limits) {
  RequestValues v;
  // The defaults (50 steps, 16 samples, 64 activation-max steps) within --max-steps too.
  v.opt.steps = std::min(v.opt.steps, limits.max_steps);
  v.opt.samples = std::min(v.opt.samples, limits.max_steps);
  v.opt.am_steps = std::min(v.opt.am_steps, limits.max_steps);
  return v;
}

namespace {

/// The options' JSON object, each key read through its entry of options_schema.h.
RequestValues read_request_values(std::string_view json_text, const ServerContext& context,
                                  const ServeLimits& limits) {
  RequestValues v = request_defaults(limits);
  if (json_text.empty()) return v;
  json o;
  try {
    o = nn::parse_json(std::string(json_text), "the options",
                       {.max_depth = 8, .max_bytes = 64 << 10});
  } catch (const Error& e) {
    bad_request(e.what());
  }
  if (!o.is_object())
    bad_request(
        fmt::format("the options: expected a JSON object ({{\"method\": \"all\", ...}}), got {}",
                    nn::json_brief(o)));
  std::map<const OptionSpec*, std::string> seen;  // entry -> the key that gave it
  for (const auto& item : o.items()) {
    const std::string& key = item.key();
    const OptionSpec* spec = find_request_option(key);
    if (spec == nullptr || !(spec->scope & kServerOption))
      bad_request(fmt::format("the options: unknown option \"{}\"; the options are {}",
                              key.substr(0, 64),
                              fmt::join(request_option_names(kServerOption), ", ")));
    if (const auto [it, fresh] = seen.emplace(spec, key); !fresh)
      bad_request(fmt::format("the options: option {} is given twice, as \"{}\" and \"{}\"",
                              spec->name, it->second, key));
    try {
      read_json_option(*spec, key, item.value(), context, v);
    } catch (const Error& e) {
      bad_request(e.what());
    }
  }
  return v;
}

/// The request's normalisation (mean, std) and the integrated-gradients baseline and range it
/// gives.
void set_normalisation(RequestOptions& r, const LoadedModel& model) {
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
  r.method.black.clear(), r.method.white.clear();
  for (size_t c = 0; c < r.mean.size(); ++c) {
    r.method.black.push_back(-r.mean[c] / r.std[c]);
    r.method.white.push_back((1 - r.mean[c]) / r.std[c]);
  }
}

/// The methods a request names, each one the model has.
std::vector<Method> request_methods(const std::string& list, const LoadedModel& model) {
  std::vector<Method> methods;
  try {
    methods = list == "all" ? methods_of(model) : parse_methods(list);
  } catch (const Error& e) {
    bad_request(fmt::format("option method: {}", e.what()));
  }
  std::vector<std::string> need;
  for (Method m : methods)
    if (model.headless && needs_class_score(m)) need.push_back(method_name(m));
  if (!need.empty())
    bad_request(
        fmt::format("option method: the model has no classification head (a feature "
                    "extractor), so {} has no class score to explain; it has attention "
                    "and rollout",
                    fmt::join(need, ", ")));
  return methods;
}

}  // namespace

RequestOptions parse_request_options(std::string_view json_text, const LoadedModel& model,
                                     const ServeLimits& limits) {
  const RequestValues v = read_request_values(json_text, server_context(model, limits), limits);
  RequestOptions r;
  r.methods = request_methods(v.methods, model);
  r.target = v.target == "predicted" ? -1 : std::stoll(v.target);
  r.method = method_options(v);
  if (r.method.ig_rule == IgRule::Trapezoid && r.method.steps < 2)
    bad_request("option steps: the trapezoid rule needs at least 2 steps");
  r.colormap = parse_colormap(v.colormap);
  r.style = parse_style(v.style);
  r.alpha = v.alpha;
  r.geometry = {.resize = v.resize, .crop = v.crop};
  r.heads = v.heads, r.grids = v.grids;
  r.normalise = v.normalise;
  r.mean = model.mean, r.std = model.std;
  set_normalisation(r, model);
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

json ExplainService::options_info() const {
  // The registry's methods (method.h), each with its help and the options it reads; those this
  // model cannot run (a backbone's: the ones that need a class score) left out.
  json methods = json::array();
  for (const Method* m : explain::methods()) {
    if (model_.headless && needs_class_score(*m)) continue;
    methods.push_back({{"name", std::string(m->name())},
                       {"help", std::string(m->help())},
                       {"options", m->options()},
                       {"extra", m->extra()}});
  }
  return {{"options", options_report(server_context(model_, limits_), request_defaults(limits_))},
          {"methods", methods}};
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

namespace {  // the steps of ExplainService::run

/// The image file's header and the model input it gives (as the request's geometry and
/// normalisation fit it): 400, 413 or 415 for what is wrong, nothing decoded past a limit.
struct RequestImage {
  nn::data::DecodedImage header;
  Sample sample;
};

RequestImage decode_request_image(std::string_view bytes, const std::string& name,
                                  const RequestOptions& o, const LoadedModel& model,
                                  const ServeLimits& limits) {
  if (bytes.empty())
    throw ClientError(400,
                      "no image: the request's \"image\" part is empty (send a PNG, JPEG or "
                      "BMP file)");
  if (static_cast<int64_t>(bytes.size()) > limits.max_body_bytes)
    throw ClientError(413, fmt::format("{}: {} bytes, over the limit of {} (--max-body-mb)", name,
                                       bytes.size(), limits.max_body_bytes));
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  RequestImage out;
  const nn::data::ImageLimits any{.max_side = int64_t{1} << 30,
                                  .max_pixels = int64_t{1} << 60,
                                  .max_file_bytes = int64_t{1} << 40};
  try {
    out.header = nn::data::read_image_header(data, name, any);
  } catch (const Error& e) {
    throw ClientError(415, e.what());
  }
  const int64_t side = limits.max_image_side;
  if (out.header.width > side || out.header.height > side)
    throw ClientError(
        413, fmt::format("{}: the {} image is {}x{} pixels, over the limit of {} a "
                         "side (--max-image-side {}); nothing was decoded",
                         name, out.header.format, out.header.width, out.header.height, side, side));
  try {
    const nn::data::DecodedImage d = nn::data::decode_image(
        data, name, {.max_side = side, .max_pixels = side * side, .max_file_bytes = 1LL << 40});
    const nn::data::Image image = nn::data::to_image(d, static_cast<int>(model.spec.channels));
    if (o.normalise == "checkpoint") {
      out.sample = prepare_image(name, image, -1, o.geometry, model);
    } else {  // the model as loaded, with the request's normalisation
      LoadedModel normalised = model;
      normalised.mean = o.mean, normalised.std = o.std;
      out.sample = prepare_image(name, image, -1, o.geometry, normalised);
    }
  } catch (const Error& e) {
    throw ClientError(400, e.what());
  }
  return out;
}

/// The tokens the model sees at the input's size; 413 when their attention and its gradients
/// would take more than --max-attention-mb.
int64_t checked_tokens(const Sample& sample, const std::string& name, const models::ViTConfig& c,
                       const ServeLimits& limits) {
  const int64_t H = sample.input.size(1), W = sample.input.size(2);
  const int64_t tokens = c.prefix_tokens() + (H / c.patch) * (W / c.patch);
  const double attention_mb =
      2.0 * c.depth * c.heads * static_cast<double>(tokens) * tokens * 4 / (1 << 20);
  if (attention_mb > static_cast<double>(limits.max_attention_mb))
    throw ClientError(413, fmt::format("{}: at {}x{} the model sees {} tokens, whose attention "
                                       "and gradients take {:.0f} MB, over the limit of {} MB "
                                       "(--max-attention-mb); use resize \"model\" or a smaller "
                                       "factor",
                                       name, H, W, tokens, attention_mb, limits.max_attention_mb));
  return tokens;
}

/// The top five classes, the predicted one and the target, with their probabilities.
json prediction_json(const Pass& pass, const std::vector<std::string>& classes) {
  const auto p = ops::softmax(pass.logits.to(kFloat32), -1).to_vector<double>();
  std::vector<int64_t> order(p.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  json top = json::array();
  for (size_t k = 0; k < std::min<size_t>(5, order.size()); ++k)
    top.push_back({{"class", order[k]}, {"name", classes[order[k]]}, {"probability", p[order[k]]}});
  const int64_t target = pass.targets.at(0);
  return {{"top", top},
          {"predicted", order[0]},
          {"target", target},
          {"target_name", classes[target]},
          {"target_probability", p[target]}};
}

/// How the answer's maps are drawn: over the image shown, enlarged to 224 pixels or more.
struct Drawing {
  const Tensor& display;  // [C, H, W] in [0, 1]
  const RequestOptions& o;
  int64_t H, W, enlarge;
  /// A map [H, W] in [0, 1] as a PNG data: URI.
  std::string operator()(const Tensor& map) const {
    return png_uri(draw_map(display, map, o.style, o.colormap, o.alpha, enlarge));
  }
  /// Per head [heads, gh, gw] at image resolution, each min-max scaled and drawn.
  json per_head(const Tensor& grids) const {
    const Tensor up = minmax(upsample(grids, H, W, o.method.upsample));
    json pngs = json::array();
    for (int64_t h = 0; h < up.size(0); ++h) pngs.push_back((*this)(up.select(0, h)));
    return pngs;
  }
};

/// One method's part of the answer: its picture (activation-max's the optimised image,
/// un-normalised; every other method's its map), and what else it gives.
json method_json(Method m, const Explanation& e, bool cached, const Drawing& draw) {
  const RequestOptions& o = draw.o;
  const auto picture = [&] {
    return png_uri(explain::enlarge(to_rgb8(unnormalised(e.picture.select(0, 0), o.mean, o.std)),
                                    draw.enlarge));
  };
  json r = {{"method", method_name(m)},
            {"png", e.picture.defined() ? picture() : draw(e.map.select(0, 0))},
            {"cached", cached}};
  if (e.picture.defined())
    r["activation_max"] = {{"start", e.start_score[0]}, {"end", e.end_score[0]}};
  if (m == Method::Qkv) {  // per head: the query-key scores, the values' norms
    r["patch"] = {e.query_row, e.query_col};
    r["head_pngs"] = draw.per_head(e.heads.select(0, 0));
    r["value_pngs"] = draw.per_head(e.values.select(0, 0));
  }
  if (e.mask.defined())
    r["mask_png"] = draw(upsample(e.mask, draw.H, draw.W, o.method.upsample).select(0, 0));
  if (!e.completeness_gap.empty()) r["completeness_gap"] = e.completeness_gap[0];
  if (o.grids && e.grid.defined())
    r["grid"] = {{"rows", e.grid.size(1)},
                 {"cols", e.grid.size(2)},
                 {"values", e.grid.to(kFloat64).contiguous().to_vector<double>()}};
  return r;
}

/// Every head of the layer, DINO's figure; with a threshold, each head's mask.
json heads_json(const Pass& pass, const Drawing& draw, int64_t depth) {
  const Options& m = draw.o.method;
  Tensor per_head;
  (void)attention_map(pass, m.layer, -1, &per_head);
  const Tensor heads = per_head.select(0, 0);  // [heads, gh, gw]
  json masks = json::array();
  if (m.threshold > 0) {
    const Tensor mask_up = upsample(threshold_mask(heads, m.threshold), draw.H, draw.W, m.upsample);
    for (int64_t h = 0; h < heads.size(0); ++h) masks.push_back(draw(mask_up.select(0, h)));
  }
  return {
      {"layer", (m.layer + depth) % depth}, {"pngs", draw.per_head(heads)}, {"mask_pngs", masks}};
}

/// The mean attention distance [layers][heads], pixels.
json distance_json(const Pass& pass, int64_t patch, DistanceNorm norm) {
  const Tensor distance_lh = attention_distance(pass, patch, norm);
  const int64_t L = distance_lh.size(0), nh = distance_lh.size(1);
  const auto dist = distance_lh.to_vector<double>();
  json distance = json::array();
  for (int64_t l = 0; l < L; ++l)
    distance.push_back(std::vector<double>(dist.begin() + l * nh, dist.begin() + (l + 1) * nh));
  return distance;
}

}  // namespace

Explanation ExplainService::method_result(CachedImage& cached, Method m, const RequestOptions& o,
                                          bool& from_cache) {
  // One method from the cached pass (the same call as the command line's).
  const auto compute = [&] {
    return explain::explain(*model_.model, {.images = cached.sample.input.unsqueeze(0),
                                            .methods = {m},
                                            .options = o.method,
                                            .pass = &cached.pass})
        .explanations.front();
  };
  from_cache = false;
  if (m != Method::SmoothGrad && m != Method::IntegratedGradients) return compute();
  // SmoothGrad's and integrated gradients' results, kept by their options.
  const Options& p = o.method;
  const std::string k = m == Method::SmoothGrad
                            ? fmt::format("sg/{}/{}/{}", p.samples, p.sigma, p.seed)
                            : fmt::format("ig/{}/{}/{}", p.steps, static_cast<int>(p.ig_rule),
                                          static_cast<int>(p.baseline));
  auto it = cached.slow.find(k);
  from_cache = it != cached.slow.end();
  if (!from_cache) it = cached.slow.emplace(k, compute()).first;
  return it->second;
}

json ExplainService::run(std::string_view bytes, const RequestOptions& o, const std::string& name,
                         clock::time_point deadline) {
  const auto t_start = clock::now();
  const RequestImage image = decode_request_image(bytes, name, o, model_, limits_);
  const double decode_seconds = seconds_since(t_start);
  const models::ViTConfig& c = model_.vit->config();
  const int64_t tokens = checked_tokens(image.sample, name, c, limits_);
  const int64_t H = image.sample.input.size(1), W = image.sample.input.size(2);

  // The pass: cached by the file's bytes and everything that changes it.
  const std::string key = fmt::format(
      "{:016x}/{}/{}/{}/{}/{}/{}/{}", std::hash<std::string_view>{}(bytes), bytes.size(),
      o.geometry.resize, o.geometry.crop, static_cast<int>(o.method.pos_interp), o.target,
      (o.method.layer + c.depth) % c.depth, o.normalise);
  bool hit = false;
  std::shared_ptr<CachedImage> cached = cached_pass(key, image.sample, o, hit);
  if (hit) {
    std::lock_guard lock(mutex_);
    ++stats_.pass_cache_hits;
  }
  const Pass& pass = cached->pass;
  const Drawing draw{cached->sample.display, o, H, W, enlargement(H, W)};
  const Rgb8 shown = to_rgb8(draw.display);

  json out;
  out["image"] = {{"name", name},
                  {"format", image.header.format},
                  {"width", image.header.width},
                  {"height", image.header.height}};
  out["input"] = {
      {"height", H},
      {"width", W},
      {"grid", {pass.grid_h, pass.grid_w}},
      {"tokens", tokens},
      {"normalisation", {{"from", o.normalise}, {"mean", o.mean}, {"std", o.std}}},
      {"png", png_uri(draw.enlarge > 1 ? explain::enlarge(shown, draw.enlarge) : shown)}};
  out["timings"] = {{"decode", decode_seconds},
                    {hit               ? "pass (cached)"
                     : model_.headless ? "forward"
                                       : "forward + backward",
                     hit ? 0.0 : cached->pass_seconds}};
  if (!model_.headless) out["prediction"] = prediction_json(pass, model_.classes);
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
    bool from_cache = false;
    const Explanation e = method_result(*cached, m, o, from_cache);
    json r = method_json(m, e, from_cache, draw);
    r["seconds"] = seconds_since(t0);
    methods.push_back(std::move(r));
  }
  out["methods"] = std::move(methods);
  if (o.heads) {
    check_time("the heads");
    out["heads"] = heads_json(pass, draw, c.depth);
  }
  out["attention_distance"] = distance_json(pass, model_.patch, o.method.distance_norm);
  return out;
}

}  // namespace vitrine::explain
