// vitrine-explain as a user runs it: a separate process on a tiny random ViT saved as a
// checkpoint, with PNG images and a model-input .npy the test writes. Its .npy maps must be the
// library's, its output folder complete, and every bad input a message, a non-zero exit and no
// output folder (nothing half-written).
#include <cmath>
#include <filesystem>
#include <fstream>

#include "browser.h"
#include "explain/explain.h"
#include "explain/npy.h"
#include "models/resnet.h"
#include "nn/state.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace fs = std::filesystem;
namespace ex = vitrine::explain;

namespace {

const std::string kExe = VITRINE_EXPLAIN_EXE;

models::ViTConfig cli_config() { return cli_vit_config(); }

/// A 28 x 28 grey image: a bright square at (y, x) on a dark ramp.
std::vector<uint8_t> square_image(int y0, int x0, int w = 28, int h = 28) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      px[y * w + x] = (y >= y0 && y < y0 + 8 && x >= x0 && x < x0 + 8) ? 230 : (x + y) % 60;
  return px;
}

/// The shared set-up: a checkpoint with config, normalisation and class names, three images.
/// (It holds no tensors: a static that outlives the backends' own statics must not free any.)
struct Setup {
  TempDir dir;
  std::string checkpoint = dir / "model.safetensors";
  Setup() {
    Generator gen(21);
    auto model = std::make_shared<models::VisionTransformer>(cli_config(), gen);
    nn::Metadata md;
    nn::set_metadata_json(md, nn::kMeanKey, std::vector<double>{0.25});
    nn::set_metadata_json(md, nn::kStdKey, std::vector<double>{0.5});
    nn::set_metadata_json(md, nn::kClassesKey, std::vector<std::string>{"shirt", "bag", "boot"});
    models::save_vit_timm(checkpoint, *model, md);
    write_png(dir / "a.png", 28, 28, 1, square_image(2, 3));
    write_png(dir / "b.png", 28, 28, 1, square_image(15, 18));
    write_png(dir / "wide.png", 40, 36, 1, square_image(10, 10, 40, 36));
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

/// Runs vitrine-explain in the set-up's folder.
ProcessResult explain_run(const std::vector<std::string>& args, const std::string& name) {
  return run_process(kExe, args, setup().dir, name);
}

/// A folder's entries (names), sorted; empty when it does not exist.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// No output folder and no temporary folder beside it.
void check_nothing_written(const std::string& out) {
  CHECK_MESSAGE(!fs::exists(out), out, " exists after a failed run");
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos,
                  e.path().string(), " was left behind");
}

}  // namespace

TEST_CASE("vitrine-explain: every method on image files writes maps, pictures and a report") {
  Setup& s = setup();
  const std::string out = s.dir / "out_files";
  const auto r =
      explain_run({"--checkpoint", s.checkpoint, "a.png", "b.png", "wide.png", "--method", "all",
                   "--out", out, "--samples", "2", "--steps", "4", "--threshold", "0.5"},
                  "files");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("report: " + out + "/index.html") != std::string::npos);
  for (ex::Method m : ex::all_methods()) {
    const std::string name = ex::method_name(m);
    CHECK(ex::read_npy(out + "/" + name + ".npy").shape() == Dims{3, 28, 28});
    CHECK(ex::read_npy(out + "/" + name + ".grid.npy").shape() == Dims{3, 4, 4});
    for (const char* image : {"000", "001", "002"})
      CHECK(fs::file_size(out + "/" + image + "/" + name + ".png") > 100);
  }
  CHECK(ex::read_npy(out + "/attention.heads.npy").shape() == Dims{3, 2, 4, 4});
  CHECK(ex::read_npy(out + "/attention.mask.npy").shape() == Dims{3, 4, 4});
  CHECK(ex::read_npy(out + "/attention-distance.npy").shape() == Dims{2, 2});
  CHECK(ex::read_npy(out + "/logits.npy").shape() == Dims{3, 3});
  CHECK(ex::read_npy(out + "/attention_probs.npy").shape() == Dims{2, 2, 17, 17});
  CHECK(fs::file_size(out + "/000/heads.png") > 100);
  CHECK(fs::file_size(out + "/002/all.png") > 100);
  const json pred = json::parse(read_text(out + "/predictions.json"));
  REQUIRE(pred.size() == 3);
  CHECK(pred[2]["name"] == "wide.png");
  CHECK(pred[0].contains("completeness_gap"));
  const std::string html = read_text(out + "/index.html");
  for (ex::Method m : ex::all_methods()) CHECK(html.find(ex::method_name(m)) != std::string::npos);
  // The report in a real browser: every image decodes, the console stays quiet, nothing is
  // fetched (Debian's chromium, which scripts/install-deps.sh installs).
  if (find_chromium().empty()) {
    MESSAGE("SKIPPED: the browser check of index.html: chromium is not on PATH");
  } else {
    const BrowserCheck b = check_in_browser(out + "/index.html");
    // per image: the original, every method of "all", the head grid and its threshold masks;
    // then a grid (montage) per method
    const int n = static_cast<int>(ex::all_methods().size());
    CHECK(b.images == 3 * (1 + n + 1 + 1) + n);
    CHECK(b.decoded == b.images);
    CHECK(b.console_errors.empty());
    CHECK(b.fetched.empty());
    CHECK(fs::file_size(b.screenshot_path) > 10000);
  }
  CHECK(entries(s.dir.dir.string() + "/out_files").size() > 10);

  // A second run into the same folder replaces it.
  const auto again = explain_run(
      {"--checkpoint", s.checkpoint, "a.png", "--method", "rollout", "--out", out}, "files_again");
  REQUIRE(again.code == 0);
  CHECK(ex::read_npy(out + "/rollout.npy").shape() == Dims{1, 28, 28});
  CHECK(!fs::exists(out + "/chefer.npy"));
}

