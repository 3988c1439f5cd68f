// vitrine-explain's fitting, drawing and probing options, run as a user runs them (a separate
// process on a tiny random ViT saved as a checkpoint): --resize as torchvision's evaluation
// transforms, repeated flags (the last one wins), --upsample, --style, --distance-norm,
// --checkpoint random:PRESET,
// --evaluate --boxes, --method activation-max and qkv. Values are checked against the library
// or against numbers worked out here.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "decode.h"
#include "explain/boxes.h"
#include "explain/explain.h"
#include "explain/model.h"
#include "explain/npy.h"
#include "models/classifier.h"
#include "nn/data/transforms.h"
#include "nn/state.h"
#include "ops/ops.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace fs = std::filesystem;
namespace ex = vitrine::explain;
using ex::Rgb8;

namespace {

const std::string kExe = VITRINE_EXPLAIN_EXE;

models::ViTConfig extras_config() { return cli_vit_config(); }

/// A w x h grey ramp with a bright square at (y0, x0).
std::vector<uint8_t> ramp(int w, int h, int y0, int x0) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      px[y * w + x] = (y >= y0 && y < y0 + 8 && x >= x0 && x < x0 + 8)
                          ? 230
                          : static_cast<uint8_t>((3 * x + 5 * y) % 120);
  return px;
}

/// The checkpoint and images of these tests. (No tensors: it outlives the backends' statics.)
struct Extras {
  TempDir dir;
  std::string checkpoint = dir / "model.safetensors";
  Extras() {
    Generator gen(33);
    models::VisionTransformer model(extras_config(), gen);
    nn::Metadata md;
    nn::set_metadata_json(md, nn::kMeanKey, std::vector<double>{0.25});
    nn::set_metadata_json(md, nn::kStdKey, std::vector<double>{0.5});
    nn::set_metadata_json(md, nn::kClassesKey, std::vector<std::string>{"shirt", "bag", "boot"});
    models::save_vit_timm(checkpoint, model, md);
    write_png(dir / "a.png", 28, 28, 1, ramp(28, 28, 3, 4));
    write_png(dir / "b.png", 28, 28, 1, ramp(28, 28, 15, 17));
    write_png(dir / "wide.png", 60, 38, 1, ramp(60, 38, 10, 30));  // w 60, h 38
  }
};

Extras& extras() {
  static Extras e;
  return e;
}

ProcessResult explain_run(const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> a = {"--checkpoint", extras().checkpoint};
  a.insert(a.end(), args.begin(), args.end());
  return run_process(kExe, a, extras().dir, name);
}

/// The checkpoint's model as the library loads it.
ex::LoadedModel loaded() {
  ex::ModelSource s;
  s.checkpoint = extras().checkpoint;
  return ex::load_model(s);
}

/// A PNG file's image as the program reads it ([1, h, w] in [0, 1]).
nn::data::Image grey_image(const std::string& path) {
  const std::string bytes = read_text(path);
  const auto d = nn::data::decode_image(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path);
  return nn::data::to_image(d, 1);
}

/// The model's logits for one fitted image [1, h, w] in [0, 1] (normalised as the checkpoint).
std::vector<double> logits_of(ex::LoadedModel& l, const nn::data::Image& im) {
  NoGradGuard g;
  l.model->eval();
  const Tensor x = ex::image_tensor(nn::data::normalize(im, l.mean, l.std)).unsqueeze(0);
  return (*l.model)(x).to(kFloat64).contiguous().to_vector<double>();
}

}  // namespace

TEST_CASE("vitrine-explain --resize: model is the shorter side and a centre crop, as torchvision") {
  ex::LoadedModel l = loaded();
  const nn::data::Image wide = grey_image(extras().dir / "wide.png");
  // torchvision: Resize(28) makes 60 x 38 into 44 x 28 (int(28 * 60 / 38) = 44), antialiased
  // bilinear; CenterCrop(28) then takes columns 8..35.
  CHECK(nn::data::shorter_side_size(38, 60, 28) == std::pair<int64_t, int64_t>{28, 44});
  const nn::data::Image fitted = nn::data::center_crop(nn::data::resize(wide, 28, 44), 28, 28);
  const nn::data::Image stretched = nn::data::resize(wide, 28, 28);
  // factor:0.5: 30 x 19 (antialiased), then the centre 28 x 14 (a multiple of the patch).
  const nn::data::Image halved = nn::data::center_crop(nn::data::resize(wide, 19, 30), 14, 28);
  const std::vector<std::tuple<std::string, nn::data::Image, Dims>> cases = {
      {"model", fitted, {1, 28, 28}},
      {"stretch", stretched, {1, 28, 28}},
      {"factor:0.5", halved, {1, 14, 28}}};
  for (const auto& c : cases) {
    const std::string& resize = std::get<0>(c);
    const nn::data::Image& expected = std::get<1>(c);
    const Dims& shape = std::get<2>(c);
    CAPTURE(resize);
    const std::string out = extras().dir / ("resize_" + resize.substr(0, 6));
    const auto r = explain_run(
        {"wide.png", "--method", "attention", "--resize", resize, "--out", out}, "resize");
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(ex::read_npy(out + "/attention.npy").shape() == shape);
    check_close(ex::read_npy(out + "/logits.npy").reshape({3}), logits_of(l, expected), 1e-5);
  }
  // The model's default is "model": the same logits without the option.
  const auto r =
      explain_run({"wide.png", "--method", "attention", "--out", extras().dir / "resize_default"},
                  "resize default");
  REQUIRE(r.code == 0);
  check_close(ex::read_npy(extras().dir / "resize_default/logits.npy").reshape({3}),
              logits_of(l, fitted), 1e-5);
  // The library's own: the fit of a box through the resize and the crop.
  const ex::Sample s = ex::prepare_image("wide.png", wide, -1, {}, l);
  CHECK(s.fit.scale_y == doctest::Approx(28.0 / 38));
  CHECK(s.fit.scale_x == doctest::Approx(44.0 / 60));
  CHECK(s.fit.top == 0);
  CHECK(s.fit.left == 8);
  // A bad value names what is allowed.
  const auto bad =
      explain_run({"wide.png", "--resize", "squash", "--out", extras().dir / "bad"}, "resize bad");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("expected model, stretch, none or factor:F, got squash") !=
        std::string::npos);
}

