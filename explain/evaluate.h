// How good is an explanation? Three kinds of numbers, for every method and two baselines:
//
//  - Faithfulness (Petsiuk et al., RISE, 2018): delete the patches in the order of the map's
//    relevance, k per step, and watch the target's probability fall (deletion: the faster the
//    better, a low area under the curve); or start from nothing and insert them in that order
//    (insertion: a high area is better).
//  - Localisation: on images whose object box is known (the pasted Fashion-MNIST benchmark,
//    nn/data/pasted.h), does the map's maximum fall in the box (pointing game), and what share of
//    its positive relevance lies inside (energy in the box)?
//  - Sanity (Adebayo et al., 2018): re-initialise the model's layers from the top, one more at
//    each step (cascading randomisation); a method whose map stays the same (high rank
//    correlation with the trained model's map) is not explaining the model.
//
// Baselines give the numbers their meaning: "random" (uniform noise on the patch grid) and
// "centre" (a Gaussian at the image's centre, sigma a quarter of the grid).
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "explain/explain.h"
#include "nn/data/pasted.h"

namespace vitrine::explain {

/// What replaces a removed patch (deletion) and what the insertion curve starts from.
enum class Removal {
  Zero,  // a black pixel: Options::black per channel (0 before normalisation), or 0
  Mean,  // the image's mean per channel
  Blur,  // the image blurred as integrated gradients' blur baseline (kernel 11, sigma 5)
};
std::string removal_name(Removal r);
Removal parse_removal(const std::string& name);

/// A classifier as a function: images [M, C, H, W] -> logits [M, K] (no gradient needed).
using LogitsFn = std::function<Tensor(const Tensor& images)>;
/// The model (any image classifier) in eval mode, no grad, at most `chunk` images per forward.
LogitsFn logits_of(nn::Module& model, int64_t chunk = 256);

struct CurveOptions {
  int64_t patches_per_step = 4;
  Removal removal = Removal::Zero;
  std::vector<float> black;  // the model-input value of a black pixel per channel (Zero)
};

/// Per image, the target's softmax probability after each step, [B][S + 1], and the areas.
struct Curves {
  std::vector<std::vector<double>> deletion, insertion;
  std::vector<double> deletion_auc, insertion_auc;
};

/// Deletion and insertion curves. For image b with grid map g [gh, gw], the patches are ranked
/// by g, highest first (ties by raster index); with k patches per step and n patches there are
/// S = ceil(n / k) steps:
///   deletion point s:  x with the first s k patches replaced by the removal baseline
///   insertion point s: the removal baseline with the first s k patches of x
/// for s = 0..S, each scored by softmax(f(.))[target]. All 2 (S + 1) images of an image go
/// through f together: a curve costs a few batched forwards, not one per step.
Curves deletion_insertion(const LogitsFn& f, const Tensor& images,
                          const std::vector<int64_t>& targets, const Tensor& grid, int64_t patch,
                          const CurveOptions& options);

/// The area under a curve of S + 1 points spread evenly over [0, 1] (trapezoid rule).
double auc(const std::vector<double>& curve);

/// Pointing game: is the map's maximum [H, W] (the first in raster order) inside the box?
bool pointing_hit(const Tensor& map, const nn::data::Box& box);
/// Energy in the box: sum of max(0, map) inside the box / sum of max(0, map) (0 for a map with
/// no positive value).
double energy_in_box(const Tensor& map, const nn::data::Box& box);
/// The same for an image with several objects: a hit when the maximum is inside any box; the
/// energy inside their union (a pixel in two boxes counts once).
bool pointing_hit(const Tensor& map, const std::vector<nn::data::Box>& boxes);
double energy_in_box(const Tensor& map, const std::vector<nn::data::Box>& boxes);

/// Each image's object boxes (one or more), in the model input's pixels.
using ImageBoxes = std::vector<std::vector<nn::data::Box>>;

/// The baselines on the patch grid, [B, gh, gw]: uniform noise (seeded), and a Gaussian centred
/// on the grid, sigma = grid size / 4 per axis.
Tensor random_grid(int64_t B, int64_t gh, int64_t gw, uint64_t seed);
Tensor centre_grid(int64_t B, int64_t gh, int64_t gw);

/// Spearman's rank correlation (Pearson's on ranks, ties sharing their mean rank); 0 when
/// either side is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

/// Mean and 95% interval (mean -/+ 1.96 standard errors) of per-image values.
struct Stat {
  double mean = 0, lo = 0, hi = 0;
  int64_t n = 0;
};
Stat summarize(const std::vector<double>& values);

/// The cascading randomisation's steps, top first: "logits" (head, final norms, pre_logits),
/// "block L-1", ..., "block 0", "embedding" (patch embedding, tokens, position embedding).
std::vector<std::string> randomisation_steps(const models::ViTConfig& config);
/// A copy of the model whose first `steps` randomisation steps are re-initialised as a fresh
/// model of the same config would be (Generator(seed)); the rest keeps the trained weights.
std::shared_ptr<models::VisionTransformer> randomised_copy(const models::VisionTransformer& model,
                                                           int64_t steps, uint64_t seed);

/// The cascading randomisation's steps of any model, top first: its state's names grouped by
/// their first component, a Sequential's children one by one ("fc", "layer3.2", "layer3.1", ...,
/// "layer1.0", "bn1", "conv1" for a ResNet), in the reverse of the order the state lists them.
std::vector<std::string> randomisation_steps(const nn::Module& model);

/// A fresh model of the same architecture (the sanity checks' randomised weights).
using ModelBuilder = std::function<std::shared_ptr<nn::Module>(Generator& gen)>;

/// A copy of any model whose first `steps` randomisation steps (randomisation_steps(model)) take
/// the weights and buffers of build(Generator(seed)); the rest keeps the trained ones.
std::shared_ptr<nn::Module> randomised_copy(const nn::Module& model, const ModelBuilder& build,
                                            int64_t steps, uint64_t seed);

struct EvalOptions {
  std::vector<Method> methods = all_methods();
  Options explain;  // the methods' options (samples, steps, ...)
  CurveOptions curves;
  int64_t sanity_images = 100;  // the first images of the set; 0 skips the sanity checks
  int64_t chunk = 50;           // images explained at once
  uint64_t seed = 0;            // the random baseline and the randomised weights
  /// A model other than a ViT, which has no patches: the side of the squares of pixels the maps
  /// are ranked by and deleted in (4: a 7x7 grid on 28x28 images).
  int64_t cell = 4;
};

/// Every row's per-image values (rows: the methods, then "random" and "centre").
struct EvalResult {
  std::vector<std::string> rows;
  int64_t images = 0;
  std::map<std::string, std::vector<double>> deletion_auc, insertion_auc;
  std::map<std::string, std::vector<double>> pointing, energy;  // with boxes only
  /// The mean curve over images, per row.
  std::map<std::string, std::vector<double>> deletion_curve, insertion_curve;
  std::vector<std::string> sanity_steps;
  /// Per row (methods only), per step, per image: Spearman's rho between the trained model's map
  /// and the randomised one's.
  std::map<std::string, std::vector<std::vector<double>>> sanity;
  double seconds = 0;
};

/// Runs the whole evaluation on images [N, C, H, W] (normalised) with their targets (-1:
/// predicted) and, when known, each image's object boxes (pointing game and energy).
/// progress(stage, done, total) is called as it goes (may be empty).
EvalResult evaluate(models::VisionTransformer& model, const Tensor& images,
                    const std::vector<int64_t>& targets, const std::optional<ImageBoxes>& boxes,
                    const EvalOptions& options,
                    const std::function<void(const std::string&, int64_t, int64_t)>& progress = {});

/// The same for any image classifier (a ResNet, a model of your own): the methods of
/// explain(model, layer, ...) (gradcam at the submodule named gradcam_layer, saliency, smoothgrad,
/// integrated-gradients), each map ranked on the grid of options.cell-pixel squares; the sanity
/// checks re-initialise randomisation_steps(model) from a fresh build(gen) (an empty build skips
/// them).
EvalResult evaluate(nn::Module& model, const std::string& gradcam_layer, const ModelBuilder& build,
                    const Tensor& images, const std::vector<int64_t>& targets,
                    const std::optional<ImageBoxes>& boxes, const EvalOptions& options,
                    const std::function<void(const std::string&, int64_t, int64_t)>& progress = {});

/// The tables as Markdown: one per metric group (faithfulness, localisation, sanity), methods x
/// metrics, "mean [lo, hi]".
std::string to_markdown(const EvalResult& r);
nlohmann::json to_json(const EvalResult& r);

}  // namespace vitrine::explain