TEST_CASE("vitrine-explain: with --input its maps are the library's, to the last bit") {
  Setup& s = setup();
  Generator gen(4);
  const Tensor x = ops::randn({2, 1, 28, 28}, gen);
  ex::write_npy(s.dir / "input.npy", x);
  const std::string out = s.dir / "out_input";
  const auto r = explain_run(
      {"--checkpoint", s.checkpoint, "--input",         "input.npy", "--method",      "all",
       "--out",        out,          "--samples",       "3",         "--steps",       "5",
       "--target",     "boot",       "--discard-ratio", "0.5",       "--head-fusion", "max",
       "--layer",      "0",          "--baseline",      "blur",      "--ig-method",   "trapezoid",
       "--seed",       "9"},
      "input");
  INFO(r.output);
  REQUIRE(r.code == 0);
  ex::Options o;
  o.samples = 3;
  o.steps = 5;
  o.discard_ratio = 0.5;
  o.head_fusion = ex::HeadFusion::Max;
  o.layer = 0;
  o.baseline = ex::IgBaseline::Blur;
  o.ig_rule = ex::IgRule::Trapezoid;
  o.seed = 9;
  auto model = models::load_vit(s.checkpoint);
  const Threads one(1);  // as the program ran (run_process): the same computation, the same bits
  const auto results = ex::explain(*model, x, {2, 2}, ex::all_methods(), o);
  for (const auto& e : results) {
    const std::string name = ex::method_name(e.method);
    INFO(name);
    check_close(ex::read_npy(out + "/" + name + ".grid.npy"), e.grid, 0, 0);
    check_close(ex::read_npy(out + "/" + name + ".npy"), e.map, 0, 0);
  }
  const json pred = json::parse(read_text(out + "/predictions.json"));
  CHECK(pred[0]["target"] == 2);
  CHECK(pred[1]["target_name"] == "boot");
}