TEST_CASE("vitrine-explain --resize factor:F rounds each side down, as int(side * F)") {
  // DINO's notebooks halve a photo with img.size // 2: 301 x 203 becomes 150 x 101 (rounding to
  // nearest would make 151 x 102). Then the top-left crop to whole patches.
  ex::LoadedModel l = loaded();
  const nn::data::Image odd{1, 203, 301, std::vector<float>(203 * 301, 0.5f)};
  const ex::Sample s = ex::prepare_image("odd", odd, -1, {"factor:0.5", "topleft"}, l);
  CHECK(s.fit.scale_y == 101.0 / 203);
  CHECK(s.fit.scale_x == 150.0 / 301);
  const int64_t p = l.patch;
  CHECK(s.input.shape() == Dims{1, 101 / p * p, 150 / p * p});
  // F = 0.3 of 25 x 70: Python's int(25 * 0.3) is 7 (7.5 rounded down), int(70 * 0.3) 21.
  const nn::data::Image small{1, 25, 70, std::vector<float>(25 * 70, 0.5f)};
  const ex::Fit f = ex::prepare_image("small", small, -1, {"factor:0.3", "topleft"}, l).fit;
  CHECK(f.scale_y == 7.0 / 25);
  CHECK(f.scale_x == 21.0 / 70);
}

TEST_CASE("vitrine-explain: DINO's recipe as the seed writes it, per head within 1e-3 of it") {
  // tests/fixtures/make_dino_recipe_fixture.py: a head-less DINO ViT (patch 8, 3 heads) and a
  // 301 x 203 photo; the seed halves it with img.size // 2 (150 x 101), feeds the pixels
  // unnormalised, crops to whole patches at the top left (144 x 96), interpolates the position
  // embedding as DINO does, and shows each head's class-token attention upsampled nearest.
  const json& doc = fixture_json("dino_recipe.json");
  const std::string out = extras().dir / "dino_recipe";
  const auto r = run_process(
      kExe,
      {"--checkpoint", fixture("vit_dino_tiny.safetensors"), "--normalise", "none", "--resize",
       "factor:0.5", "--crop", "topleft", "--pos-interp", "dino", "--upsample", "nearest",
       "--method", "attention", "--out", out, fixture("images/dino_301x203.png")},
      extras().dir, "dino recipe");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(doc.at("input") == json({96, 144}));
  CHECK(r.output.find("explaining 1 image (96x144)") != std::string::npos);
  CHECK(r.output.find("from --normalise none") != std::string::npos);
  const Tensor heads = ex::read_npy(out + "/attention.heads.npy");  // [1, 3, 12, 18]
  REQUIRE(heads.shape() == Dims{1, 3, 12, 18});
  const Tensor expected = fixture_tensor(doc.at("heads"));
  // The seed's pixels are PIL's 8-bit resize; ours the float one (within 1/255 of it): 3e-5
  // apart measured, against attention values up to 0.013.
  check_close(heads.select(0, 0).to(kFloat64), expected, 1e-3, 0);
  // Nearest upsampling: the mean map is constant on every 8 x 8 patch.
  const Tensor map = ex::read_npy(out + "/attention.npy").select(0, 0);  // [96, 144]
  REQUIRE(map.shape() == Dims{96, 144});
  for (int64_t y = 0; y < 96; y += 8)
    for (int64_t x = 0; x < 144; x += 8) {
      const Tensor block = map.slice(0, y, y + 8).slice(1, x, x + 8);
      CHECK(ops::max(block).item() == ops::min(block).item());
    }
  // The defaults (the checkpoint's normalisation: ImageNet's for a DINO backbone) differ.
  const auto normalised =
      run_process(kExe,
                  {"--checkpoint", fixture("vit_dino_tiny.safetensors"), "--resize", "factor:0.5",
                   "--crop", "topleft", "--pos-interp", "dino", "--method", "attention", "--out",
                   out + "_imagenet", fixture("images/dino_301x203.png")},
                  extras().dir, "dino imagenet");
  REQUIRE(normalised.code == 0);
  CHECK(ops::max(ops::abs(ex::read_npy(out + "_imagenet/attention.heads.npy").select(0, 0) -
                          heads.select(0, 0)))
            .item() > 1e-3);
}

TEST_CASE("vitrine-explain --normalise: the checkpoint's, ImageNet's, or the pixels as they are") {
  ex::ModelSource src;
  src.checkpoint = extras().checkpoint;
  src.normalise = "none";
  const ex::LoadedModel none = ex::load_model(src);
  CHECK(none.mean == std::vector<float>{0.0f});
  CHECK(none.std == std::vector<float>{1.0f});
  CHECK(none.normalisation.find("--normalise none") != std::string::npos);
  src.normalise = "checkpoint";
  CHECK(ex::load_model(src).mean == std::vector<float>{0.25f});  // its metadata
  // ImageNet's statistics need three channels; this model takes one.
  src.normalise = "imagenet";
  CHECK_ERROR_CONTAINS(ex::load_model(src), "--normalise imagenet", "3 channels", "takes 1");
  src.normalise = "none";
  src.mean = {0.5f};
  CHECK_ERROR_CONTAINS(ex::load_model(src), "--normalise none and --mean/--std");
  // The command line: the pixels as they are, said on the console, and the logits of them.
  const std::string out = extras().dir / "normalise_none";
  const auto r = explain_run(
      {"a.png", "--method", "attention", "--normalise", "none", "--out", out}, "normalise none");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("normalisation: mean [0] std [1] from --normalise none") !=
        std::string::npos);
  ex::LoadedModel l = loaded();
  l.mean = {0.0f};
  l.std = {1.0f};
  check_close(ex::read_npy(out + "/logits.npy").reshape({3}),
              logits_of(l, grey_image(extras().dir / "a.png")), 1e-5);
  const auto bad = explain_run({"a.png", "--normalise", "raw", "--out", out}, "normalise bad");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--normalise") != std::string::npos);
  CHECK(bad.output.find("raw") != std::string::npos);
}

