// The workflows people bring from ViT notebooks, run as a user runs them: vitrine-train and
// vitrine-explain as separate processes on tiny data sets the test writes (a CIFAR-10 binary
// folder, a tiny-imagenet-200 layout, a pizza/steak/sushi ImageFolder of PNGs and JPEGs of mixed
// sizes, a photo), with a torchvision-named checkpoint without metadata and a DINO-style
// head-less ViT-S/8. Each case is also a regression test of a bug found off the default path
// (the messages they check are the ones the fix prints).
#include <cmath>
#include <filesystem>
#include <fstream>

#include "explain/explain.h"
#include "explain/npy.h"
#include "nn/data/image_folder.h"
#include "nn/data/transforms.h"
#include "nn/state.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace fs = std::filesystem;
namespace ex = vitrine::explain;

namespace {

const std::string kTrain = VITRINE_TRAIN_EXE;
const std::string kExplain = VITRINE_EXPLAIN_EXE;
const std::string kConfigs = VITRINE_CONFIGS;

ProcessResult run_train(const std::vector<std::string>& args, const TempDir& dir,
                        const std::string& name) {
  return run_process(kTrain, args, dir, name);
}
ProcessResult run_explain(const std::vector<std::string>& args, const TempDir& dir,
                          const std::string& name) {
  return run_process(kExplain, args, dir, name);
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// A colour image of class k: noise with channel k % 3 raised and a bright square at a
/// class-dependent place, h x w, HWC bytes.
std::vector<uint8_t> class_image(int k, int h, int w, uint32_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3));
  uint32_t s = seed * 2654435761u + 17;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        s = s * 1664525u + 1013904223u;
        int v = static_cast<int>((s >> 24) % 70) + (c == k % 3 ? 110 : 0);
        const int y0 = (k * 5) % (h / 2), x0 = (k * 7) % (w / 2);
        if (y >= y0 && y < y0 + h / 3 && x >= x0 && x < x0 + w / 3) v = 240;
        px[static_cast<size_t>((y * w + x) * 3 + c)] = static_cast<uint8_t>(std::min(v, 255));
      }
  return px;
}

/// A CIFAR-10 binary folder: data_batch_1..5.bin with per_batch records each, test_batch.bin with
/// test records; record i has label i % 10 and a class_image.
void write_cifar10(const std::string& dir, int per_batch, int test) {
  auto records = [](int n, uint32_t seed) {
    std::vector<uint8_t> b;
    for (int i = 0; i < n; ++i) {
      const int k = i % 10;
      b.push_back(static_cast<uint8_t>(k));
      const auto hwc = class_image(k, 32, 32, seed + static_cast<uint32_t>(i));
      for (int c = 0; c < 3; ++c)  // CIFAR stores planes: R, then G, then B
        for (int p = 0; p < 32 * 32; ++p) b.push_back(hwc[static_cast<size_t>(p * 3 + c)]);
    }
    return b;
  };
  for (int batch = 1; batch <= 5; ++batch)
    write_bytes(dir + "/data_batch_" + std::to_string(batch) + ".bin",
                records(per_batch, static_cast<uint32_t>(batch * 1000)));
  write_bytes(dir + "/test_batch.bin", records(test, 99000));
}

/// pizza/steak/sushi: root/train/<class>/ and root/test/<class>/ with n_train and n_test images,
/// 64x64 and 96x72 PNGs and some JPEGs.
void write_food(const std::string& root, int n_train, int n_test) {
  const char* classes[] = {"pizza", "steak", "sushi"};
  for (const auto& [split, n] : {std::pair{"train", n_train}, std::pair{"test", n_test}})
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < n; ++i) {
        const bool wide = i % 2 == 1;
        const int w = wide ? 96 : 64, h = wide ? 72 : 64;
        const std::string base = fmt::format("{}/{}/{}/{}_{}", root, split, classes[k], split, i);
        fs::create_directories(fs::path(base).parent_path());
        const auto px = class_image(k, h, w, static_cast<uint32_t>(k * 100 + i));
        if (i % 3 == 2)
          write_jpg(base + ".jpg", w, h, 3, px);
        else
          write_png(base + ".png", w, h, 3, px);
      }
}

