// Checkpoints from elsewhere, as the seed recipes bring them: a torchvision ViT fine-tuned with its
// head replaced (`model.heads = nn.Linear(dim, k)`, so the keys are heads.weight / heads.bias),
// explained and evaluated by the two tools as separate processes; the same normalisation rule in
// both (models::checkpoint_normalisation), class names "0", "1", ... when the file has none, an
// unknown tensor named in the error, and a PyTorch .pth given to any tool naming the converter.
// The weights are the torchvision parity fixture's (tests/fixtures/vit_tv.safetensors, 5 classes),
// its head renamed; its logits are in vit_parity.json.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "explain/npy.h"
#include "models/classifier.h"
#include "nn/state.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace fs = std::filesystem;
namespace ex = vitrine::explain;

namespace {

/// The torchvision fixture with its head under `heads` (a fine-tuned model's), plus `extra`
/// tensors; its config in model.json beside it (not config.json: that name is a run folder's).
/// Returns the checkpoint's path.
std::string fine_tuned_torchvision(const TempDir& dir, const nn::NamedTensors& extra = {}) {
  nn::NamedTensors renamed;
  for (auto& [name, t] : nn::read_safetensors(fixture("vit_tv.safetensors")).tensors)
    renamed.emplace_back(name.starts_with("heads.head.") ? "heads." + name.substr(11) : name, t);
  for (const auto& e : extra) renamed.push_back(e);
  const std::string path = dir / (extra.empty() ? "tv_ft.safetensors" : "tv_extra.safetensors");
  nn::write_safetensors(path, renamed);
  write_file(dir / "model.json", fixture_case("vit_parity.json", "tv").at("config").dump());
  return path;
}

}  // namespace

TEST_CASE("foreign checkpoints: a torchvision ViT fine-tuned with `heads` explains and evaluates") {
  TempDir dir;
  const std::string ckpt = fine_tuned_torchvision(dir);
  // The fixture's input, already normalised, through --input: the predictions are its logits'.
  const json& c = fixture_case("vit_parity.json", "tv");
  const Tensor input = fixture_tensor(c.at("input"), kFloat32);
  ex::write_npy(dir / "input.npy", input);
  const ProcessResult r =
      run_process(VITRINE_EXPLAIN_EXE,
                  {"--checkpoint", ckpt, "--model-config", dir / "model.json", "--input",
                   dir / "input.npy", "--method", "attention", "--out", dir / "out"},
                  dir, "explain");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const Tensor logits = fixture_tensor(c.at("logits"));
  for (int64_t b = 0; b < 2; ++b) {
    int64_t best = 0;
    double total = 0;
    for (int64_t k = 0; k < 5; ++k) {
      total += std::exp(logits.at({b, k}));
      if (logits.at({b, k}) > logits.at({b, best})) best = k;
    }
    const double p = std::exp(logits.at({b, best})) / total;
    // Class names "0" .. "4" (the file names none), not "class 3".
    CHECK(r.output.find(fmt::format("predicted {} ({:.1f}%)", best, 100 * p)) != std::string::npos);
  }
  CHECK(r.output.find("predicted class") == std::string::npos);

  // Photos: both tools normalise the checkpoint the same way (ImageNet's, torchvision's).
  const std::vector<uint8_t> px(20 * 24 * 3, 100);
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 10; ++i) {
      fs::create_directories(dir / fmt::format("photos/{}", k));
      write_png(dir / fmt::format("photos/{}/{}.png", k, i), 24, 20, 3, px);
    }
  const std::string imagenet = "ImageNet's, as torchvision's ViTs (the checkpoint names none)";
  const ProcessResult photo =
      run_process(VITRINE_EXPLAIN_EXE,
                  {"--checkpoint", ckpt, "--model-config", dir / "model.json",
                   dir / "photos/0/0.png", "--method", "saliency", "--out", dir / "out2"},
                  dir, "explain_photo");
  INFO(photo.output);
  REQUIRE(photo.code == 0);
  CHECK(photo.output.find("normalisation: mean [0.485, 0.456, 0.406] std [0.229, 0.224, 0.225] "
                          "from " +
                          imagenet) != std::string::npos);
  const ProcessResult ev =
      run_process(VITRINE_TRAIN_EXE,
                  {"--eval", ckpt, "--model-config", dir / "model.json", "--data", dir / "photos",
                   "--set", "data.dataset=imagefolder", "--set", "data.workers=0"},
                  dir, "eval");
  INFO(ev.output);
  REQUIRE(ev.code == 0);
  CHECK(ev.output.find("note: normalisation: " + imagenet) != std::string::npos);
  CHECK(ev.output.find("accuracy") != std::string::npos);
  const models::Normalisation n =
      models::checkpoint_normalisation(ckpt, nn::read_safetensors_metadata(ckpt), 3, true);
  CHECK(n.mean == std::vector<float>{0.485f, 0.456f, 0.406f});
}