TEST_CASE("vitrine-explain: a repeated option takes its last value, as argparse does") {
  // --method given twice: the second; the image list and --mean keep all they are given.
  const std::string out = extras().dir / "repeat";
  const auto r = explain_run({"a.png", "b.png", "--method", "attention", "--method", "rollout",
                              "--alpha", "0.2", "--alpha", "0.7", "--out", out},
                             "repeat");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(fs::exists(out + "/rollout.npy"));
  CHECK(!fs::exists(out + "/attention.npy"));
  CHECK(ex::read_npy(out + "/rollout.npy").shape() == Dims{2, 28, 28});
  const std::string html = read_text(out + "/index.html");
  CHECK(html.find("inferno, 0.7") != std::string::npos);  // the settings table
  // --count 3 --count 2 explains 2 test images.
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) {
    skip("Fashion-MNIST is not installed: --count 3 --count 2 is not run");
    return;
  }
  const std::string out2 = extras().dir / "count";
  const auto c = explain_run({"--dataset", "fashion-mnist", "--count", "3", "--count", "2",
                              "--method", "attention", "--out", out2},
                             "count");
  INFO(c.output);
  REQUIRE(c.code == 0);
  CHECK(json::parse(read_text(out2 + "/predictions.json")).size() == 2);
  CHECK(ex::read_npy(out2 + "/attention.npy").shape() == Dims{2, 28, 28});
}

TEST_CASE("explain: nearest upsampling makes each patch one block, bilinear is the default") {
  const Tensor g = ops::from_vector(std::vector<double>{0, 4}, {1, 1, 2});
  check_close(ex::upsample(g, 2, 4, ex::Upsample::Nearest),
              std::vector<double>{0, 0, 4, 4, 0, 0, 4, 4}, 0);
  check_close(ex::upsample(g, 2, 4), std::vector<double>{0, 1, 3, 4, 0, 1, 3, 4}, 1e-6);
  CHECK_THROWS_WITH_AS(ex::parse_upsample("cubic"),
                       doctest::Contains("unknown upsampling 'cubic' (known: bilinear, nearest)"),
                       Error);
}

TEST_CASE("vitrine-explain --upsample nearest: the map is the grid's min-max in 7 x 7 blocks") {
  for (const std::string mode : {"nearest", "bilinear"}) {
    CAPTURE(mode);
    const std::string out = extras().dir / ("upsample_" + mode);
    const auto r = explain_run(
        {"a.png", "--method", "attention,rollout", "--upsample", mode, "--out", out}, "upsample");
    INFO(r.output);
    REQUIRE(r.code == 0);
    for (const char* method : {"attention", "rollout"}) {
      const Tensor grid = ex::read_npy(out + "/" + method + ".grid.npy");  // [1, 4, 4]
      const Tensor map = ex::read_npy(out + "/" + method + ".npy");        // [1, 28, 28]
      const auto g = ex::minmax(grid).to_vector<double>();
      const auto m = map.to_vector<double>();
      int64_t blocks = 0;  // pixels equal to their patch's min-max value
      for (int64_t y = 0; y < 28; ++y)
        for (int64_t x = 0; x < 28; ++x)
          blocks += std::abs(m[y * 28 + x] - g[(y / 7) * 4 + x / 7]) < 1e-6;
      if (mode == "nearest") {
        CHECK(blocks == 28 * 28);
      } else {
        CHECK(blocks < 28 * 28 / 2);  // bilinear blends across the patches
        check_close(map, ex::minmax(ex::upsample(grid, 28, 28)), 1e-6);
      }
    }
  }
}

TEST_CASE("vitrine-explain --style: mask is the image times the map, overlay the heat map") {
  const nn::data::Image a = grey_image(extras().dir / "a.png");
  for (const std::string style : {"mask", "overlay"}) {
    CAPTURE(style);
    const std::string out = extras().dir / ("style_" + style);
    const auto r = explain_run(
        {"a.png", "--method", "attention", "--style", style, "--alpha", "0.25", "--out", out},
        "style");
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto map = ex::read_npy(out + "/attention.npy").to_vector<float>();  // [1, 28, 28]
    const Rgb8 png = decode_png(read_text(out + "/000/attention.png"));
    REQUIRE(png.height == 112);  // 28 x 28 enlarged 4 times
    REQUIRE(png.width == 112);
    int64_t off = 0, dark = 0;
    for (int64_t y = 0; y < 112; ++y)
      for (int64_t x = 0; x < 112; ++x) {
        const size_t i = static_cast<size_t>((y / 4) * 28 + x / 4);
        const double image = 255.0 * a.pixels[i], v = map[i];
        const auto c = ex::color(ex::Colormap::Inferno, v);
        for (int k = 0; k < 3; ++k) {
          const double want = style == "mask" ? image * v : 0.75 * image + 0.25 * c[k];
          off += std::abs(png.pixels[(y * 112 + x) * 3 + k] - want) > 0.5 + 1e-6;
        }
        dark += png.pixels[(y * 112 + x) * 3] == 0;
      }
    CHECK(off == 0);
    // The mask is black where the map is 0 (its minimum patch at least).
    if (style == "mask") CHECK(dark >= 16);
  }
}