/// tiny-imagenet-200's layout with 3 classes: wnids.txt, words.txt, train/<wnid>/images/*.JPEG,
/// val/images/*.JPEG with val/val_annotations.txt.
void write_tiny_imagenet(const std::string& root, int n_train, int n_val) {
  const std::vector<std::string> wnids = {"n01443537", "n01629819", "n01641577"};
  fs::create_directories(root + "/val/images");
  {
    std::ofstream w(root + "/wnids.txt"), words(root + "/words.txt");
    for (const auto& id : wnids) w << id << "\n";
    words << "n01443537\tgoldfish, Carassius auratus\nn01629819\tEuropean fire salamander\n"
          << "n01641577\tbullfrog, Rana catesbeiana\n";
  }
  std::string annotations;
  for (int k = 0; k < 3; ++k) {
    fs::create_directories(fmt::format("{}/train/{}/images", root, wnids[k]));
    for (int i = 0; i < n_train; ++i)
      write_jpg(fmt::format("{}/train/{}/images/{}_{}.JPEG", root, wnids[k], wnids[k], i), 64, 64,
                3, class_image(k, 64, 64, static_cast<uint32_t>(k * 50 + i)));
    for (int i = 0; i < n_val; ++i) {
      const std::string file = fmt::format("val_{}_{}.JPEG", k, i);
      write_jpg(root + "/val/images/" + file, 64, 64, 3,
                class_image(k, 64, 64, static_cast<uint32_t>(900 + k * 50 + i)));
      annotations += fmt::format("{}\t{}\t0\t0\t63\t63\n", file, wnids[k]);
    }
  }
  std::ofstream(root + "/val/val_annotations.txt") << annotations;
}

/// The tiny ViT of the journeys as --set assignments.
std::vector<std::string> tiny(std::vector<std::string> args) {
  for (const char* s :
       {"model.dim=16", "model.depth=1", "model.heads=2", "model.mlp_dim=32", "data.workers=0"}) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

/// [h, w] of a PNG file (its IHDR).
std::pair<int64_t, int64_t> png_size(const std::string& path) {
  const std::string b = read_text(path);
  REQUIRE(b.size() > 24);
  auto be32 = [&](size_t at) {
    return (static_cast<int64_t>(static_cast<uint8_t>(b[at])) << 24) |
           (static_cast<int64_t>(static_cast<uint8_t>(b[at + 1])) << 16) |
           (static_cast<int64_t>(static_cast<uint8_t>(b[at + 2])) << 8) |
           static_cast<int64_t>(static_cast<uint8_t>(b[at + 3]));
  };
  return {be32(20), be32(16)};
}

/// The value after `prefix` on the line that holds it, up to the end of the line.
std::string after(const std::string& text, const std::string& prefix) {
  const size_t p = text.find(prefix);
  if (p == std::string::npos) return "";
  const size_t b = p + prefix.size();
  return text.substr(b, text.find('\n', b) - b);
}

std::vector<std::string> method_names() {
  std::vector<std::string> v;
  for (ex::Method m : ex::all_methods()) v.push_back(ex::method_name(m));
  return v;
}

}  // namespace