TEST_CASE("vitrine-explain --evaluate: tables for every method and the baselines, and a report") {
  Setup& s = setup();
  Generator gen(8);
  ex::write_npy(s.dir / "eval_input.npy", ops::randn({3, 1, 28, 28}, gen));
  const std::string out = s.dir / "out_eval";
  const auto r = explain_run({"--checkpoint", s.checkpoint, "--input", "eval_input.npy",
                              "--evaluate", "--samples", "2", "--steps", "3", "--sanity-count", "2",
                              "--patches-per-step", "5", "--removal", "blur", "--out", out},
                             "evaluate");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("| integrated-gradients |") != std::string::npos);
  const json j = json::parse(read_text(out + "/evaluation.json"));
  CHECK(j["images"] == 3);
  CHECK(j["rows"].size() == ex::all_methods().size() + 2);
  CHECK(j["sanity_steps"].size() == 4);  // logits, block 1, block 0, embedding
  // 16 patches, 5 per step: 4 steps, 5 points on each mean curve.
  CHECK(j["results"]["chefer"]["deletion_curve"].size() == 5);
  CHECK(j["results"]["chefer"]["sanity"][3]["n"] == 2);
  CHECK(!j["results"]["random"].contains("sanity"));
  CHECK(!j["results"]["random"].contains("pointing"));  // no boxes without the pasted data set
  CHECK(read_text(out + "/evaluation.md").find("| centre |") != std::string::npos);
  CHECK(read_text(out + "/index.html").find("<svg") != std::string::npos);
  const auto bad =
      explain_run({"--checkpoint", s.checkpoint, "--input", "eval_input.npy", "--evaluate",
                   "--removal", "noise", "--out", s.dir / "out_eval_bad"},
                  "evaluate_bad");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--removal") != std::string::npos);
  check_nothing_written(s.dir / "out_eval_bad");
}

TEST_CASE("vitrine-explain: bad input is a message and a non-zero exit, and nothing is written") {
  Setup& s = setup();
  write_png(s.dir / "tiny.png", 5, 6, 1, std::vector<uint8_t>(30, 9));
  {
    std::ofstream f(s.dir / "broken.png");
    f << "not a png";
  }
  nn::write_safetensors(s.dir / "not_vit.safetensors", {{"encoder.w", ops::ones({2, 2})}});
  // A checkpoint with a NaN weight gave "nan%" predictions and exit 0.
  {
    nn::SafetensorsFile f = nn::read_safetensors(s.checkpoint);
    for (auto& item : f.tensors)
      if (item.first == "head.bias") item.second.data<float>()[0] = std::nanf("");
    nn::write_safetensors(s.dir / "nan.safetensors", f.tensors, f.metadata);
    // Metadata of the wrong type gave a raw "[json.exception.type_error.302]" naming no file.
    f = nn::read_safetensors(s.checkpoint);
    nn::set_metadata_json(f.metadata, nn::kClassesKey, {1, 2, 3});
    nn::write_safetensors(s.dir / "classes.safetensors", f.tensors, f.metadata);
    f.metadata.erase(nn::kClassesKey);
    nn::set_metadata_json(f.metadata, nn::kMeanKey, {0.5});
    nn::set_metadata_json(f.metadata, nn::kStdKey, {0});
    nn::write_safetensors(s.dir / "std0.safetensors", f.tensors, f.metadata);
  }
  // A decompression bomb's header: 20000 x 20000 pixels in 33 bytes.
  {
    std::string png = "\x89PNG\r\n\x1a\n";
    png += std::string("\0\0\0\x0dIHDR\0\0\x4e\x20\0\0\x4e\x20\x08\0\0\0\0", 21);
    png += std::string("\x4a\x4f\x0b\x5e", 4);  // any CRC: the size is refused first
    std::ofstream(s.dir / "bomb.png", std::ios::binary) << png;
  }
  const std::string out = s.dir / "out_bad";
  struct Case {
    std::vector<std::string> args;
    int code;
    std::vector<std::string> message;
  };
  const std::string ck = s.checkpoint;
  const std::vector<Case> cases = {
      {{"--checkpoint", ck, "missing.png"}, 1, {"missing.png"}},
      {{"--checkpoint", ck, "broken.png"}, 1, {"broken.png"}},
      {{"--checkpoint", ck, "tiny.png"}, 1, {"tiny.png", "6x5", "smaller than one 7x7 patch"}},
      {{"--checkpoint", ck, "a.png", "--target", "7"},
       1,
       {"--target 7", "out of range", "3 classes"}},
      {{"--checkpoint", ck, "a.png", "--target", "sock"}, 1, {"--target sock", "shirt, bag, boot"}},
      {{"--checkpoint", ck, "a.png", "--method", "rollout,lime"}, 1, {"unknown method 'lime'"}},
      {{"--checkpoint", ck, "a.png", "--layer", "5"}, 1, {"layer 5 is out of range", "2 blocks"}},
      {{"--checkpoint", ck, "a.png", "--head", "2", "--method", "attention"}, 1, {"head 2"}},
      {{"--checkpoint", "not_vit.safetensors", "a.png"}, 1, {"not_vit.safetensors", "encoder.w"}},
      {{"--checkpoint", "nothing.safetensors", "a.png"}, 1, {"nothing.safetensors"}},
      {{"--checkpoint", ck, "--input", "a.png"}, 1, {"a.png"}},
      {{"--checkpoint", ck}, 1, {"no images"}},
      {{"--checkpoint", ck, "a.png", "--colormap", "rainbow"}, 2, {"--colormap"}},
      {{"--checkpoint", ck, "a.png", "--discard-ratio", "1"}, 2, {"--discard-ratio"}},
      {{"--checkpoint", ck, "a.png", "--input", "input.npy"}, 2, {"not several"}},
      {{"a.png"}, 2, {"--checkpoint"}},
      {{"--checkpoint", ck, "a.png", "--std", "-1"}, 2, {"--std"}},
      {{"--checkpoint", ck, "a.png", "--steps", "1000000000"}, 2, {"--steps"}},  // was bad_alloc
      {{"--checkpoint", "nan.safetensors", "a.png"}, 1, {"non-finite values (NaN or inf)"}},
      {{"--checkpoint", "classes.safetensors", "a.png"},
       1,
       {"classes.safetensors", "metadata has a value of the wrong type"}},
      {{"--checkpoint", "std0.safetensors", "a.png"}, 1, {"std0.safetensors", "its std must be"}},
      {{"--checkpoint", ck, "bomb.png"},
       1,
       {"bomb.png", "20000x20000", "ImageLimits::max_pixels", "refused before decoding"}},
  };
  int i = 0;
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--out", out});
    const auto r = explain_run(args, fmt::format("bad{}", i++));
    INFO(fmt::format("{}", fmt::join(c.args, " ")), "\n", r.output);
    CHECK(r.code == c.code);
    for (const auto& m : c.message) CHECK(r.output.find(m) != std::string::npos);
    check_nothing_written(out);
  }
  // A folder that is not an earlier output is never replaced.
  fs::create_directories(s.dir / "precious");
  { std::ofstream(s.dir / "precious/notes.txt") << "keep"; }
  const auto r = explain_run({"--checkpoint", ck, "a.png", "--out", "precious"}, "precious");
  CHECK(r.code == 1);
  CHECK(r.output.find("not a vitrine-explain output folder") != std::string::npos);
  CHECK(read_text(s.dir / "precious/notes.txt") == "keep");
}