TEST_CASE("explain: attention distance, raw weights or renormalised over the patches") {
  // One image, one head, CLS + a 1 x 2 grid of 16-pixel patches. Query patch 0 attends 0.4 to
  // CLS, 0.5 to itself, 0.1 to patch 1; query patch 1: 0.2, 0.2, 0.6.
  ex::Pass p;
  p.attentions = {ops::from_vector(std::vector<double>{1, 0, 0, 0.4, 0.5, 0.1, 0.2, 0.2, 0.6},
                                   {1, 1, 3, 3}, kFloat32)};
  p.prefix = 1;
  p.grid_h = 1;
  p.grid_w = 2;
  // raw: (0.1 * 16 + 0.2 * 16) / 2 = 2.4;  patches: (1.6 / 0.6 + 3.2 / 0.8) / 2 = 10 / 3.
  check_close(ex::attention_distance(p, 16), std::vector<double>{2.4}, 1e-6);
  check_close(ex::attention_distance(p, 16, ex::DistanceNorm::Raw), std::vector<double>{2.4}, 1e-6);
  check_close(ex::attention_distance(p, 16, ex::DistanceNorm::Patches),
              std::vector<double>{10.0 / 3}, 1e-6);
}

TEST_CASE("vitrine-explain --distance-norm: each head's distance from the attention written") {
  for (const std::string norm : {"raw", "patches", ""}) {
    CAPTURE(norm);
    const std::string out = extras().dir / ("distance_" + norm);
    std::vector<std::string> args = {"a.png", "--method", "attention", "--out", out};
    if (!norm.empty()) args.insert(args.end(), {"--distance-norm", norm});
    const auto r = explain_run(args, "distance");
    INFO(r.output);
    REQUIRE(r.code == 0);
    // By hand from the image's attention probabilities [L, H, 17, 17] (CLS + 4 x 4 patches).
    const auto A = ex::read_npy(out + "/attention_probs.npy").to_vector<double>();
    const auto d = ex::read_npy(out + "/attention-distance.npy").to_vector<double>();  // [2, 2]
    REQUIRE(d.size() == 4);
    for (int lh = 0; lh < 4; ++lh) {
      double total = 0;
      for (int i = 0; i < 16; ++i) {
        double s = 0, mass = 0;
        for (int j = 0; j < 16; ++j) {
          const double a = A[(lh * 17 + 1 + i) * 17 + 1 + j];
          s += a * 7 * std::hypot(i / 4 - j / 4, i % 4 - j % 4);
          mass += a;
        }
        total += norm == "patches" ? s / mass : s;  // the default is raw
      }
      CHECK(d[lh] == doctest::Approx(total / 16).epsilon(1e-5));
    }
  }
}

TEST_CASE("vitrine-explain --checkpoint random:PRESET: an untrained model, the same for a seed") {
  const auto run = [&](const std::string& seed, const std::string& name) {
    const std::string out = extras().dir / name;
    const auto r = run_process(kExe,
                               {"--checkpoint", "random:fmnist", "--seed", seed, "a.png", "b.png",
                                "--method", "attention,chefer", "--out", out},
                               extras().dir, name);
    INFO(r.output);
    REQUIRE(r.code == 0);
    // The fmnist preset: 28 x 28 with 4-pixel patches, 6 blocks of 4 heads, 10 classes.
    CHECK(r.output.find("7x7 patches of 4, 6 blocks, 4 heads") != std::string::npos);
    const Tensor logits = ex::read_npy(out + "/logits.npy");
    CHECK(logits.shape() == Dims{2, 10});
    return std::pair{logits.to_vector<double>(), read_text(out + "/predictions.json")};
  };
  const auto [a, pa] = run("7", "random_a");
  const auto [b, pb] = run("7", "random_b");
  const auto [c, pc] = run("8", "random_c");
  CHECK(a == b);  // bit for bit
  CHECK(pa == pb);
  CHECK(a != c);
  // The library's model for the seed gives the same logits (the program's own normalisation,
  // timm's 0.5, for a model whose checkpoint names none).
  ex::ModelSource s;
  s.checkpoint = "random:fmnist";
  s.seed = 7;
  ex::LoadedModel l = ex::load_model(s);
  CHECK(l.mean == std::vector<float>{0.5f});
  check_close(ops::from_vector(std::vector<double>(a.begin(), a.begin() + 10)),
              logits_of(l, grey_image(extras().dir / "a.png")), 1e-5);
  // --init: DINO's scheme draws a class token of std 0.02 (timm's is 1e-6), so other logits.
  s.init = "dino";
  ex::LoadedModel dino = ex::load_model(s);
  CHECK(dino.vit->config().init == "dino");
  const double token_sd = std::sqrt(ops::mean(dino.vit->cls_token * dino.vit->cls_token).item());
  CHECK(token_sd > 0.01);
  CHECK(token_sd < 0.04);
  const auto d = run_process(kExe,
                             {"--checkpoint", "random:fmnist", "--seed", "7", "--init", "dino",
                              "a.png", "--method", "attention", "--out", extras().dir / "random_d"},
                             extras().dir, "random dino");
  REQUIRE(d.code == 0);
  check_close(ex::read_npy(extras().dir / "random_d/logits.npy").select(0, 0),
              logits_of(dino, grey_image(extras().dir / "a.png")), 1e-5);
  const auto init_bad =
      run_process(kExe, {"--checkpoint", "random:fmnist", "--init", "xavier", "a.png"},
                  extras().dir, "random bad init");
  CHECK(init_bad.code != 0);
  CHECK(init_bad.output.find("xavier not in {timm,torchvision,vit-pytorch,dino}") !=
        std::string::npos);
  ex::ModelSource file = s;  // a checkpoint's weights do not depend on an initialisation
  file.checkpoint = "model.safetensors";
  CHECK_ERROR_CONTAINS(ex::load_model(file), "--init dino: the initialisation of an untrained",
                       "the weights of model.safetensors do not depend on it");
  // An unknown preset lists the known ones.
  const auto bad =
      run_process(kExe, {"--checkpoint", "random:vit_huge", "a.png"}, extras().dir, "random bad");
  CHECK(bad.code == 1);
  CHECK(bad.output.find("--checkpoint random:vit_huge: ViTConfig: unknown preset 'vit_huge' "
                        "(known: ") != std::string::npos);
}