TEST_CASE("journey: CIFAR-10 with dotted overrides and early stopping, then 16 sampled images") {
  TempDir dir;
  const std::string data = dir / "cifar-10-batches-bin";
  write_cifar10(data, 20, 40);
  const std::string run = dir / "cifar";
  const ProcessResult t = run_train(
      tiny({"--config", kConfigs + "/cifar10.json", "--data", data, "--out", run, "--epochs", "3",
            "--batch-size", "25", "--set", "model.patch=8", "--set", "train.eval_every=2", "--set",
            "train.early_stopping_patience=2", "--set", "data.transforms.random_crop.padding=2"}),
      dir, "train");
  INFO(t.output);
  REQUIRE(t.code == 0);
  // bug 5: the config's 5 warm-up epochs are longer than a 3-epoch run
  CHECK(has(t.output,
            "note: schedule.warmup_epochs 5 is as long as the run (3 epochs) or longer: "
            "shortened to 0.3 (the config's 5 of 50 epochs, kept in proportion)"));
  CHECK(has(t.output, "training split in eval mode (90 images)"));
  REQUIRE(fs::exists(run + "/best.safetensors"));

  // bug 1: a colour data set, explained from the checkpoint's own data config (no --data, no
  // --mean/--std): the run's config.json names the folder and the normalisation
  const std::string out = dir / "explained";
  const ProcessResult e = run_explain({"--checkpoint", run + "/best.safetensors", "--dataset",
                                       "cifar10", "--sample", "16", "--seed", "0", "--out", out},
                                      dir, "explain");
  INFO(e.output);
  REQUIRE(e.code == 0);
  CHECK(!has(e.output, "\"mean\" has 1 values"));
  const json predictions = json::parse(read_text(out + "/predictions.json"));
  REQUIRE(predictions.size() == 16);
  std::vector<int64_t> drawn;
  for (const json& p : predictions) {
    const std::string name = p.at("name").get<std::string>();
    drawn.push_back(std::stoll(name.substr(name.find('#') + 1)));
    CHECK(p.contains("label"));
  }
  CHECK(std::is_sorted(drawn.begin(), drawn.end()));
  CHECK(drawn.back() > 15);  // a random sample of the 40, not the first 16
  for (const std::string& m : method_names()) {
    const std::string grid = out + "/" + m + ".grid.png";
    REQUIRE_MESSAGE(fs::exists(grid), grid);
    const auto [h, w] = png_size(grid);
    CHECK(w >= 4 * 4 * 32);  // 4 columns of enlarged 32x32 tiles
    CHECK(h >= 4 * 4 * 32);
  }
  const Tensor distance = ex::read_npy(out + "/attention-distance.npy");
  CHECK(distance.shape() == Dims{1, 2});  // 1 layer, 2 heads, averaged over the 16 images
  const std::string html = read_text(out + "/index.html");
  CHECK(has(html, "head 1"));
  CHECK(has(html, "Grids"));

  // the same 16 again with the same seed; another seed draws others
  const ProcessResult again =
      run_explain({"--checkpoint", run + "/best.safetensors", "--dataset", "cifar10", "--sample",
                   "16", "--seed", "1", "--method", "attention", "--out", dir / "seed1"},
                  dir, "explain_seed1");
  REQUIRE(again.code == 0);
  CHECK(json::parse(read_text(dir / "seed1/predictions.json")) != predictions);
}

TEST_CASE("journey: the tiny-imagenet-200 layout trains and explains as an image folder") {
  TempDir dir;
  const std::string data = dir / "tiny-imagenet-200";
  write_tiny_imagenet(data, 6, 3);
  const std::string run = dir / "tiny";
  const ProcessResult t = run_train(
      tiny({"--config", kConfigs + "/imagefolder.json", "--data", data, "--out", run, "--epochs",
            "1", "--set", "model.patch=16", "--set", "train.eval_every=1000"}),
      dir, "train");
  INFO(t.output);
  REQUIRE(t.code == 0);
  CHECK(has(t.output, "note: model.num_classes 3 from the 3 class folders"));
  // bug 5: an eval_every longer than the run is said, and the end is validated all the same
  CHECK(has(t.output, "note: train.eval_every 1000 is longer than the run"));
  CHECK(has(t.output, "validation: loss"));
  CHECK(fs::exists(run + "/best.safetensors"));
  const json cm = json::parse(read_text(run + "/confusion_matrix.json"));
  CHECK(cm.at("classes") == json({"goldfish", "European fire salamander", "bullfrog"}));

  const ProcessResult e =
      run_explain({"--checkpoint", run + "/best.safetensors", "--dataset", "imagefolder",
                   "--sample", "4", "--method", "rollout,gradcam", "--out", dir / "explained"},
                  dir, "explain");
  INFO(e.output);
  REQUIRE(e.code == 0);
  CHECK(has(e.output, "label goldfish") + has(e.output, "label bullfrog") +
            has(e.output, "label European fire salamander") >=
        1);
  CHECK(fs::exists(dir / "explained/gradcam.grid.png"));
}

