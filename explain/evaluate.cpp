#include "explain/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "explain/detail.h"
#include "nn/state.h"
#include "ops/ops.h"

namespace vitrine::explain {

using json = nlohmann::json;

namespace {

using detail::values;

/// The removal baseline for images [B, C, H, W].
Tensor removal_image(const Tensor& images, const CurveOptions& o) {
  switch (o.removal) {
    case Removal::Zero: {
      Options io;
      io.black = o.black;
      return ig_baseline(images, io);
    }
    case Removal::Mean:
      return ops::mean(images, {2, 3}, true).expand(images.shape()).contiguous();
    case Removal::Blur: {
      Options io;
      io.baseline = IgBaseline::Blur;
      return ig_baseline(images, io);
    }
  }
  return Tensor();
}

/// Patch indices of a grid, most relevant first (ties by raster index).
std::vector<int64_t> ranking(const double* g, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [g](int64_t a, int64_t b) { return g[a] > g[b]; });
  return order;
}

/// Ranks (1-based), ties sharing their mean rank.
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&v](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + j) + 2) / 2;
    for (size_t k = i; k <= j; ++k) r[order[k]] = mean_rank;
    i = j + 1;
  }
  return r;
}

/// Image b's raw map as doubles.
std::vector<double> image_map(const Tensor& maps, int64_t b) { return values(maps.select(0, b)); }

/// `fresh` holding the trained model's state except for the names randomise(name) picks (which
/// keep fresh's initial values), on the trained model's device and dtype, in eval mode.
template <typename M>
std::shared_ptr<M> mix_state(const nn::Module& trained, std::shared_ptr<M> fresh,
                             const std::function<bool(const std::string&)>& randomise) {
  const auto kept = trained.state_dict();
  const auto init = fresh->state_dict();
  VT_CHECK(kept.size() == init.size(),
           "explain: the fresh model has {} state entries, the trained one {} (it must be the "
           "same architecture)",
           init.size(), kept.size());
  nn::NamedTensors state;
  for (size_t i = 0; i < kept.size(); ++i)
    state.emplace_back(kept[i].first,
                       (randomise(kept[i].first) ? init[i] : kept[i]).second.to(kCPU));
  nn::load_state_dict(*fresh, state);
  fresh->to(detail::model_device(trained));
  fresh->to(detail::model_dtype(trained));
  fresh->eval();
  return fresh;
}

}  // namespace

std::string removal_name(Removal r) {
  switch (r) {
    case Removal::Zero:
      return "zero";
    case Removal::Mean:
      return "mean";
    case Removal::Blur:
      return "blur";
  }
  return "?";
}

Removal parse_removal(const std::string& name) {
  for (Removal r : {Removal::Zero, Removal::Mean, Removal::Blur})
    if (removal_name(r) == name) return r;
  fail("explain: unknown removal '{}' (known: zero, mean, blur)", name);
}

LogitsFn logits_of(nn::Module& model, int64_t chunk) {
  return [&model, chunk](const Tensor& images) {
    NoGradGuard ng;
    detail::EvalMode eval(model);
    const Device dev = detail::model_device(model);
    const DType dt = detail::model_dtype(model);
    std::vector<Tensor> out;
    for (int64_t s = 0; s < images.size(0); s += chunk) {
      const int64_t n = std::min(chunk, images.size(0) - s);
      out.push_back(model.forward(images.narrow(0, s, n).to(dev).to(dt)).to(kCPU));
    }
    return ops::cat(out, 0);
  };
}

