// vitrine-bench: how fast does Vitrine train and run a model (a ViT, a ResNet) on this machine, and
// how much of the machine does it use? For a named model config and batch size it times a training
// step (forward, cross-entropy, backward, AdamW) and an inference pass, after warm-up, and reports
// the median and spread over repeats in images per second, the model FLOPs per image (counted
// analytically, bench.h), the GFLOP/s achieved and their share of the machine's own sgemm peak,
// the peak resident memory of training, and (--what explain) the time of every explanation
// method on one image. bench/compare.py runs it side by side with PyTorch (bench/torch_bench.py,
// same flags, same JSON). --what gemm times Vitrine's own GEMM on the products of the config's
// linear layers against the CPU's FMA peak: how much of the machine the products get.
//
//   vitrine-bench --model fmnist --threads 2
//   vitrine-bench --model vit_small_patch16_224 --what explain --json vits.json
//   vitrine-bench --model fmnist --what gemm
//   vitrine-bench --model fmnist --set model.arch=resnet       (vitrine-train's ResNet-8)
//
// Exit codes: 0 done, 1 error, 2 bad command line.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tools/bench/bench.h"
#include "vitrine.h"  // the public API, with the own GEMM's peak (gemm_info.h), threads, memory
// The libraries the programs stand on, each through its installed public API (their
// CMakeLists.txt's install rules): vitrine::tools_common's files.h, vitrine::explain's explain.h
// (the methods, timed by --what explain) and vitrine::train's config.h (a model spec from a config
// and --set overrides).
#include "common/files.h"
#include "explain/explain.h"
#include "train/config.h"