TEST_CASE("explain: boxes files: CSV, JSON, tiny-imagenet's annotations, errors at file:line") {
  TempDir d;
  write_file(d / "b.csv",
             "image,x0,y0,x1,y1,label\na.png,1,2,5,9,cat\na.png,0.5,0,3.2,1\nsub/c.png,0,0,4,4\n");
  const ex::BoxTable csv = ex::read_boxes(d / "b.csv");
  REQUIRE(csv.size() == 2);
  // Box{top, left, height, width}: x0 <= x < x1, fractions rounded outwards.
  CHECK(csv.at("a.png") == std::vector<nn::data::Box>{{2, 1, 7, 4}, {0, 0, 1, 4}});
  CHECK(ex::find_boxes(csv, "some/folder/a.png") == &csv.at("a.png"));
  CHECK(ex::find_boxes(csv, "sub/c.png") == &csv.at("sub/c.png"));
  CHECK(ex::find_boxes(csv, "c.png") == nullptr);
  write_file(d / "b.json", R"({"x.jpg": [[0, 0, 10, 5], [2, 3, 4, 6]]})");
  CHECK(ex::read_boxes(d / "b.json").at("x.jpg") ==
        std::vector<nn::data::Box>{{0, 0, 5, 10}, {3, 2, 3, 2}});
  write_file(d / "val_annotations.txt", "val_0.JPEG\tn01443537\t0\t32\t44\t62\n");
  CHECK(ex::read_boxes(d / "val_annotations.txt").at("val_0.JPEG") ==
        std::vector<nn::data::Box>{{32, 0, 31, 45}});  // corners inclusive
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"a.png,1,2,5\n",
       "bad.csv:1: expected image,x0,y0,x1,y1 or image,x0,y0,x1,y1,label, got 4 fields"},
      {"a.png,1,2,5,9\n\na.png,1,two,5,9\n", "bad.csv:3: y0 \"two\" is not a number"},
      {"a.png,5,2,1,9\n", "bad.csv:1: the box (5, 2, 1, 9) is empty"},
      {"a.png,-1,2,1,9\n", "bad.csv:1: the box (-1, 2, 1, 9) starts left of or above the image"},
      {"", "bad.csv: holds no boxes"}};
  for (const auto& [text, message] : bad) {
    write_file(d / "bad.csv", text);
    CHECK_THROWS_WITH_AS(ex::read_boxes(d / "bad.csv"), doctest::Contains(message.c_str()), Error);
  }
  write_file(d / "bad.json", R"({"x.jpg": [[0, 0, 10]]})");
  CHECK_THROWS_WITH_AS(ex::read_boxes(d / "bad.json"),
                       doctest::Contains("bad.json: \"x.jpg\" box 0: expected [x0, y0, x1, y1]"),
                       Error);
  const std::string none = "--boxes " + (d / "none.csv") + ": cannot open the file";
  CHECK_THROWS_WITH_AS(ex::read_boxes(d / "none.csv"), doctest::Contains(none.c_str()), Error);
}

namespace {

/// --evaluate's results (evaluation.json) with a boxes file (no discarding in rollout: every map
/// then has positive energy to split).
json evaluate_with_boxes(const std::vector<std::string>& extra, const std::string& name) {
  const std::string out = extras().dir / name;
  std::vector<std::string> args = {"--evaluate",
                                   "--method",
                                   "attention,rollout,saliency",
                                   "--sanity-count",
                                   "0",
                                   "--discard-ratio",
                                   "0",
                                   "--out",
                                   out};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = explain_run(args, name);
  INFO(r.output);
  REQUIRE(r.code == 0);
  return json::parse(read_text(out + "/evaluation.json"))["results"];
}

}  // namespace