Curves deletion_insertion(const LogitsFn& f, const Tensor& images,
                          const std::vector<int64_t>& targets, const Tensor& grid, int64_t patch,
                          const CurveOptions& o) {
  VT_CHECK(o.patches_per_step >= 1, "explain: patches per step must be >= 1, got {}",
           o.patches_per_step);
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t gh = grid.size(1), gw = grid.size(2), n = gh * gw;
  VT_CHECK(gh * patch == H && gw * patch == W,
           "explain: a {}x{} grid of {}-pixel patches does not cover {}x{} images", gh, gw, patch,
           H, W);
  VT_CHECK(static_cast<int64_t>(targets.size()) == B, "explain: {} targets for {} images",
           targets.size(), B);
  const int64_t S = (n + o.patches_per_step - 1) / o.patches_per_step;
  const Tensor x = images.to(kCPU).to(kFloat32).contiguous();
  const Tensor base = removal_image(x, o).to(kFloat32).contiguous();
  const auto g = values(grid);
  Curves out;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> order = ranking(g.data() + b * n, n);
    // 2 (S + 1) images: deletion points 0..S, then insertion points 0..S.
    Tensor batch = ops::empty({2 * (S + 1), C, H, W});
    float* dst = batch.data<float>();
    const float* xs = x.data<float>() + b * C * H * W;
    const float* bs = base.data<float>() + b * C * H * W;
    std::vector<char> removed(static_cast<size_t>(n), 0);
    for (int64_t s = 0; s <= S; ++s) {
      for (int64_t k = (s - 1) * o.patches_per_step;
           s > 0 && k < std::min(n, s * o.patches_per_step); ++k)
        removed[order[k]] = 1;
      float* del = dst + s * C * H * W;
      float* ins = dst + (S + 1 + s) * C * H * W;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t xx = 0; xx < W; ++xx) {
            const int64_t i = (c * H + y) * W + xx;
            const bool gone = removed[(y / patch) * gw + xx / patch];
            del[i] = gone ? bs[i] : xs[i];
            ins[i] = gone ? xs[i] : bs[i];
          }
    }
    const Tensor probs = ops::softmax(f(batch).to(kFloat32), -1);
    const auto p = values(probs.select(1, targets[b]));
    out.deletion.emplace_back(p.begin(), p.begin() + S + 1);
    out.insertion.emplace_back(p.begin() + S + 1, p.end());
    out.deletion_auc.push_back(auc(out.deletion.back()));
    out.insertion_auc.push_back(auc(out.insertion.back()));
  }
  return out;
}

double auc(const std::vector<double>& curve) {
  if (curve.size() < 2) return curve.empty() ? 0 : curve[0];
  double s = 0;
  for (size_t i = 0; i + 1 < curve.size(); ++i) s += (curve[i] + curve[i + 1]) / 2;
  return s / static_cast<double>(curve.size() - 1);
}

bool pointing_hit(const Tensor& map, const nn::data::Box& box) {
  const int64_t W = map.size(1);
  const auto m = values(map);
  const auto best = std::max_element(m.begin(), m.end()) - m.begin();
  return box.contains(best / W, best % W);
}

double energy_in_box(const Tensor& map, const nn::data::Box& box) {
  const int64_t W = map.size(1);
  const auto m = values(map);
  double inside = 0, total = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const double v = std::max(0.0, m[i]);
    total += v;
    if (box.contains(static_cast<int64_t>(i) / W, static_cast<int64_t>(i) % W)) inside += v;
  }
  return total > 0 ? inside / total : 0;
}

bool pointing_hit(const Tensor& map, const std::vector<nn::data::Box>& boxes) {
  return std::any_of(boxes.begin(), boxes.end(),
                     [&](const nn::data::Box& b) { return pointing_hit(map, b); });
}

double energy_in_box(const Tensor& map, const std::vector<nn::data::Box>& boxes) {
  const int64_t W = map.size(1);
  const auto m = values(map);
  double inside = 0, total = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const double v = std::max(0.0, m[i]);
    const int64_t y = static_cast<int64_t>(i) / W, x = static_cast<int64_t>(i) % W;
    total += v;
    if (std::any_of(boxes.begin(), boxes.end(),
                    [&](const nn::data::Box& b) { return b.contains(y, x); }))
      inside += v;
  }
  return total > 0 ? inside / total : 0;
}

Tensor random_grid(int64_t B, int64_t gh, int64_t gw, uint64_t seed) {
  Generator gen(seed);
  return ops::rand({B, gh, gw}, gen);
}