TEST_CASE("journey: pizza/steak/sushi transfer learning from a torchvision checkpoint") {
  TempDir dir;
  const std::string data = dir / "food";
  write_food(data, 8, 4);
  // torchvision's naming without any metadata (tests/fixtures/make_vit_fixtures.py), and its
  // architecture as a JSON file, as a user writes it for a checkpoint of their own
  const std::string ckpt = fixture("vit_tv.safetensors");
  const std::string arch = dir / "vit_tv.json";
  std::ofstream(arch) << fixture_case("vit_parity.json", "tv").at("config").dump();

  // bug 3: without --model-config the error names the flag that fixes it
  const ProcessResult missing = run_train({"--config", kConfigs + "/imagefolder.json", "--data",
                                           data, "--finetune", ckpt, "--out", dir / "no"},
                                          dir, "missing_config");
  CHECK(missing.code == 1);
  CHECK(has(missing.output, "name its architecture with --model-config PRESET|FILE"));
  CHECK(!fs::exists(dir / "no"));

  const std::string run = dir / "food_run";
  const ProcessResult t =
      run_train({"--config", kConfigs + "/imagefolder.json", "--data", data, "--finetune", ckpt,
                 "--model-config", arch, "--freeze-backbone", "--epochs", "2", "--out", run,
                 "--set", "data.workers=0", "--set", "data.batch_size=8"},
                dir, "finetune");
  INFO(t.output);
  REQUIRE(t.code == 0);
  // the checkpoint's 16x16 model decides the input size; the transforms follow it
  CHECK(has(t.output, "note: data.transforms.resize [72,72] -> [18,18]"));
  CHECK(has(t.output, "note: data.transforms.random_crop.size 64 -> [16,16]"));
  CHECK(has(t.output, "ViT 3x16x16 in 4x4 patches"));
  CHECK(has(t.output, "backbone frozen: 99 parameters of the head train"));  // 3 x 32 + 3
  CHECK(has(t.output, "names no normalisation"));
  for (const char* c : {"pizza", "steak", "sushi", "precision", "recall", "f1-score"})
    CHECK(has(t.output, c));
  // bug 2: three class folders make a three-class head, and the confusion matrix is written
  const json cm = json::parse(read_text(run + "/confusion_matrix.json"));
  CHECK(cm.at("classes") == json({"pizza", "steak", "sushi"}));

  // bug 4: the printed hint works as printed
  const std::string hint = after(t.output, "evaluate again with: vitrine-train ");
  REQUIRE(!hint.empty());
  CHECK(hint == "--eval " + run + "/best.safetensors");
  const ProcessResult ev = run_train({"--eval", run + "/best.safetensors"}, dir, "eval");
  INFO(ev.output);
  CHECK(ev.code == 0);
  CHECK(has(ev.output, "sushi"));
  CHECK(has(ev.output, "config from " + run + "/config.json"));

  const ProcessResult e =
      run_explain({"--checkpoint", run + "/best.safetensors", "--dataset", "imagefolder", "--data",
                   data, "--target", "sushi", "--method", "all", "--out", dir / "explained"},
                  dir, "explain");
  INFO(e.output);
  REQUIRE(e.code == 0);
  const json predictions = json::parse(read_text(dir / "explained/predictions.json"));
  CHECK(predictions.size() == 12);
  for (const json& p : predictions) CHECK(p.at("target_name") == "sushi");

  const ProcessResult evaluated =
      run_explain({"--checkpoint", run + "/best.safetensors", "--dataset", "imagefolder", "--data",
                   data, "--evaluate", "--count", "6", "--sanity-count", "2", "--method",
                   "attention,saliency", "--out", dir / "evaluated"},
                  dir, "evaluate");
  INFO(evaluated.output);
  CHECK(evaluated.code == 0);
  CHECK(fs::exists(dir / "evaluated/evaluation.json"));

  // bug 2, the other way: a model.num_classes that contradicts the folders fails at once
  const ProcessResult wrong =
      run_train(tiny({"--config", kConfigs + "/imagefolder.json", "--data", data, "--set",
                      "model.num_classes=10", "--out", dir / "wrong"}),
                dir, "wrong_classes");
  CHECK(wrong.code == 1);
  CHECK(has(wrong.output, "model.num_classes is 10, but the image folder"));
  CHECK(has(wrong.output, "holds 3 class folders (pizza, steak, sushi)"));
  CHECK(!fs::exists(dir / "wrong"));
}