namespace {

using namespace vitrine;
using json = nlohmann::json;
namespace ex = vitrine::explain;

struct Cli {
  std::string model = "fmnist", what = "train,infer", json_path, device = "cpu", precision = "fp32";
  int64_t batch = 0, warmup = 3, repeats = 7, steps = 0;
  int threads = 2;
  std::vector<std::string> sets;
  bool full_last_block = false;
};

/// The batch of each benchmark config: 128 on 28x28 (Fashion-MNIST), 64 on 32x32 (CIFAR-10), 8
/// on larger images (64 on a GPU).
int64_t default_batch(const models::ClassifierSpec& spec, const Device& device) {
  if (spec.image_h <= 28 && spec.image_w <= 28) return 128;
  if (spec.image_h <= 32 && spec.image_w <= 32) return 64;
  return device.is_cpu() ? 8 : 64;
}

/// --model, then each --set as vitrine-train applies it to its config's model section (so
/// `--model fmnist --set model.arch=resnet` is the ResNet-8 vitrine-train trains on
/// Fashion-MNIST: the data's 1x28x28 input and 10 classes).
models::ClassifierSpec model_of(const Cli& cli) {
  models::ClassifierSpec spec = models::resolve_classifier(cli.model);
  if (cli.sets.empty()) return spec;
  json model = spec.config;
  if (spec.arch != "vit") model["arch"] = spec.arch;
  json config = train::with_defaults(json{{"model", model}});
  for (const std::string& s : cli.sets) {
    VT_CHECK(s.rfind("model.", 0) == 0,
             "--set {}: vitrine-bench sets the model's keys only (model.KEY=VALUE)", s);
    train::apply_override(config, s);
  }
  return train::model_spec(config);
}

json throughput(const std::vector<double>& seconds, int64_t images_per_repeat,
                double flops_per_image) {
  std::vector<double> ips;
  for (double s : seconds) ips.push_back(static_cast<double>(images_per_repeat) / s);
  const bench::Stats st = bench::stats_of(ips);
  return {{"images_per_s", bench::to_json(st)}, {"gflops", flops_per_image * st.median / 1e9}};
}

void print_row(const std::string& what, const json& j) {
  const json& s = j["images_per_s"];
  fmt::print("{:<8} {:>10.1f} {:>10.1f} {:>10.1f} {:>9.1f} {:>7.1f}%\n", what,
             s["median"].get<double>(), s["min"].get<double>(), s["max"].get<double>(),
             j["gflops"].get<double>(), 100 * j["peak_share"].get<double>());
}

/// --what gemm: the FMA peak on one thread and on all, then the own GEMM's GFLOP/s on one product
/// whose operands stay in cache (on one thread: the micro-kernel with nothing to wait for) and on
/// each product of a block's linear layers in a training step (bench::block_products).
json time_gemm(const models::ViTConfig& c, int64_t batch, int threads) {
  const double peak1 = bench::fma_peak_gflops(1), peak = bench::fma_peak_gflops(threads);
  json out = {{"fma_peak_gflops", {{"1", peak1}, {std::to_string(threads), peak}}}};
  if (peak <= 0) {
    fmt::print("\nown GEMM: not on this CPU (it needs AVX-512)\n");
    out["products"] = json::array();
    return out;
  }
  fmt::print("\nown GEMM, one block's products at batch {} ({} rows)\n", batch,
             batch * (c.num_patches() + c.prefix_tokens()));
  fmt::print("FMA peak: {:.1f} GFLOP/s on 1 thread, {:.1f} on {}\n", peak1, peak, threads);
  fmt::print("{:<16} {:>6} {:>6} {:>6} {:>9} {:>8}\n", "product", "M", "N", "K", "GFLOP/s",
             "of FMA");
  std::vector<bench::Product> ps = {{"in cache", 48, 64, 256, false, false}};
  for (bench::Product& p : bench::block_products(c, batch)) ps.push_back(std::move(p));
  for (const bench::Product& p : ps) {
    const double g = bench::own_sgemm_gflops(p);
    // Under 2^20 multiply-adds own_sgemm runs on one thread (the in-cache row), so its share is
    // of one thread's peak.
    const double of = p.flops() < 2.0 * (1 << 20) ? peak1 : peak;
    out["products"].push_back({{"name", p.name},
                               {"M", p.M},
                               {"N", p.N},
                               {"K", p.K},
                               {"a_trans", p.a_trans},
                               {"b_trans", p.b_trans},
                               {"gflops", g},
                               {"fma_share", g / of}});
    if (g > 0)
      fmt::print("{:<16} {:>6} {:>6} {:>6} {:>9.1f} {:>7.0f}%\n", p.name, p.M, p.N, p.K, g,
                 100 * g / of);
    else
      fmt::print("{:<16} {:>6} {:>6} {:>6} {:>9} (not taken: OpenBLAS's)\n", p.name, p.M, p.N, p.K,
                 "-");
  }
  return out;
}

json time_explain(models::VisionTransformer& model, const Cli& cli) {
  const auto& c = model.config();
  Generator gen(7);
  Tensor image = ops::randn({1, c.channels, c.image_h, c.image_w}, gen);
  ex::Options opt;
  json out = json::object();
  fmt::print("\nexplain, one {}x{} image (ms, from the image to the map)\n", c.image_h, c.image_w);
  fmt::print("{:<22} {:>9} {:>9} {:>9}\n", "method", "median", "min", "max");
  for (const ex::Method& m : ex::all_methods()) {
    // The one entry point, as vitrine-explain calls it: the pass (its backward when the method
    // needs it), then the method.
    auto once = [&] {
      (void)ex::explain(model, {.images = image, .targets = {-1}, .methods = {m}, .options = opt});
    };
    std::vector<double> ms;
    for (double s : bench::time_repeats(once, 1, cli.repeats, 1)) ms.push_back(1e3 * s);
    const bench::Stats st = bench::stats_of(ms);
    out[ex::method_name(m)] = bench::to_json(st, false);
    fmt::print("{:<22} {:>9.1f} {:>9.1f} {:>9.1f}\n", ex::method_name(m), st.median, st.min,
               st.max);
  }
  return out;
}

/// --what's parts, checked against the model.
std::vector<std::string> parts_of(const std::string& list, const models::ClassifierSpec& spec) {
  std::vector<std::string> what;
  for (size_t a = 0; a <= list.size();) {
    size_t b = list.find(',', a);
    if (b == std::string::npos) b = list.size();
    std::string w = list.substr(a, b - a);
    VT_CHECK(w == "train" || w == "infer" || w == "explain" || w == "gemm",
             "--what: unknown part '{}' (expected train, infer, explain or gemm, comma-separated)",
             w);
    VT_CHECK(spec.arch == "vit" || (w != "explain" && w != "gemm"),
             "--what {}: times a Vision Transformer's parts; this model is {}", w, spec.describe());
    what.push_back(w);
    a = b + 1;
  }
  return what;
}

/// What a timed step or pass works on: the model on its device, a random batch, the repeats.
struct Workload {
  nn::Module& model;
  Tensor images, labels;
  int64_t batch, steps;
  std::function<void()> sync;  // a GPU's wait for the results (empty on the CPU)
  double forward_flops;
};

/// Training steps (forward, cross-entropy, backward, AdamW): j["train"] and j["memory"].
void time_training(const Workload& w, const Cli& cli, const Device& device, double baseline,
                   json& j) {
  w.model.train();
  nn::optim::AdamWOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.05;
  nn::optim::AdamW opt(w.model.parameters(), o);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = ops::cross_entropy(w.model(w.images), w.labels);
    loss.backward();
    opt.step();
  };
  j["train"] = throughput(bench::time_repeats(step, cli.warmup, cli.repeats, w.steps, w.sync),
                          w.batch * w.steps, 3 * w.forward_flops);
  const double peak_rss = bench::peak_rss_mb();
  j["memory"] = {{"baseline_rss_mb", baseline},
                 {"peak_rss_mb", peak_rss},
                 {"train_peak_mb", peak_rss - baseline}};
  if (!device.is_cpu())
    j["memory"]["device_peak_mb"] = static_cast<double>(memory_stats(device).peak) / (1 << 20);
}