Tensor centre_grid(int64_t B, int64_t gh, int64_t gw) {
  std::vector<double> v;
  const double cy = (static_cast<double>(gh) - 1) / 2, cx = (static_cast<double>(gw) - 1) / 2;
  const double sy = static_cast<double>(gh) / 4, sx = static_cast<double>(gw) / 4;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t y = 0; y < gh; ++y)
      for (int64_t x = 0; x < gw; ++x)
        v.push_back(std::exp(-0.5 * (std::pow((y - cy) / sy, 2) + std::pow((x - cx) / sx, 2))));
  return ops::from_vector(v, {B, gh, gw}, kFloat32);
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  VT_CHECK(a.size() == b.size(), "spearman: {} values against {}", a.size(), b.size());
  const auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n;
  const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

Stat summarize(const std::vector<double>& v) {
  Stat s;
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  const double n = static_cast<double>(v.size());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  const double se = v.size() > 1 ? std::sqrt(ss / (n - 1) / n) : 0;
  s.lo = s.mean - 1.96 * se;
  s.hi = s.mean + 1.96 * se;
  return s;
}

std::vector<std::string> randomisation_steps(const models::ViTConfig& config) {
  std::vector<std::string> steps{"logits"};
  for (int64_t l = config.depth - 1; l >= 0; --l) steps.push_back(fmt::format("block {}", l));
  steps.push_back("embedding");
  return steps;
}

std::shared_ptr<models::VisionTransformer> randomised_copy(const models::VisionTransformer& model,
                                                           int64_t steps, uint64_t seed) {
  const auto& c = model.config();
  const auto names = randomisation_steps(c);
  VT_CHECK(steps >= 0 && steps <= static_cast<int64_t>(names.size()),
           "explain: {} randomisation steps asked, the model has {}", steps, names.size());
  Generator gen(seed);
  // Which step re-initialises each state name.
  auto step_of = [&](const std::string& name) -> int64_t {
    if (name.starts_with("blocks.")) {
      const int64_t l = std::stoll(name.substr(7, name.find('.', 7) - 7));
      return 1 + (c.depth - 1 - l);
    }
    if (name.starts_with("patch_embed") || name == "cls_token" || name == "pos_embed" ||
        name == "reg_token" || name == "register_tokens")
      return 1 + c.depth;
    return 0;  // head, norm, fc_norm, pre_logits
  };
  return mix_state(model, std::make_shared<models::VisionTransformer>(c, gen),
                   [&](const std::string& name) { return step_of(name) < steps; });
}