TEST_CASE("vitrine-explain on a ResNet: the methods that need no attention, --evaluate, errors") {
  Setup& s = setup();
  // A small CIFAR ResNet for 1x28x28 images and 3 classes, saved as vitrine-train saves one.
  models::ResNetConfig rc = models::ResNetConfig::preset("resnet8");
  rc.channels = 1;
  rc.num_classes = 3;
  rc.width = 4;
  rc.image_h = rc.image_w = 28;
  Generator gen(5);
  models::ResNet resnet(rc, gen);
  nn::Metadata md;
  nn::set_metadata_json(md, nn::kConfigKey, rc.to_json());
  nn::set_metadata_json(md, nn::kMeanKey, std::vector<double>{0.25});
  nn::set_metadata_json(md, nn::kStdKey, std::vector<double>{0.5});
  nn::set_metadata_json(md, nn::kClassesKey, std::vector<std::string>{"shirt", "bag", "boot"});
  const std::string ck = s.dir / "resnet.safetensors";
  nn::save_checkpoint(ck, resnet, md);

  Generator xgen(6);
  const Tensor x = ops::randn({2, 1, 28, 28}, xgen);
  ex::write_npy(s.dir / "rn_input.npy", x);

  // --method all: Grad-CAM at layer3 (the default) and the input-gradient methods.
  const std::string out = s.dir / "out_resnet";
  const auto r = explain_run({"--checkpoint", ck, "--input", "rn_input.npy", "--samples", "2",
                              "--steps", "4", "--out", out, "--target", "bag"},
                             "resnet");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("Grad-CAM at layer3") != std::string::npos);
  const std::vector<std::string> methods = {"gradcam", "saliency", "smoothgrad",
                                            "integrated-gradients"};
  for (const std::string& name : methods) {
    INFO(name);
    CHECK(ex::read_npy(out + "/" + name + ".npy").shape() == Dims{2, 28, 28});
    CHECK(fs::file_size(out + "/001/" + name + ".png") > 100);
  }
  CHECK(ex::read_npy(out + "/gradcam.grid.npy").shape() == Dims{2, 7, 7});  // layer3's 7x7
  CHECK(!fs::exists(out + "/attention.npy"));
  CHECK(!fs::exists(out + "/attention-distance.npy"));
  // The maps are the library's on the same input, to the last bit: on one thread, as the program
  // ran (run_process), so that OpenBLAS splits each product as it did there.
  ex::Options o;
  o.samples = 2;
  o.steps = 4;
  const Threads one(1);
  const auto lib = ex::explain(resnet, resnet.layer3.get(), x, {1, 1},
                               ex::parse_methods(fmt::format("{}", fmt::join(methods, ","))), o);
  for (const auto& le : lib) {
    INFO(ex::method_name(le.method));
    check_close(ex::read_npy(out + "/" + ex::method_name(le.method) + ".npy"), le.map, 0, 0);
  }
  resnet.eval();
  check_close(ex::read_npy(out + "/logits.npy"), resnet(x), 1e-6, 1e-6);
  const json pred = json::parse(read_text(out + "/predictions.json"));
  CHECK(pred[1]["target_name"] == "bag");

  // An image of another size kept as it is (--resize none): cropped to a multiple of the 4-pixel
  // cell, 57x45 -> 56x44; the ResNet takes any size.
  write_png(s.dir / "odd.png", 57, 45, 1, std::vector<uint8_t>(57 * 45, 100));
  const std::string odd_out = s.dir / "out_resnet_odd";
  const auto odd = explain_run({"--checkpoint", ck, "odd.png", "--resize", "none", "--method",
                                "gradcam,saliency", "--out", odd_out},
                               "resnet_odd");
  INFO(odd.output);
  REQUIRE(odd.code == 0);
  CHECK(ex::read_npy(odd_out + "/saliency.npy").shape() == Dims{1, 44, 56});
  CHECK(ex::read_npy(odd_out + "/saliency.grid.npy").shape() == Dims{1, 11, 14});

  // --evaluate: every method on the 4x4-pixel cells, sanity steps from fc down to conv1.
  const std::string eval_out = s.dir / "out_resnet_eval";
  const auto e =
      explain_run({"--checkpoint", ck, "--input", "rn_input.npy", "--evaluate", "--samples", "2",
                   "--steps", "3", "--sanity-count", "2", "--out", eval_out},
                  "resnet_evaluate");
  INFO(e.output);
  REQUIRE(e.code == 0);
  const json j = json::parse(read_text(eval_out + "/evaluation.json"));
  // The methods of "all" that apply to any model (Grad-CAM at layer3, the input gradients), in
  // the registry's order, then the baselines.
  json rows = json::array();
  for (const ex::Method& m : ex::all_methods())
    if (ex::is_input_gradient(m) || m.name() == "gradcam") rows.push_back(std::string(m.name()));
  rows.push_back("random");
  rows.push_back("centre");
  CHECK(j["rows"] == rows);
  for (const char* name : {"gradcam", "saliency", "smoothgrad", "integrated-gradients"})
    CHECK(j["results"].contains(name));
  CHECK(j["sanity_steps"] == json({"fc", "layer3.0", "layer2.0", "layer1.0", "bn1", "conv1"}));
  CHECK(j["results"]["gradcam"]["deletion_curve"].size() == 49 / 4 + 2);  // 7x7 cells, 4 a step
  CHECK(j["results"]["saliency"]["sanity"][5]["n"] == 2);

  // Errors: an attention method, an unknown layer, a ViT option.
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {{"--method", "rollout"}, {"rollout reads a Vision Transformer's attention", "ResNet-8"}},
      {{"--gradcam-layer", "layer9"}, {"no submodule named 'layer9'", "layer1, layer2, layer3"}},
      {{"--model-config", "fmnist"}, {"resnet checkpoint", "the vit architecture given"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--checkpoint", ck, "a.png", "--out", s.dir / "out_rn_bad"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto b = explain_run(args, "resnet_bad");
    INFO(fmt::format("{}", fmt::join(c.args, " ")), "\n", b.output);
    CHECK(b.code == 1);
    for (const auto& m : c.message) CHECK(b.output.find(m) != std::string::npos);
    check_nothing_written(s.dir / "out_rn_bad");
  }
}