TEST_CASE("foreign checkpoints: an unknown tensor is named, and a .pth names the converter") {
  TempDir dir;
  const std::string extra =
      fine_tuned_torchvision(dir, {{"projector.weight", ops::zeros({4, 32})}});
  const ProcessResult r = run_process(
      VITRINE_EXPLAIN_EXE,
      {"--checkpoint", extra, "--model-config", dir / "model.json", "--out", dir / "out"}, dir,
      "extra");
  CHECK(r.code == 1);
  CHECK(r.output.find("unknown tensor 'projector.weight'") != std::string::npos);
  // torch.save's zip archive and a legacy pickle, by their first bytes.
  write_file(dir / "model.pth", std::string("PK\x03\x04", 4) + std::string(60, '\0'));
  write_file(dir / "old.pth", std::string("\x80\x02\x8a\x0a", 4) + std::string(60, '\0'));
  for (const std::string& pth : {dir / "model.pth", dir / "old.pth"}) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
        {VITRINE_EXPLAIN_EXE, {"--checkpoint", pth, "--out", dir / "o"}},
        {VITRINE_TRAIN_EXE, {"--eval", pth}},
        {VITRINE_TRAIN_EXE, {"--finetune", pth, "--model-config", "fmnist", "--epochs", "1"}}};
    for (const auto& run : runs) {
      const std::string& exe = run.first;
      const std::vector<std::string>& args = run.second;
      const ProcessResult p = run_process(exe, args, dir, "pth");
      INFO(exe << " " << args[0] << " " << pth << ": " << p.output);
      CHECK(p.code == 1);
      CHECK(p.output.find("this is a PyTorch checkpoint") != std::string::npos);
      CHECK(p.output.find("tools/convert/convert.py " + pth) != std::string::npos);
    }
  }
  CHECK_FALSE(fs::exists(dir / "o"));
}

TEST_CASE("foreign checkpoints: a converted fine-tuned head wins over --model-config's classes") {
  // As convert.py writes it: the torchvision fixture with its config (5 classes) as
  // vitrine.config; the architecture given as a config of the same model with 1000 classes (a
  // preset's, such as vit_base_patch16_224 for a converted ViT-B/16 fine-tuned to 3 classes).
  TempDir dir;
  json config = fixture_case("vit_parity.json", "tv").at("config");
  nn::Metadata meta;
  nn::set_metadata_json(meta, nn::kConfigKey, config);
  const std::string ckpt = dir / "converted.safetensors";
  nn::write_safetensors(ckpt, nn::read_safetensors(fixture("vit_tv.safetensors")).tensors, meta);
  config["num_classes"] = 1000;
  write_file(dir / "imagenet.json", config.dump());
  const Tensor input = fixture_tensor(fixture_case("vit_parity.json", "tv").at("input"), kFloat32);
  ex::write_npy(dir / "input.npy", input);
  const ProcessResult r =
      run_process(VITRINE_EXPLAIN_EXE,
                  {"--checkpoint", ckpt, "--model-config", dir / "imagenet.json", "--input",
                   dir / "input.npy", "--method", "attention", "--out", dir / "out"},
                  dir, "explain");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("note: --model-config " + (dir / "imagenet.json") +
                      " gives 1000 classes; the checkpoint's own head has 5: its head is used") !=
        std::string::npos);
  check_close(ex::read_npy(dir / "out/logits.npy"),
              fixture_tensor(fixture_case("vit_parity.json", "tv").at("logits"), kFloat32), 1e-4);
  // vitrine-train --eval says the same and evaluates the 5-class head.
  const std::vector<uint8_t> px(16 * 16 * 3, 90);
  for (int k = 0; k < 5; ++k) {
    fs::create_directories(dir / fmt::format("photos/{}", k));
    write_png(dir / fmt::format("photos/{}/0.png", k), 16, 16, 3, px);
  }
  const ProcessResult ev =
      run_process(VITRINE_TRAIN_EXE,
                  {"--eval", ckpt, "--model-config", dir / "imagenet.json", "--data",
                   dir / "photos", "--set", "data.dataset=imagefolder", "--set", "data.workers=0"},
                  dir, "eval");
  INFO(ev.output);
  REQUIRE(ev.code == 0);
  CHECK(ev.output.find("gives 1000 classes; the checkpoint's own head has 5: its head is used") !=
        std::string::npos);
  // A config that differs in anything else is still refused, naming the field.
  config["num_classes"] = 5;
  config["depth"] = 3;
  write_file(dir / "deeper.json", config.dump());
  const ProcessResult bad =
      run_process(VITRINE_EXPLAIN_EXE,
                  {"--checkpoint", ckpt, "--model-config", dir / "deeper.json", "--input",
                   dir / "input.npy", "--out", dir / "bad"},
                  dir, "explain_bad");
  CHECK(bad.code == 1);
  CHECK(bad.output.find("differs from the checkpoint's own ('vitrine.config' metadata) in "
                        "'depth'") != std::string::npos);
}