namespace {

/// What the evaluation needs of a kind of model.
struct Explainer {
  int64_t patch = 1;  // the grid's cell in pixels
  /// The methods on a chunk of images: one Explanation each, its grid on the patch grid; the
  /// targets with -1 replaced go to resolved.
  std::function<std::vector<Explanation>(nn::Module& m, const Tensor& x,
                                         const std::vector<int64_t>& t,
                                         std::vector<int64_t>& resolved)>
      run;
  std::vector<std::string> steps;  // the randomisation steps (empty: no sanity checks)
  std::function<std::shared_ptr<nn::Module>(int64_t steps)> randomised;
};

EvalResult evaluate_with(
    nn::Module& model, const Explainer& ex, const Tensor& images,
    const std::vector<int64_t>& targets, const std::optional<ImageBoxes>& boxes,
    const EvalOptions& o,
    const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t N = images.size(0), H = images.size(2), W = images.size(3);
  const int64_t patch = ex.patch;
  VT_CHECK(static_cast<int64_t>(targets.size()) == N, "explain: {} targets for {} images",
           targets.size(), N);
  const std::vector<Method> maps = all_methods();
  for (Method m : o.methods)
    VT_CHECK(std::find(maps.begin(), maps.end(), m) != maps.end(),
             "explain: {} gives no relevance map of the image to evaluate (--evaluate takes "
             "the methods of all)",
             method_name(m));
  VT_CHECK(!boxes || static_cast<int64_t>(boxes->size()) == N, "explain: {} boxes for {} images",
           boxes ? boxes->size() : 0, N);
  VT_CHECK(H % patch == 0 && W % patch == 0,
           "explain: the {}x{} images are not a whole number of {}x{} cells", H, W, patch, patch);
  EvalResult r;
  r.images = N;
  for (Method m : o.methods) r.rows.push_back(method_name(m));
  r.rows.push_back("random");
  r.rows.push_back("centre");
  // The curves' logits with the methods' position-embedding resize (a ViT at another size).
  detail::VitForward fwd(model, o.explain.pos_interp);
  const LogitsFn f = logits_of(model, 256);
  const int64_t n_sanity = ex.steps.empty() ? 0 : std::min(o.sanity_images, N);
  std::map<std::string, std::vector<std::vector<double>>> trained_maps;  // sanity references
  std::vector<int64_t> resolved;

  auto score = [&](const std::string& row, const Tensor& x, const std::vector<int64_t>& t,
                   const Tensor& grid, const Tensor& raw, int64_t start) {
    const Curves c = deletion_insertion(f, x, t, grid, patch, o.curves);
    auto add_curves = [](std::vector<double>& sum, const std::vector<std::vector<double>>& cs) {
      for (const auto& curve : cs) {
        if (sum.empty()) sum.assign(curve.size(), 0.0);
        for (size_t i = 0; i < curve.size(); ++i) sum[i] += curve[i];
      }
    };
    add_curves(r.deletion_curve[row], c.deletion);
    add_curves(r.insertion_curve[row], c.insertion);
    auto& d = r.deletion_auc[row];
    d.insert(d.end(), c.deletion_auc.begin(), c.deletion_auc.end());
    auto& in = r.insertion_auc[row];
    in.insert(in.end(), c.insertion_auc.begin(), c.insertion_auc.end());
    if (boxes)
      for (int64_t b = 0; b < x.size(0); ++b) {
        const auto& box = (*boxes)[start + b];
        r.pointing[row].push_back(pointing_hit(raw.select(0, b), box) ? 1.0 : 0.0);
        r.energy[row].push_back(energy_in_box(raw.select(0, b), box));
      }
  };

  for (int64_t start = 0; start < N; start += o.chunk) {
    const int64_t n = std::min(o.chunk, N - start);
    const Tensor x = images.narrow(0, start, n).contiguous();
    const std::vector<int64_t> t(targets.begin() + start, targets.begin() + start + n);
    std::vector<int64_t> chunk_targets;
    const std::vector<Explanation> es = ex.run(model, x, t, chunk_targets);
    resolved.insert(resolved.end(), chunk_targets.begin(), chunk_targets.end());
    for (const Explanation& e : es) {
      score(method_name(e.method), x, chunk_targets, e.grid, e.raw, start);
      for (int64_t b = 0; b < n && start + b < n_sanity; ++b)
        trained_maps[method_name(e.method)].push_back(image_map(e.raw, b));
    }
    const int64_t gh = H / patch, gw = W / patch;
    const Tensor rnd = random_grid(n, gh, gw, o.seed + static_cast<uint64_t>(start));
    score("random", x, chunk_targets, rnd, upsample(rnd, H, W), start);
    const Tensor ctr = centre_grid(n, gh, gw);
    score("centre", x, chunk_targets, ctr, upsample(ctr, H, W), start);
    if (progress) progress("explained", start + n, N);
  }
  for (const std::string& row : r.rows) {
    for (double& v : r.deletion_curve[row]) v /= static_cast<double>(N);
    for (double& v : r.insertion_curve[row]) v /= static_cast<double>(N);
  }

  if (n_sanity > 0) {
    r.sanity_steps = ex.steps;
    const int64_t steps = static_cast<int64_t>(r.sanity_steps.size());
    for (int64_t s = 1; s <= steps; ++s) {
      auto rm = ex.randomised(s);
      for (int64_t start = 0; start < n_sanity; start += o.chunk) {
        const int64_t n = std::min(o.chunk, n_sanity - start);
        const Tensor x = images.narrow(0, start, n).contiguous();
        // The same classes as the trained model explained, not the random model's predictions.
        const std::vector<int64_t> t(resolved.begin() + start, resolved.begin() + start + n);
        std::vector<int64_t> unused;
        for (const Explanation& e : ex.run(*rm, x, t, unused)) {
          auto& per_step = r.sanity[method_name(e.method)];
          per_step.resize(static_cast<size_t>(steps));
          for (int64_t b = 0; b < n; ++b)
            per_step[s - 1].push_back(
                spearman(trained_maps[method_name(e.method)][start + b], image_map(e.raw, b)));
        }
      }
      if (progress) progress("randomised", s, steps);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

/// The first dotted component of a state name, with a Sequential's index kept ("layer3.2").
std::string step_of(const std::string& name) {
  const size_t a = name.find('.');
  if (a == std::string::npos) return name;
  const size_t b = name.find('.', a + 1);
  if (b == std::string::npos) return name.substr(0, a);
  const std::string second = name.substr(a + 1, b - a - 1);
  const bool index = !second.empty() && std::all_of(second.begin(), second.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  return index ? name.substr(0, b) : name.substr(0, a);
}

}  // namespace

EvalResult evaluate(models::VisionTransformer& model, const Tensor& images,
                    const std::vector<int64_t>& targets, const std::optional<ImageBoxes>& boxes,
                    const EvalOptions& o,
                    const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  Explainer ex;
  ex.patch = model.config().patch;
  // explain's one entry point: its pass honours the options (--pos-interp, the layer), and runs
  // the backward only when a method needs it.
  ex.run = [&o](nn::Module& m, const Tensor& x, const std::vector<int64_t>& t,
                std::vector<int64_t>& resolved) {
    Result r = explain(m, {.images = x, .targets = t, .methods = o.methods, .options = o.explain});
    resolved = r.targets;
    return std::move(r.explanations);
  };
  ex.steps = randomisation_steps(model.config());
  ex.randomised = [&model, &o](int64_t steps) -> std::shared_ptr<nn::Module> {
    return randomised_copy(model, steps, o.seed + 1);
  };
  return evaluate_with(model, ex, images, targets, boxes, o, progress);
}

EvalResult evaluate(nn::Module& model, const std::string& gradcam_layer, const ModelBuilder& build,
                    const Tensor& images, const std::vector<int64_t>& targets,
                    const std::optional<ImageBoxes>& boxes, const EvalOptions& o,
                    const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  if (auto* vit = dynamic_cast<models::VisionTransformer*>(&model))
    return evaluate(*vit, images, targets, boxes, o, progress);
  VT_CHECK(o.cell >= 1, "explain: the cell size must be positive, got {}", o.cell);
  Explainer ex;
  ex.patch = o.cell;
  // explain's one entry point, as the ViT's (the request names Grad-CAM's layer).
  ex.run = [&o, &gradcam_layer](nn::Module& m, const Tensor& x, const std::vector<int64_t>& t,
                                std::vector<int64_t>& resolved) {
    Result r = explain(m, {.images = x,
                           .targets = t,
                           .methods = o.methods,
                           .options = o.explain,
                           .gradcam_layer = gradcam_layer,
                           .cell = o.cell});
    resolved = r.targets;
    for (Explanation& e : r.explanations) e.grid = patch_mean(e.raw, o.cell);  // one grid for all
    return std::move(r.explanations);
  };
  if (build) {
    ex.steps = randomisation_steps(model);
    ex.randomised = [&model, &build, &o](int64_t steps) {
      return randomised_copy(model, build, steps, o.seed + 1);
    };
  }
  return evaluate_with(model, ex, images, targets, boxes, o, progress);
}

std::vector<std::string> randomisation_steps(const nn::Module& model) {
  std::vector<std::string> steps;
  for (const auto& [name, t] : model.state_dict()) {
    const std::string s = step_of(name);
    if (std::find(steps.begin(), steps.end(), s) == steps.end()) steps.push_back(s);
  }
  std::reverse(steps.begin(), steps.end());
  return steps;
}

std::shared_ptr<nn::Module> randomised_copy(const nn::Module& model, const ModelBuilder& build,
                                            int64_t steps, uint64_t seed) {
  const auto names = randomisation_steps(model);
  VT_CHECK(steps >= 0 && steps <= static_cast<int64_t>(names.size()),
           "explain: {} randomisation steps asked, the model has {}", steps, names.size());
  Generator gen(seed);
  const std::vector<std::string> randomise(names.begin(), names.begin() + steps);
  return mix_state(model, build(gen), [&](const std::string& name) {
    return std::find(randomise.begin(), randomise.end(), step_of(name)) != randomise.end();
  });
}

namespace {

std::string cell(const std::vector<double>& v, int digits = 3) {
  if (v.empty()) return "-";
  const Stat s = summarize(v);
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", s.mean, digits, s.lo, digits, s.hi, digits);
}

json stat_json(const std::vector<double>& v) {
  const Stat s = summarize(v);
  return {{"mean", s.mean}, {"lo", s.lo}, {"hi", s.hi}, {"n", s.n}};
}

}  // namespace

std::string to_markdown(const EvalResult& r) {
  std::string md;
  const bool loc = !r.pointing.empty();
  md += fmt::format("Faithfulness{} over {} images (mean [95% interval]):\n\n",
                    loc ? " and localisation" : "", r.images);
  md += "| method | deletion AUC (lower is better) | insertion AUC (higher is better) |";
  md += loc ? " pointing game | energy in box |\n|---|---|---|---|---|\n" : "\n|---|---|---|\n";
  for (const std::string& row : r.rows) {
    md += fmt::format("| {} | {} | {} |", row, cell(r.deletion_auc.at(row)),
                      cell(r.insertion_auc.at(row)));
    if (loc) md += fmt::format(" {} | {} |", cell(r.pointing.at(row)), cell(r.energy.at(row)));
    md += "\n";
  }
  if (!r.sanity_steps.empty()) {
    const size_t n = r.sanity.empty() ? 0 : r.sanity.begin()->second[0].size();
    md += fmt::format(
        "\nSanity (cascading randomisation from the top; Spearman rank correlation with the "
        "trained model's map, {} images; near 1: the map ignores the model):\n\n| method |",
        n);
    for (const auto& s : r.sanity_steps) md += fmt::format(" {} |", s);
    md += "\n|---|";
    for (size_t i = 0; i < r.sanity_steps.size(); ++i) md += "---|";
    md += "\n";
    for (const std::string& row : r.rows) {
      if (!r.sanity.count(row)) continue;
      md += fmt::format("| {} |", row);
      for (const auto& per_image : r.sanity.at(row)) md += fmt::format(" {} |", cell(per_image, 2));
      md += "\n";
    }
  }
  return md;
}

nlohmann::json to_json(const EvalResult& r) {
  json j = {{"images", r.images}, {"seconds", r.seconds}, {"rows", r.rows}};
  json rows = json::object();
  for (const std::string& row : r.rows) {
    json x = {{"deletion_auc", stat_json(r.deletion_auc.at(row))},
              {"insertion_auc", stat_json(r.insertion_auc.at(row))},
              {"deletion_curve", r.deletion_curve.at(row)},
              {"insertion_curve", r.insertion_curve.at(row)}};
    if (r.pointing.count(row)) {
      x["pointing"] = stat_json(r.pointing.at(row));
      x["energy"] = stat_json(r.energy.at(row));
    }
    if (r.sanity.count(row)) {
      json steps = json::array();
      for (const auto& per_image : r.sanity.at(row)) steps.push_back(stat_json(per_image));
      x["sanity"] = steps;
    }
    rows[row] = x;
  }
  j["results"] = rows;
  j["sanity_steps"] = r.sanity_steps;
  return j;
}

}  // namespace vitrine::explain
