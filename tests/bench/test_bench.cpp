// vitrine-bench: its measures (analytic FLOPs, statistics of repeats) and the program end to end
// on a tiny model config, with its bad-input cases and exit codes.
#include <dlfcn.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/thread_wait.h"
#include "models/resnet.h"
#include "test_util.h"
#include "tools/bench/bench.h"

using namespace vitrine;
using namespace vt_test;
using json = nlohmann::json;

TEST_CASE("bench: forward FLOPs of the fmnist preset, counted by hand") {
  // 49 patches of 1x4x4 into 128: 2*49*16*128; per block with N = 50 tokens, D = 128, M = 256:
  // qkv 2*50*128*384 + scores and weighted sum 4*50*50*128 + proj 2*50*128*128 + MLP 4*50*128*256;
  // six blocks; head 2*128*10.
  const double block =
      2.0 * 50 * 128 * 384 + 4.0 * 50 * 50 * 128 + 2.0 * 50 * 128 * 128 + 4.0 * 50 * 128 * 256;
  const double expected = 2.0 * 49 * 16 * 128 + 6 * block + 2.0 * 128 * 10;
  const auto c = models::ViTConfig::preset("fmnist");
  CHECK(bench::forward_flops(c) == expected);
  CHECK(expected == 86526464.0);  // the figure bench/torch_bench.py --self-check prints
  CHECK(bench::train_flops(c) == 3 * expected);
}

TEST_CASE("bench: forward FLOPs of vitrine-train's ResNet-8, measured from its layers") {
  // 1x28x28, width 16: the stem 1 -> 16 (3x3, 784 positions); layer1 two 3x3 16 -> 16; layer2 a
  // stride-2 3x3 16 -> 32 and a 3x3 32 -> 32 on 196 positions with a 1x1 16 -> 32 shortcut;
  // layer3 the same at 64 channels on 49; fc 64 -> 10.
  const double expected = 2.0 * 784 * 16 * 9 + 2 * (2.0 * 784 * 16 * 144) + 2.0 * 196 * 32 * 144 +
                          2.0 * 196 * 32 * 288 + 2.0 * 196 * 32 * 16 + 2.0 * 49 * 64 * 288 +
                          2.0 * 49 * 64 * 576 + 2.0 * 49 * 64 * 32 + 2.0 * 64 * 10;
  models::ResNetConfig c = models::ResNetConfig::preset("resnet8");
  c.channels = 1;
  c.image_h = c.image_w = 28;
  models::ResNet model(c);
  model.train();
  CHECK(bench::forward_flops(model, {1, 1, 28, 28}) == expected);
  CHECK(model.is_training());  // restored
  CHECK_FALSE(model.has_forward_hooks_below());
}

TEST_CASE("bench: a block's products in a training step of the fmnist preset, and their timing") {
  // 128 images of 50 tokens: 6400 rows; dim 128, qkv 384, MLP 256.
  const auto c = models::ViTConfig::preset("fmnist");
  const std::vector<bench::Product> ps = bench::block_products(c, 128);
  REQUIRE(ps.size() == 12);
  auto is = [](const bench::Product& p, const char* name, int64_t M, int64_t N, int64_t K, bool at,
               bool bt) {
    CAPTURE(p.name);
    CHECK(p.name == name);
    CHECK(p.M == M);
    CHECK(p.N == N);
    CHECK(p.K == K);
    CHECK(p.a_trans == at);
    CHECK(p.b_trans == bt);
  };
  is(ps[0], "qkv forward", 6400, 384, 128, false, true);
  is(ps[1], "qkv dx", 6400, 128, 384, false, false);
  is(ps[2], "qkv dW", 384, 128, 6400, true, false);
  is(ps[4], "proj dx", 6400, 128, 128, false, false);
  is(ps[7], "fc1 dx", 6400, 128, 256, false, false);
  is(ps[9], "fc2 forward", 6400, 128, 256, false, true);
  is(ps[10], "fc2 dx", 6400, 256, 128, false, false);
  is(ps[11], "fc2 dW", 128, 256, 6400, true, false);
  // The forward products are forward_flops' linear layers of one block, per image; dx and dW
  // each cost as much again.
  double fwd = 0, dx = 0, dw = 0;
  for (size_t i = 0; i < ps.size(); i += 3) {
    fwd += ps[i].flops();
    dx += ps[i + 1].flops();
    dw += ps[i + 2].flops();
  }
  CHECK(fwd == 128 * (2.0 * 50 * 128 * 384 + 2.0 * 50 * 128 * 128 + 4.0 * 50 * 128 * 256));
  CHECK(dx == fwd);
  CHECK(dw == fwd);

  // Timed: a product the own GEMM takes gets a rate; one it declines (under 48 rows), 0.
  const bool own = cpu::gemm_policy() != cpu::GemmPolicy::Off;
  CHECK((bench::own_sgemm_gflops(bench::block_products(c, 2)[0], 2, 2) > 0) == own);
  CHECK(bench::own_sgemm_gflops({"small", 40, 64, 64, false, false}, 2, 2) == 0);
  CHECK((bench::fma_peak_gflops(1) > 0) == cpu::cpu_has_avx512());
}