/// The machine: the sgemm peak (measured last, so that its buffers stay out of the training
/// memory peak), the CPU's GEMM and how idle threads wait. Returns the peak.
double time_machine(const Device& device, json& j) {
  const double peak = bench::sgemm_peak_gflops(2048, 5, device);
  j["sgemm_peak_gflops"] = peak;
  fmt::print("sgemm peak: {:.1f} GFLOP/s (one {}x{} matmul, best of 5)\n", peak, 2048, 2048);
  if (device.is_cpu()) {
    const CpuGemmInfo g = cpu_gemm_info();
    j["gemm"] = {{"openblas_core", g.openblas_core},
                 {"openblas_current", g.openblas_current},
                 {"own_gemm", g.own_gemm}};
    fmt::print("matrix products: OpenBLAS kernels {}{}; Vitrine's own GEMM takes {}\n",
               g.openblas_core, g.openblas_current ? "" : " (a fallback for this CPU)", g.own_gemm);
    j["thread_wait"] = thread_wait_policy();
    fmt::print("idle threads wait: {}\n", thread_wait_policy());
  }
  return peak;
}

/// The throughput table and the training memory, as printed.
void print_results(json& j, double peak, double baseline) {
  if (j.contains("train") || j.contains("infer"))
    fmt::print("\n{:<8} {:>10} {:>10} {:>10} {:>9} {:>8}\n", "", "images/s", "min", "max",
               "GFLOP/s", "of peak");
  for (const char* part : {"train", "infer"}) {
    if (!j.contains(part)) continue;
    j[part]["peak_share"] = peak > 0 ? j[part]["gflops"].get<double>() / peak : 0.0;
    print_row(part, j[part]);
  }
  if (j.contains("memory"))
    fmt::print(
        "\ntraining peak memory: {:.1f} MiB resident ({:.1f} MiB above the {:.1f} MiB "
        "before the model)\n",
        j["memory"]["peak_rss_mb"].get<double>(), j["memory"]["train_peak_mb"].get<double>(),
        baseline);
}