TEST_CASE("vitrine-explain --evaluate --boxes: the boxes mapped through the resize and crop") {
  const std::string dir = extras().dir.dir.string();
  // wide.png (60 x 38) is fitted as 44 x 28 cropped at column 8: its columns [0, 30) become the
  // crop's [0, 14), [30, 60) its [14, 28). a.png (28 x 28) is used as it is.
  write_file(dir + "/left.csv", "image,x0,y0,x1,y1\nwide.png,0,0,30,38\na.png,0,0,14,28\n");
  write_file(dir + "/right.csv", "wide.png,30,0,60,38\na.png,14,0,28,28\n");
  write_file(
      dir + "/both.json",
      R"({"wide.png": [[0, 0, 30, 38], [30, 0, 60, 38]], "a.png": [[0, 0, 14, 28], [14, 0, 28, 28]]})");
  const json left = evaluate_with_boxes({"wide.png", "a.png", "--boxes", "left.csv"}, "ev_left");
  const json right = evaluate_with_boxes({"wide.png", "a.png", "--boxes", "right.csv"}, "ev_right");
  const json both = evaluate_with_boxes({"wide.png", "a.png", "--boxes", "both.json"}, "ev_both");
  for (const std::string row : {"attention", "rollout", "saliency", "random", "centre"}) {
    CAPTURE(row);
    // The halves split every map's energy, and its maximum is in one of them.
    CHECK(left[row]["energy"]["mean"].get<double>() + right[row]["energy"]["mean"].get<double>() ==
          doctest::Approx(1.0).epsilon(1e-9));
    CHECK(left[row]["pointing"]["mean"].get<double>() +
              right[row]["pointing"]["mean"].get<double>() ==
          doctest::Approx(1.0));
    CHECK(left[row]["energy"]["n"] == 2);
    // Two boxes of one image that cover it: all the energy, every maximum.
    CHECK(both[row]["energy"]["mean"].get<double>() == doctest::Approx(1.0));
    CHECK(both[row]["pointing"]["mean"].get<double>() == doctest::Approx(1.0));
  }
  // A box cropped away: wide.png's columns [0, 10) fall left of the centre crop.
  write_file(dir + "/gone.csv", "wide.png,0,0,10,38\n");
  const json gone = evaluate_with_boxes({"wide.png", "--boxes", "gone.csv"}, "ev_gone");
  CHECK(gone["attention"]["energy"]["mean"].get<double>() == 0.0);
  CHECK(gone["attention"]["pointing"]["mean"].get<double>() == 0.0);
  // Errors: an image without a box, a bad line, --boxes without --evaluate.
  const auto missing = explain_run(
      {"--evaluate", "wide.png", "b.png", "--boxes", "left.csv", "--out", dir + "/ev_missing"},
      "boxes missing");
  CHECK(missing.code == 1);
  CHECK(missing.output.find("--boxes left.csv: no box for b.png") != std::string::npos);
  write_file(dir + "/broken.csv", "wide.png,0,0,30,38\nwide.png,0,0,x,38\n");
  const auto broken = explain_run(
      {"--evaluate", "wide.png", "--boxes", "broken.csv", "--out", dir + "/ev_broken"}, "broken");
  CHECK(broken.code == 1);
  CHECK(broken.output.find("broken.csv:2: x1 \"x\" is not a number") != std::string::npos);
  CHECK(!fs::exists(dir + "/ev_broken"));
  const auto no_eval =
      explain_run({"wide.png", "--boxes", "left.csv", "--out", dir + "/ev_x"}, "boxes no eval");
  CHECK(no_eval.code == 2);
  CHECK(no_eval.output.find("--boxes is for --evaluate") != std::string::npos);
}

TEST_CASE("vitrine-explain --evaluate: a tiny-imagenet-200 folder's val_annotations.txt is read") {
  TempDir d;
  const std::string root = d / "tiny-imagenet-200";
  const std::vector<std::string> wnids = {"n01443537", "n01629819", "n01641577"};
  std::string words, annotations;
  for (size_t k = 0; k < wnids.size(); ++k) {
    fs::create_directories(root + "/train/" + wnids[k] + "/images");
    fs::create_directories(root + "/val/images");
    std::vector<uint8_t> px(64 * 64 * 3);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * (k + 3)) % 251);
    write_png(root + "/train/" + wnids[k] + "/images/" + wnids[k] + "_0.png", 64, 64, 3, px);
    const std::string file = fmt::format("val_{}.png", k);
    write_png(root + "/val/images/" + file, 64, 64, 3, px);
    // The left half, corners inclusive: columns 0..31.
    annotations += fmt::format("{}\t{}\t0\t0\t31\t63\n", file, wnids[k]);
  }
  write_file(root + "/wnids.txt", "n01443537\nn01629819\nn01641577\n");
  write_file(root + "/val/val_annotations.txt", annotations);
  write_file(d / "right.csv", "val_0.png,32,0,64,64\nval_1.png,32,0,64,64\nval_2.png,32,0,64,64\n");
  const auto run = [&](const std::vector<std::string>& extra, const std::string& name) {
    // An untrained cifar10-preset ViT (32 x 32 RGB): the 64 x 64 images are halved.
    std::vector<std::string> args = {"--checkpoint",
                                     "random:cifar10",
                                     "--dataset",
                                     "imagefolder",
                                     "--data",
                                     root,
                                     "--count",
                                     "3",
                                     "--evaluate",
                                     "--method",
                                     "attention,saliency",
                                     "--sanity-count",
                                     "0",
                                     "--out",
                                     d / name};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_process(kExe, args, d, name);
    INFO(r.output);
    REQUIRE(r.code == 0);
    return std::pair{r.output, json::parse(read_text(d / (name + "/evaluation.json")))["results"]};
  };
  const auto auto_run = run({}, "auto");
  const std::string& out_auto = auto_run.first;
  const json& auto_boxes = auto_run.second;
  CHECK(out_auto.find("object boxes: " + root + "/val/val_annotations.txt") != std::string::npos);
  const json right = run({"--boxes", d / "right.csv"}, "right").second;
  for (const char* row : {"attention", "saliency", "random"}) {
    CAPTURE(row);
    CHECK(auto_boxes[row]["energy"]["n"] == 3);
    CHECK(auto_boxes[row]["energy"]["mean"].get<double>() +
              right[row]["energy"]["mean"].get<double>() ==
          doctest::Approx(1.0).epsilon(1e-9));
  }
}