TEST_CASE("bench: statistics of repeats (median of odd and even counts, min, max)") {
  bench::Stats s = bench::stats_of({3, 1, 2});
  CHECK(s.median == 2);
  CHECK(s.min == 1);
  CHECK(s.max == 3);
  CHECK(s.runs == std::vector<double>{3, 1, 2});  // in the order measured
  CHECK(bench::stats_of({4, 1, 3, 2}).median == 2.5);
  CHECK(bench::stats_of({}).median == 0);
  CHECK(bench::time_repeats([] {}, 2, 3, 4).size() == 3);
}

TEST_CASE("bench-cli: a tiny config end to end, then bad input with its messages") {
  TempDir dir;
  {
    std::ofstream f(dir / "tiny.json");
    f << R"({"image_size": 8, "patch": 4, "channels": 1, "num_classes": 3, "dim": 8,
             "depth": 1, "heads": 2, "mlp_dim": 16})";
  }
  const std::string exe = VITRINE_BENCH_EXE;
  ProcessResult r = run_process(
      exe,
      {"--model", dir / "tiny.json", "--batch", "4", "--warmup", "1", "--repeats", "2", "--steps",
       "1", "--threads", "1", "--what", "train,infer,explain,gemm", "--json", dir / "out.json"},
      dir, "tiny");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("images/s") != std::string::npos);
  CHECK(r.output.find("integrated-gradients") != std::string::npos);
  const json j = json::parse(read_text(dir / "out.json"));
  CHECK(j["framework"] == "vitrine");
  CHECK(j["batch"] == 4);
  CHECK(j["threads"] == 1);
  CHECK(j["params"].get<int64_t>() > 0);
  for (const char* part : {"train", "infer"}) {
    CAPTURE(part);
    CHECK(j[part]["images_per_s"]["median"].get<double>() > 0);
    CHECK(j[part]["images_per_s"]["runs"].size() == 2);
    CHECK(j[part]["gflops"].get<double>() > 0);
    CHECK(j[part]["peak_share"].get<double>() > 0);
  }
  CHECK(j["sgemm_peak_gflops"].get<double>() > 0);
  CHECK(j["memory"]["peak_rss_mb"].get<double>() >= j["memory"]["train_peak_mb"].get<double>());
  // Every relevance map of the explain registry ("all"): today's eight, and any added later.
  for (const char* m : {"attention", "rollout", "grad-rollout", "chefer", "gradcam", "saliency",
                        "smoothgrad", "integrated-gradients"})
    CHECK_MESSAGE(j["explain"].contains(m), m);
  CHECK(j["explain"]["chefer"]["median"].get<double>() > 0);
  // --what gemm: the FMA peak and the own GEMM on the in-cache product and the block's 12, which
  // it declines at width 8 (fewer than 16 columns or a depth under 8): OpenBLAS's.
  if (cpu::cpu_has_avx512()) {
    CHECK(j["gemm_products"]["fma_peak_gflops"]["1"].get<double>() > 0);
    REQUIRE(j["gemm_products"]["products"].size() == 13);
    CHECK(j["gemm_products"]["products"][1]["name"] == "qkv forward");
    CHECK(j["gemm_products"]["products"][1]["M"] == 4 * 5);  // 4 images of 4 patches + 1
    CHECK(j["gemm_products"]["products"][1]["gflops"] == 0);
    CHECK(r.output.find("(not taken: OpenBLAS's)") != std::string::npos);
    if (cpu::gemm_policy() != cpu::GemmPolicy::Off)
      CHECK(j["gemm_products"]["products"][0]["gflops"].get<double>() > 0);
  } else {
    CHECK(r.output.find("own GEMM: not on this CPU (it needs AVX-512)") != std::string::npos);
  }

  r = run_process(exe, {"--model", "bogus", "--json", dir / "bad.json"}, dir, "bogus");
  CHECK(r.code == 1);
  CHECK(r.output.find("model config 'bogus': not a preset name") != std::string::npos);
  r = run_process(exe, {"--model", dir / "tiny.json", "--what", "nope", "--json", dir / "bad.json"},
                  dir, "what");
  CHECK(r.code == 1);
  CHECK(r.output.find("--what: unknown part 'nope' (expected train, infer, explain or gemm") !=
        std::string::npos);
  r = run_process(exe,
                  {"--model", dir / "tiny.json", "--what", "gemm", "--device", "cuda", "--json",
                   dir / "bad.json"},
                  dir, "gemm_cuda");
  CHECK(r.code == 1);
  CHECK(r.output.find("--what gemm: times the CPU's own GEMM, not a product on cuda") !=
        std::string::npos);
  // Any model vitrine-train takes: a ResNet preset, and --set as vitrine-train's.
  r = run_process(exe,
                  {"--model", "fmnist", "--set", "model.arch=resnet", "--set", "model.width=4",
                   "--batch", "2", "--warmup", "1", "--repeats", "1", "--steps", "1", "--threads",
                   "1", "--json", dir / "resnet.json"},
                  dir, "resnet");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("ResNet-8, 1x28x28 input, 10 classes, width 4") != std::string::npos);
  const json jr = json::parse(read_text(dir / "resnet.json"));
  CHECK(jr["arch"] == "resnet");
  CHECK(jr["sets"] == json::array({"model.arch=resnet", "model.width=4"}));
  CHECK(jr["flops_per_image"]["forward"].get<double>() > 0);
  CHECK(jr["train"]["images_per_s"]["median"].get<double>() > 0);
  r = run_process(exe, {"--model", "resnet8", "--what", "explain", "--json", dir / "bad.json"}, dir,
                  "resnet_explain");
  CHECK(r.code == 1);
  CHECK(
      r.output.find("--what explain: times a Vision Transformer's parts; this model is ResNet-8") !=
      std::string::npos);
  r = run_process(exe, {"--set", "optim.lr=1", "--json", dir / "bad.json"}, dir, "set_optim");
  CHECK(r.code == 1);
  CHECK(r.output.find("--set optim.lr=1: vitrine-bench sets the model's keys only") !=
        std::string::npos);
  r = run_process(exe, {"--batch", "0"}, dir, "batch");
  CHECK(r.code == 2);
  CHECK(r.output.find("--batch") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "bad.json"));  // no output from a failed run
}