TEST_CASE("journey: a DINO ViT-S/8 backbone without a head on a photo of its own size") {
  TempDir dir;
  // torch.hub's dino_vits8: timm's names, no head, no metadata (random weights)
  models::ViTConfig c = models::ViTConfig::preset("vit_small_patch8_224");
  c.num_classes = 0;
  Generator gen(8);
  models::VisionTransformer model(c, gen);
  const std::string ckpt = dir / "dino_vits8.safetensors";
  nn::write_safetensors(ckpt, model.state_dict());
  write_jpg(dir / "photo.jpg", 100, 75, 3, class_image(1, 75, 100, 5));  // 75 x 100, not x 8

  const std::vector<std::string> base = {
      "--checkpoint", ckpt,        "--model-config", "vit_small_patch8_224",
      "--method",     "attention", "--pos-interp",   "dino",
      "--resize",     "none",      "--crop",         "topleft",
      "--threshold",  "0.6"};
  std::vector<std::string> args = base;
  for (const std::string& a : {std::string("--out"), dir / "dino", dir / "photo.jpg"})
    args.push_back(a);
  const ProcessResult e = run_explain(args, dir, "dino");
  INFO(e.output);
  REQUIRE(e.code == 0);
  CHECK(has(e.output, "normalisation: mean [0.485, 0.456, 0.406]"));
  CHECK(has(e.output, "(72x96)"));  // the photo's own size, cropped to a multiple of 8
  const Tensor heads = ex::read_npy(dir / "dino/attention.heads.npy");
  REQUIRE(heads.shape() == Dims{1, 6, 9, 12});
  const Tensor masks = ex::read_npy(dir / "dino/attention.heads_mask.npy");
  REQUIRE(masks.shape() == Dims{1, 6, 9, 12});
  // each head's mask: the fewest patches holding at least 60% of that head's attention
  const auto a = heads.to(kFloat64).to_vector<double>();
  const auto m = masks.to(kFloat64).to_vector<double>();
  for (int64_t h = 0; h < 6; ++h) {
    std::vector<double> v(a.begin() + h * 108, a.begin() + (h + 1) * 108);
    double total = 0, kept = 0, smallest_kept = 1e9;
    int64_t count = 0;
    for (int64_t j = 0; j < 108; ++j) {
      total += v[j];
      if (m[h * 108 + j] > 0.5)
        kept += v[j], ++count, smallest_kept = std::min(smallest_kept, v[j]);
    }
    CHECK(kept / total >= 0.6 - 1e-6);
    CHECK((kept - smallest_kept) / total < 0.6 + 1e-6);  // one patch fewer would not do
    for (int64_t j = 0; j < 108; ++j)                    // and they are the largest ones
      if (m[h * 108 + j] < 0.5) CHECK(v[j] <= smallest_kept + 1e-12);
  }
  CHECK(fs::exists(dir / "dino/000/heads.png"));
  CHECK(fs::exists(dir / "dino/000/heads_mask.png"));
  CHECK(has(read_text(dir / "dino/index.html"), "threshold masks"));

  // the same attention from the library: the top-left 72 x 96 crop, ImageNet-normalised,
  // through DINO's position-embedding interpolation
  {
    nn::data::ImageFolder files("photo", {dir / "photo.jpg"}, {0}, {"?"},
                                {.channels = 3, .limits = {}});
    nn::data::Image im = files.get(0).image;
    nn::data::Image crop{3, 72, 96, std::vector<float>(3 * 72 * 96)};
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t y = 0; y < 72; ++y)
        for (int64_t x = 0; x < 96; ++x) crop.at(ch, y, x) = im.at(ch, y, x);
    crop = nn::data::normalize(crop, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f});
    Tensor x = ops::from_vector(crop.pixels, {1, 3, 72, 96});
    const ex::Pass pass = ex::run_pass(model, x, {-1}, -1, false, models::PosInterp::Dino);
    Tensor per_head;
    ex::attention_map(pass, -1, -1, &per_head);
    check_close(heads.to(kFloat64), per_head.to(kFloat64), 1e-5, 1e-4);
    const ex::Pass sized = ex::run_pass(model, x, {-1}, -1, false, models::PosInterp::Size);
    Tensor per_head_size;
    ex::attention_map(sized, -1, -1, &per_head_size);
    CHECK(ops::max(ops::abs(per_head_size - per_head)).item() > 1e-6);  // the flag matters
  }

  // DINO's notebooks scale the photo first: --resize factor:0.5 of 150 x 200 is 75 x 100
  write_jpg(dir / "big.jpg", 200, 150, 3, class_image(2, 150, 200, 6));
  args = base;
  args.erase(std::find(args.begin(), args.end(), "--resize"),
             std::find(args.begin(), args.end(), "--resize") + 2);
  for (const std::string& a : {std::string("--resize"), std::string("factor:0.5"),
                               std::string("--out"), dir / "half", dir / "big.jpg"})
    args.push_back(a);
  const ProcessResult half = run_explain(args, dir, "half");
  INFO(half.output);
  CHECK(half.code == 0);
  CHECK(has(half.output, "(72x96)"));

  // bug 6: the gradient methods need a class score, and say so, naming them
  args = {"--checkpoint", ckpt,    "--model-config", "vit_small_patch8_224", "--method",
          "all",          "--out", dir / "all",      dir / "photo.jpg"};
  const ProcessResult all = run_explain(args, dir, "headless_all");
  CHECK(all.code == 1);
  CHECK(has(all.output, "has no classification head"));
  CHECK(
      has(all.output, "grad-rollout, chefer, gradcam, saliency, smoothgrad, integrated-gradients"));
  CHECK(has(all.output, "--method attention,rollout"));
  CHECK(!fs::exists(dir / "all"));
}