TEST_CASE("vitrine-explain --method activation-max: the logit rises, the picture is seeded") {
  ex::LoadedModel l = loaded();
  const auto run = [&](const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = {"a.png", "--method", "activation-max",   "--am-steps",
                                     "24",    "--out",    extras().dir / name};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = explain_run(args, name);
    INFO(r.output);
    REQUIRE(r.code == 0);
    const json p = json::parse(read_text(extras().dir / (name + "/predictions.json")))[0];
    return std::pair{ex::read_npy(extras().dir / (name + "/activation-max.npy")), p};
  };
  // Plain ascent with the blur, and Lucid's jitter on top (the default, 1 pixel at 28).
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--jitter", "0"}, std::vector<std::string>{}}) {
    const auto [picture, p] = run(extra, "am_" + std::to_string(extra.size()));
    CHECK(picture.shape() == Dims{1, 1, 28, 28});
    const double start = p["activation_max"]["start"], end = p["activation_max"]["end"];
    CHECK(end > start);  // (0.05 to 0.12 without jitter, to 0.10 with it, on this model)
    // The end is the model's logit of the target on the picture written.
    NoGradGuard g;
    const Tensor logits = (*l.model)(picture);
    CHECK(logits.to(kFloat64).to_vector<double>()[p["target"].get<size_t>()] ==
          doctest::Approx(end).epsilon(1e-5));
    // Clipped to the pixel range after normalisation: (0 - 0.25) / 0.5 to (1 - 0.25) / 0.5.
    const auto v = picture.to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) >= -0.5 - 1e-6);
    CHECK(*std::max_element(v.begin(), v.end()) <= 1.5 + 1e-6);
    CHECK(fs::file_size(extras().dir /
                        ("am_" + std::to_string(extra.size()) + "/000/activation-max.png")) > 100);
    const std::string html =
        read_text(extras().dir / ("am_" + std::to_string(extra.size()) + "/index.html"));
    CHECK(html.find("activation-max: the target&#39;s logit") != std::string::npos);
    CHECK(html.find("activation-max: objective, steps, lr, jitter, blur every, blur sigma, l2, "
                    "seed") != std::string::npos);
  }
  // The seed decides the start: the same seed, the same picture, bit for bit.
  const Tensor a = run({"--seed", "5"}, "am_seed_a").first,
               b = run({"--seed", "5"}, "am_seed_b").first,
               c = run({"--seed", "6"}, "am_seed_c").first;
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());
}

TEST_CASE("explain: activation-max of an MLP channel raises it, the L2 decay keeps it smaller") {
  Generator gen(4);
  models::VisionTransformer model(extras_config(), gen);
  ex::Options o;
  o.neuron = 5;
  o.layer = 0;
  o.am_steps = 16;
  o.am_jitter = 0;
  const ex::ActivationMax a = ex::activation_max(model, {2, 1, 28, 28}, {0, 0}, o);
  REQUIRE(a.start.size() == 2);
  for (int b = 0; b < 2; ++b) CHECK(a.end[b] > a.start[b]);
  // The objective is the channel's mean over tokens after the GELU: by hand from a hook.
  Tensor hidden;
  auto block = model.blocks->at<models::ViTBlock>(0);
  const int64_t handle =
      block->norm2->register_forward_hook([&hidden](nn::Module&, const Tensor&, const Tensor& out) {
        hidden = out;
        return Tensor();
      });
  {
    NoGradGuard g;
    (void)model(a.images);
  }
  block->norm2->remove_forward_hook(handle);
  const auto h = hidden.to(kFloat64).contiguous().to_vector<double>();  // [2, 17, 16]
  const auto w = block->mlp->fc1->weight.to(kFloat64).contiguous().to_vector<double>();
  const auto bias = block->mlp->fc1->bias.to(kFloat64).contiguous().to_vector<double>();
  for (int b = 0; b < 2; ++b) {
    double s = 0;
    for (int t = 0; t < 17; ++t) {
      double z = bias[5];
      for (int d = 0; d < 16; ++d) z += w[5 * 16 + d] * h[(b * 17 + t) * 16 + d];
      s += 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    }
    CHECK(a.end[b] == doctest::Approx(s / 17).epsilon(1e-4));
  }
  o.am_l2 = 1;
  const ex::ActivationMax decayed = ex::activation_max(model, {2, 1, 28, 28}, {0, 0}, o);
  CHECK(ops::sum(decayed.images * decayed.images).item<double>() <
        ops::sum(a.images * a.images).item<double>());
}

TEST_CASE("explain: qkv's scores and value norms from the model's qkv weights, softmax is A") {
  Generator gen(9);
  models::VisionTransformer model(extras_config(), gen);
  Generator ig(10);
  const Tensor x = ops::randn({2, 1, 28, 28}, ig);
  const int64_t layer = 1, row = 1, col = 2, p = 1 + row * 4 + col;
  const ex::QkvMaps q = ex::qkv_maps(model, x, layer, row, col);
  CHECK(q.scores.shape() == Dims{2, 2, 17});
  CHECK(q.similarity.shape() == Dims{2, 2, 4, 4});
  CHECK(q.value_norms.shape() == Dims{2, 2, 4, 4});
  // By hand: the block's attention input from a hook, then q, k, v from qkv's weight and bias.
  Tensor t;
  auto block = model.blocks->at<models::ViTBlock>(layer);
  const int64_t handle =
      block->norm1->register_forward_hook([&t](nn::Module&, const Tensor&, const Tensor& out) {
        t = out;
        return Tensor();
      });
  {
    NoGradGuard g;
    (void)model(x);
  }
  block->norm1->remove_forward_hook(handle);
  const auto T = t.to(kFloat64).contiguous().to_vector<double>();  // [2, 17, 16]
  const auto w =
      block->attn->qkv->weight.to(kFloat64).contiguous().to_vector<double>();  // [48, 16]
  const auto bias = block->attn->qkv->bias.to(kFloat64).contiguous().to_vector<double>();
  const auto proj = [&](int b, int tok, int row_of_w) {
    double s = bias[row_of_w];
    for (int d = 0; d < 16; ++d) s += w[row_of_w * 16 + d] * T[(b * 17 + tok) * 16 + d];
    return s;
  };
  const auto scores = q.scores.to_vector<double>(), norms = q.value_norms.to_vector<double>(),
             sim = q.similarity.to_vector<double>();
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 17; ++j) {
        double dot = 0, v2 = 0;
        for (int d = 0; d < 8; ++d) {  // head h's 8 dims: q rows h*8.., k rows 16 + .., v 32 + ..
          dot += proj(b, p, h * 8 + d) * proj(b, j, 16 + h * 8 + d);
          v2 += std::pow(proj(b, j, 32 + h * 8 + d), 2);
        }
        CHECK(scores[(b * 2 + h) * 17 + j] == doctest::Approx(dot / std::sqrt(8.0)).epsilon(1e-5));
        if (j == 0) continue;
        CHECK(sim[(b * 2 + h) * 16 + j - 1] == doctest::Approx(dot / std::sqrt(8.0)).epsilon(1e-5));
        CHECK(norms[(b * 2 + h) * 16 + j - 1] == doctest::Approx(std::sqrt(v2)).epsilon(1e-5));
      }
  // The softmax over every key is the attention row the model computed for that query.
  const ex::Pass pass = ex::run_pass(model, x, {-1, -1}, -1, false);
  const Tensor row_a = pass.attentions[layer].select(2, p);  // [2, 2, 17]
  check_close(ops::softmax(q.scores, -1), row_a.to(kFloat64), 1e-5);
  // The centre by default, and a patch off the grid is an error naming it.
  const ex::QkvMaps centre = ex::qkv_maps(model, x, layer);
  CHECK(centre.row == 2);
  CHECK(centre.col == 2);
  CHECK_THROWS_WITH_AS(ex::qkv_maps(model, x, layer, 4, 0),
                       doctest::Contains("qkv patch (4, 0) is outside the 4x4 grid"), Error);
}