int run(const Cli& cli) {
  set_num_threads(cli.threads);
  const models::ClassifierSpec spec = model_of(cli);
  const Device device = Device::parse(cli.device);
  const int64_t batch = cli.batch > 0 ? cli.batch : default_batch(spec, device);
  const int64_t steps = cli.steps > 0 ? cli.steps : (spec.image_h >= 224 ? 2 : 5);
  const std::vector<std::string> what = parts_of(cli.what, spec);
  auto wants = [&](const char* w) { return std::find(what.begin(), what.end(), w) != what.end(); };

  const double baseline = bench::current_rss_mb();
  Generator gen(0);
  const std::shared_ptr<nn::Module> model = spec.build(gen);
  auto* vit_model = dynamic_cast<models::VisionTransformer*>(model.get());
  if (vit_model) vit_model->class_token_shortcut = !cli.full_last_block;
  // FLOPs per image: a ViT's analytic count (bench.h), any other model's measured one.
  const double forward_flops =
      vit_model ? bench::forward_flops(vit_model->config())
                : bench::forward_flops(*model, {1, spec.channels, spec.image_h, spec.image_w});
  VT_CHECK(!wants("gemm") || device.is_cpu(),
           "--what gemm: times the CPU's own GEMM, not a product on {} (use --device cpu)",
           cli.device);
  model->to(device);
  set_float32_matmul_precision(float32_matmul_precision_for(cli.precision));
  // A GPU runs asynchronously: a timed repeat ends when its results could be read (one element
  // of a parameter, which the last step's update wrote). The CPU needs no wait.
  std::function<void()> sync;
  if (!device.is_cpu())
    sync = [&] { (void)model->parameters().back().reshape({-1}).select(0, 0).item(); };
  int64_t params = 0;
  for (const Tensor& p : model->parameters()) params += p.numel();

  json j = {{"framework", "vitrine"},
            {"version", "0.1"},
            {"variant", cli.full_last_block ? "full last block" : ""},
            {"model", cli.model},
            {"sets", cli.sets},
            {"arch", spec.arch},
            {"batch", batch},
            {"threads", cli.threads},
            {"device", cli.device},
            {"precision", cli.precision},
            {"params", params},
            {"flops_per_image", {{"forward", forward_flops}, {"train", 3 * forward_flops}}}};
  fmt::print("vitrine-bench: {} ({}; {} parameters), batch {}, {} thread(s), device {}\n",
             cli.model, spec.describe(), params, batch, cli.threads, cli.device);
  fmt::print("model GFLOPs per image: forward {:.4f}, training step {:.4f}\n", forward_flops / 1e9,
             3 * forward_flops / 1e9);

  Generator data_gen(1);
  const Workload w{
      *model,
      ops::randn({batch, spec.channels, spec.image_h, spec.image_w}, data_gen).to(device),
      ops::randint(0, spec.num_classes, {batch}, data_gen).to(device),
      batch,
      steps,
      sync,
      forward_flops};
  if (wants("train")) time_training(w, cli, device, baseline, j);
  if (wants("infer")) {
    model->eval();
    NoGradGuard no_grad;
    auto pass = [&] { (void)(*model)(w.images); };
    j["infer"] = throughput(bench::time_repeats(pass, cli.warmup, cli.repeats, steps, sync),
                            batch * steps, forward_flops);
  }
  print_results(j, time_machine(device, j), baseline);
  if (wants("gemm")) j["gemm_products"] = time_gemm(vit_model->config(), batch, cli.threads);
  if (wants("explain")) {
    model->eval();
    j["explain"] = time_explain(*vit_model, cli);
  }
  if (!cli.json_path.empty())
    vitrine::tools::write_file_atomically(cli.json_path, j.dump(1) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  CLI::App app{
      "vitrine-bench: training and inference speed of a model config (a ViT, a ResNet), and of "
      "a ViT's explanation methods",
      "vitrine-bench"};
  app.add_option("--model", cli.model,
                 "a model config: fmnist, cifar10, vit_small_patch16_224, resnet8 (any preset of "
                 "any architecture), or a JSON file: a model config or a vitrine-train config "
                 "(its model section)");
  app.add_option("--set", cli.sets,
                 "change the model as vitrine-train's --set does: --set model.arch=resnet (the "
                 "ResNet-8 on the config's input and classes), --set model.depth=20 (repeatable)");
  app.add_option("--batch", cli.batch,
                 "images per step (default: 28x28 inputs 128, 32x32 64, else 8; on a GPU 64)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", cli.threads, "OpenMP and OpenBLAS threads")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--warmup", cli.warmup, "untimed steps first")->check(CLI::Range(0, 1 << 20));
  app.add_option("--repeats", cli.repeats, "timed repeats (median and spread over these)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", cli.steps, "steps per repeat (default 5, 2 at 224x224)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--what", cli.what,
                 "train, infer, explain, gemm (the own GEMM on the config's products against the "
                 "FMA peak; comma-separated)");
  app.add_flag("--full-last-block", cli.full_last_block,
               "compute every token's row in the last block, as timm does (the default computes "
               "the class token's only when the head reads nothing else: "
               "VisionTransformer::class_token_shortcut)");
  app.add_option("--json", cli.json_path, "also write the results as JSON here");
  app.add_option("--device", cli.device, "cpu or cuda[:N]");
  app.add_option("--precision", cli.precision,
                 "a GPU's float32 products: fp32, tf32 or bf16 (as train.precision)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error
    return rc == 0 ? 0 : 2;
  }
  try {
    return run(cli);
  } catch (const std::exception& e) {
    fmt::print(stderr, "vitrine-bench: {}\n", e.what());
    return 1;
  }
}