TEST_CASE("journey: a from-scratch model with a summary, timm-style flags and a smoke run") {
  TempDir dir;
  const ProcessResult sum =
      run_train({"--summary", "--model", "vit_tiny_patch16_224"}, dir, "summary");
  INFO(sum.output);
  REQUIRE(sum.code == 0);
  CHECK(has(sum.output, "ViT 3x224x224 in 16x16 patches, dim 192, depth 12, 3 heads"));
  CHECK(has(sum.output, "blocks.11"));

  const std::string data = dir / "cifar";
  write_cifar10(data, 20, 20);
  const ProcessResult smoke =
      run_train(tiny({"--config", kConfigs + "/cifar10.json", "--data", data, "--out",
                      dir / "smoke", "--max-steps", "3", "--subset", "40", "--batch-size", "10",
                      "--lr", "1e-3", "--weight-decay", "0", "--set", "model.patch=8"}),
                dir, "smoke");
  INFO(smoke.output);
  REQUIRE(smoke.code == 0);
  CHECK(has(smoke.output, "40 train"));
  CHECK(has(smoke.output, "adamw lr 0.001 weight decay 0"));
  CHECK(has(smoke.output, "at most 3 steps"));
  CHECK(has(smoke.output, "stopped after train.max_steps = 3 steps"));
  CHECK(has(smoke.output, "training split in eval mode (40 images)"));
  CHECK(has(smoke.output, "validation: loss"));  // the end of a short run is validated

  const ProcessResult typo = run_train({"--learning-rate", "3"}, dir, "unknown_flag");
  CHECK(typo.code == 2);
  CHECK(has(typo.output, "--learning-rate"));
  CHECK(has(typo.output, "--set KEY=VALUE"));
  CHECK(has(typo.output, "--help"));

  const ProcessResult help = run_explain({"--help"}, dir, "explain_help");
  CHECK(help.code == 0);
  CHECK(has(help.output, "Usage: vitrine-explain"));
}