TEST_CASE("bench-cli: idle threads wait as Vitrine's default says, unless the user chose") {
  // libgomp reads GOMP_SPINCOUNT once, in its initialiser: with OMP_DISPLAY_ENV=verbose it prints
  // the value it read, which must be Vitrine's default when neither variable was set
  // (backends/cpu/thread_wait.h: libvitrine_thread_wait.so is initialised before libgomp).
  TempDir dir;
  write_file(dir / "tiny.json", R"({"image_size": 8, "patch": 4, "channels": 1,
      "num_classes": 3, "dim": 8, "depth": 1, "heads": 2, "mlp_dim": 16})");
  const std::vector<std::string> bench = {VITRINE_BENCH_EXE,
                                          "--model",
                                          dir / "tiny.json",
                                          "--batch",
                                          "4",
                                          "--warmup",
                                          "0",
                                          "--repeats",
                                          "1",
                                          "--steps",
                                          "1",
                                          "--threads",
                                          "2",
                                          "--what",
                                          "infer"};
  const auto run = [&](std::vector<std::string> env, const std::string& name) {
    std::vector<std::string> args = {"-u", "OMP_WAIT_POLICY", "-u", "GOMP_SPINCOUNT",
                                     "OMP_DISPLAY_ENV=verbose"};
    args.insert(args.end(), env.begin(), env.end());
    args.insert(args.end(), bench.begin(), bench.end());
    return run_process("env", args, dir, name);
  };
  // libgomp's display; LLVM's libomp (the clang sanitizer build) reads neither variable and
  // prints its own, so there only the report is checked.
  const bool libgomp = dlsym(RTLD_DEFAULT, "kmp_set_blocktime") == nullptr;
  ProcessResult r = run({}, "default");
  INFO(r.output);
  REQUIRE(r.code == 0);
  if (libgomp)
    CHECK(r.output.find(fmt::format("GOMP_SPINCOUNT = '{}'", cpu::kDefaultSpinCount)) !=
          std::string::npos);
  CHECK(r.output.find(fmt::format("idle threads wait: GOMP_SPINCOUNT={} (Vitrine's default)",
                                  cpu::kDefaultSpinCount)) != std::string::npos);

  r = run({"OMP_WAIT_POLICY=PASSIVE"}, "passive");
  INFO(r.output);
  REQUIRE(r.code == 0);
  if (libgomp) {
    CHECK(r.output.find("OMP_WAIT_POLICY = 'PASSIVE'") != std::string::npos);
    CHECK(r.output.find("GOMP_SPINCOUNT = '0'") != std::string::npos);
  }
  CHECK(r.output.find("idle threads wait: OMP_WAIT_POLICY=PASSIVE (set by the user)") !=
        std::string::npos);

  r = run({"GOMP_SPINCOUNT=1234"}, "spincount");
  INFO(r.output);
  REQUIRE(r.code == 0);
  if (libgomp) CHECK(r.output.find("GOMP_SPINCOUNT = '1234'") != std::string::npos);
  CHECK(r.output.find("idle threads wait: GOMP_SPINCOUNT=1234 (set by the user)") !=
        std::string::npos);
}