TEST_CASE("vitrine-explain --method qkv: the library's numbers, pictures per head in the report") {
  const std::string out = extras().dir / "qkv";
  const auto r = explain_run(
      {"a.png", "--method", "qkv,attention", "--patch", "1,2", "--layer", "0", "--out", out},
      "qkv");
  INFO(r.output);
  REQUIRE(r.code == 0);
  ex::LoadedModel l = loaded();
  const Tensor x =
      ex::image_tensor(nn::data::normalize(grey_image(extras().dir / "a.png"), l.mean, l.std))
          .unsqueeze(0);
  const ex::QkvMaps q = ex::qkv_maps(*l.vit, x, 0, 1, 2);
  check_close(ex::read_npy(out + "/qkv.scores.npy"), q.scores, 1e-6);
  check_close(ex::read_npy(out + "/qkv.heads.npy"), q.similarity, 1e-6);
  check_close(ex::read_npy(out + "/qkv.values.npy"), q.value_norms, 1e-6);
  check_close(ex::read_npy(out + "/qkv.grid.npy"), ops::mean(q.similarity, {1}), 1e-6);
  const json p = json::parse(read_text(out + "/predictions.json"))[0];
  CHECK(p["qkv_patch"] == json::array({1, 2}));
  for (const char* f : {"/000/qkv.png", "/000/qkv.heads.png", "/000/qkv.values.png"})
    CHECK(fs::file_size(out + f) > 100);
  const std::string html = read_text(out + "/index.html");
  CHECK(html.find("qkv: patch (1, 2)&#39;s query-key scores per head, block 0") !=
        std::string::npos);
  CHECK(html.find("qkv: the values&#39; norms per head") != std::string::npos);
  // The attention's own head grid is still the attention's.
  CHECK(fs::file_size(out + "/000/heads.png") > 100);
  const auto bad =
      explain_run({"a.png", "--method", "qkv", "--patch", "1;2", "--out", out + "x"}, "qkv bad");
  CHECK(bad.code == 1);
  CHECK(bad.output.find("--patch 1;2: expected ROW,COL") != std::string::npos);
  const auto ev =
      explain_run({"a.png", "--evaluate", "--method", "qkv", "--out", out + "y"}, "qkv evaluate");
  CHECK(ev.code == 1);
  CHECK(ev.output.find("qkv gives no relevance map of the image to evaluate") != std::string::npos);
}

TEST_CASE("vitrine-explain --resize none: photos of different sizes, each explained at its own") {
  // a.png is 28 x 28, wide.png 38 x 60 (cropped to a multiple of the patch 7, 35 x 56).
  const std::string out = extras().dir / "mixed";
  const auto r = explain_run({"--resize", "none", "a.png", "wide.png", "b.png", "--method",
                              "attention,saliency", "--out", out},
                             "mixed sizes");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("explaining 2 images (28x28)") != std::string::npos);
  CHECK(r.output.find("explaining 1 image (35x56)") != std::string::npos);
  CHECK(r.output.find("2 sizes, each explained at its own") != std::string::npos);
  // Each size in its own folder, in the usual layout.
  CHECK(ex::read_npy(out + "/28x28/attention.npy").shape() == Dims{2, 28, 28});
  CHECK(ex::read_npy(out + "/35x56/attention.npy").shape() == Dims{1, 35, 56});
  CHECK(ex::read_npy(out + "/35x56/saliency.npy").shape() == Dims{1, 35, 56});
  // Every image's prediction at the top, in the command line's order, its folder named.
  const json predictions = json::parse(read_text(out + "/predictions.json"));
  REQUIRE(predictions.size() == 3);
  CHECK(predictions[0].at("folder") == "28x28");
  CHECK(predictions[1].at("folder") == "35x56");
  CHECK(predictions[1].at("name") == "wide.png");
  CHECK(predictions[2].at("folder") == "28x28");
  const std::string index = read_text(out + "/index.html");
  CHECK(index.find("href=\"35x56/index.html\"") != std::string::npos);
  CHECK(fs::exists(out + "/28x28/index.html"));
  // The wide photo's logits are the ones it gets alone.
  const std::string alone = extras().dir / "wide_alone";
  const auto a = explain_run(
      {"--resize", "none", "wide.png", "--method", "attention", "--out", alone}, "wide alone");
  REQUIRE(a.code == 0);
  check_close(ex::read_npy(out + "/35x56/logits.npy"), ex::read_npy(alone + "/logits.npy"), 1e-6);
  // --resize model fits every photo to the model: one batch, one folder.
  const auto m = explain_run(
      {"a.png", "wide.png", "--method", "attention", "--out", extras().dir / "mixed_model"},
      "mixed model");
  REQUIRE(m.code == 0);
  CHECK(ex::read_npy(extras().dir / "mixed_model/attention.npy").shape() == Dims{2, 28, 28});
}