TEST_CASE("seed recipes: each config of configs/seeds/ trains a few steps on small data") {
  TempDir dir;
  // 003: MNIST's ViT from scratch (Fashion-MNIST's format), torchvision's initialisation, Adam at
  // a constant 1e-3, nothing of the default recipe left on.
  write_stripes(dir / "fmnist", 200, 50);
  const ProcessResult s003 =
      run_train({"--config", kConfigs + "/seeds/003_mnist_vit.json", "--data", dir / "fmnist",
                 "--max-steps", "3", "--out", dir / "s003", "--set", "data.workers=0"},
                dir, "seed003");
  INFO(s003.output);
  REQUIRE(s003.code == 0);
  CHECK(has(s003.output, "ViT 1x28x28 in 7x7 patches, dim 64, depth 6, 2 heads, MLP 128"));
  CHECK(has(s003.output, "adam lr 0.001 weight decay 0, constant on cpu"));
  CHECK(!has(s003.output, "note:"));  // no schedule, transform or class count fitted
  const json c003 = json::parse(read_text(dir / "s003/config.json"));
  CHECK(c003.at("model").at("init") == "torchvision");
  CHECK(c003.at("model").at("stem") == json::array());
  CHECK(c003.at("model").at("drop_path") == 0.0);
  CHECK(c003.at("optim").at("label_smoothing") == 0.0);
  CHECK(c003.at("optim").at("grad_clip") == 0.0);
  CHECK(c003.at("data").at("transforms").at("hflip") == 0);
  CHECK(!c003.at("data").at("transforms").contains("random_crop"));

  // 001: vit-pytorch's CIFAR-10 model (699,530 parameters), early stopping on the loss.
  write_cifar10(dir / "cifar", 20, 20);
  const ProcessResult s001 = run_train(
      {"--config", kConfigs + "/seeds/001_cifar_vit_pytorch.json", "--data", dir / "cifar",
       "--max-steps", "2", "--batch-size", "16", "--out", dir / "s001", "--set", "data.workers=0"},
      dir, "seed001");
  INFO(s001.output);
  REQUIRE(s001.code == 0);
  CHECK(has(s001.output,
            "ViT 3x64x64 in 4x4 patches, dim 128, depth 4, 4 heads of width 64, "
            "MLP 128, no final norm (0.70M parameters)"));
  const ProcessResult summary =
      run_train({"--config", kConfigs + "/seeds/001_cifar_vit_pytorch.json", "--summary"}, dir,
                "seed001_summary");
  CHECK(has(summary.output, "Total params: 699,530"));
  CHECK(json::parse(read_text(dir / "s001/config.json")).at("model").at("init") == "vit-pytorch");

  // 004: transfer learning from a torchvision checkpoint, backbone frozen, the new head drawn as
  // nn.Linear's default, torchvision's weights.transforms() fitted to the checkpoint's size.
  write_food(dir / "food", 4, 2);
  const std::string arch = dir / "vit_tv.json";
  std::ofstream(arch) << fixture_case("vit_parity.json", "tv").at("config").dump();
  const ProcessResult s004 = run_train(
      {"--config", kConfigs + "/seeds/004_transfer_vit_b16.json", "--data", dir / "food",
       "--finetune", fixture("vit_tv.safetensors"), "--model-config", arch, "--freeze-backbone",
       "--max-steps", "2", "--out", dir / "s004", "--set", "data.workers=0"},
      dir, "seed004");
  INFO(s004.output);
  REQUIRE(s004.code == 0);
  CHECK(has(s004.output, "note: model.init vit-pytorch: the new head is drawn as vit-pytorch's"));
  CHECK(has(s004.output, "backbone frozen: 99 parameters of the head train"));  // 3 x 32 + 3
  CHECK(has(s004.output, "adam lr 0.001 weight decay 0, constant"));
  for (const char* c : {"pizza", "steak", "sushi"}) CHECK(has(s004.output, c));
}
