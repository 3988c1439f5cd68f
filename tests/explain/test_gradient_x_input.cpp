// gradient-x-input (explain/methods/gradient_x_input.cpp), the method added as one file:
// registered after integrated-gradients and part of "all"; x * d y_c / d x worked out by hand on
// a linear model (whose gradient is its weight row); on a ViT, |x| times saliency's |gradient|;
// and on the command line, to the bit the library's, in --evaluate too.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "explain/explain.h"
#include "explain/model.h"
#include "explain/npy.h"
#include "nn/containers.h"
#include "nn/layers.h"
#include "nn/pool.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vt_test;
namespace ex = vitrine::explain;

namespace {

/// max over channels of |a| for a [B, C, H, W] tensor, as [B, H, W] doubles.
std::vector<double> max_abs_over_channels(const Tensor& a) {
  const int64_t B = a.size(0), C = a.size(1), HW = a.size(2) * a.size(3);
  const auto v = a.to(kCPU).contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(B * HW), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i)
        out[b * HW + i] = std::max(out[b * HW + i], std::abs(v[(b * C + c) * HW + i]));
  return out;
}

}  // namespace

TEST_CASE("gradient-x-input: registered after integrated-gradients, in all, from the pass") {
  const ex::Method* m = ex::find_method("gradient-x-input");
  REQUIRE(m != nullptr);
  CHECK(!m->extra());
  CHECK(m->needs().gradients);
  CHECK(m->needs().input_gradient);
  CHECK(m->needs().class_score);
  CHECK(!m->help().empty());
  const std::vector<std::string> names = ex::method_names(false);
  const auto it = std::find(names.begin(), names.end(), "gradient-x-input");
  REQUIRE(it != names.end());
  REQUIRE(it != names.begin());
  CHECK(*(it - 1) == "integrated-gradients");
  const auto all = ex::parse_methods("all");
  CHECK(std::find(all.begin(), all.end(), *m) != all.end());
}

TEST_CASE("gradient-x-input: a linear model's attribution is x times its weight row") {
  // y = W flatten(x) + b: d y_c / d x = W[c], so the attribution is x * W[c] and its sum is
  // y_c - b_c (gradient x input is exact for a linear model).
  constexpr int64_t B = 2, C = 3, H = 4, W = 6, K = 5;
  Generator gen(3);
  auto linear = std::make_shared<nn::Linear>(C * H * W, K, true, gen);
  nn::Sequential model({std::make_shared<nn::Flatten>(), linear});
  const Tensor x = ops::randn({B, C, H, W}, gen);
  ex::Request r;
  r.images = x;
  r.targets = {1, 4};
  r.methods = ex::parse_methods("gradient-x-input");
  r.cell = 2;
  const ex::Result res = ex::explain(model, r);
  REQUIRE(res.explanations.size() == 1);
  const ex::Explanation& e = res.explanations[0];
  CHECK(e.method.name() == "gradient-x-input");
  const auto xv = x.to_vector<double>(), wv = linear->weight.to_vector<double>();
  std::vector<double> want(static_cast<size_t>(B * H * W), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) {
        const int64_t f = c * H * W + i;
        const double a = xv[b * C * H * W + f] * wv[r.targets[b] * C * H * W + f];
        want[b * H * W + i] = std::max(want[b * H * W + i], std::abs(a));
      }
  check_close(e.raw, ops::from_vector(want, {B, H, W}), 1e-6, 1e-6);
  CHECK(e.grid.shape() == Dims{B, H / 2, W / 2});
  check_close(e.grid, ex::patch_mean(e.raw, 2), 0, 0);
  CHECK(ops::max(e.map).item() == 1.0);
  CHECK(ops::min(e.map).item() == 0.0);
}

TEST_CASE("gradient-x-input: a ViT's is |x| times saliency's |gradient|, from the shared pass") {
  Generator gen(11);
  models::VisionTransformer model(tiny_vit_config(8, 12, 2), gen);
  Generator xg(4);
  const Tensor x = ops::randn({3, 2, 8, 12}, xg);
  const auto es =
      ex::explain(model, x, {-1, 2, 0}, ex::parse_methods("saliency,gradient-x-input"), {});
  REQUIRE(es.size() == 2);
  // saliency's map is max_c |g|; here max_c |x_c g_c|, from the same pass's gradient.
  std::vector<int64_t> t;
  const ex::Attribution s = ex::saliency(model, x, {-1, 2, 0}, &t);
  const auto want = max_abs_over_channels(ops::abs(x) * s.values);
  check_close(es[1].raw, ops::from_vector(want, {3, 8, 12}), 1e-5, 1e-6);
  check_close(es[1].grid, ex::patch_mean(es[1].raw, 4), 0, 0);
  CHECK(es[1].completeness_gap.empty());
}

TEST_CASE("vitrine-explain --method gradient-x-input: the library's map, and a row of --evaluate") {
  TempDir dir;
  Generator xg(8);
  const Tensor x = ops::randn({2, 1, 28, 28}, xg);
  ex::write_npy(dir / "x.npy", x);
  const std::string out = dir / "out";
  const auto r = run_process(VITRINE_EXPLAIN_EXE,
                             {"--checkpoint", "random:fmnist", "--seed", "5", "--input", "x.npy",
                              "--method", "gradient-x-input", "--out", out},
                             dir, "gxi");
  INFO(r.output);
  REQUIRE(r.code == 0);
  // The same model and input in the library, on one thread as the program ran.
  ex::ModelSource source;
  source.checkpoint = "random:fmnist";
  source.seed = 5;
  const ex::LoadedModel l = ex::load_model(source);
  const Threads one(1);
  ex::Request req;
  req.images = x;
  req.targets = {-1, -1};
  req.methods = ex::parse_methods("gradient-x-input");
  const ex::Result lib = ex::explain(*l.model, req);
  check_close(ex::read_npy(out + "/gradient-x-input.npy"), lib.explanations[0].map, 0, 0);
  CHECK(std::filesystem::file_size(out + "/000/gradient-x-input.png") > 100);

  const std::string ev = dir / "ev";
  const auto e =
      run_process(VITRINE_EXPLAIN_EXE,
                  {"--checkpoint", "random:fmnist", "--input", "x.npy", "--evaluate", "--method",
                   "saliency,gradient-x-input", "--sanity-count", "1", "--out", ev},
                  dir, "gxi_evaluate");
  INFO(e.output);
  REQUIRE(e.code == 0);
  const auto j = nlohmann::json::parse(read_text(ev + "/evaluation.json"));
  CHECK(j["rows"] == nlohmann::json({"saliency", "gradient-x-input", "random", "centre"}));
  CHECK(j["results"].contains("gradient-x-input"));
}
