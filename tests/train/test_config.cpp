// train/config: the default config and the preset files validate; --set overrides of every
// type; unknown keys and type mismatches give messages naming the key and the valid keys;
// validate_config's range checks; config files that are missing, invalid or partial; data_path
// and make_schedule; fashion-mnist-pasted's optional data.pasted section.
#include <filesystem>
#include <fstream>
#include <set>

#include "nn/data/dataset.h"
#include "test_util.h"
#include "train/config.h"
#include "train/options.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace tr = vitrine::train;

namespace {

const std::string kConfigs = VITRINE_CONFIGS;

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

/// The default config with one assignment applied.
json with(const std::string& assignment) {
  json c = tr::default_config();
  tr::apply_override(c, assignment);
  return c;
}

}  // namespace

TEST_CASE("train config: the built-in default is configs/fashion_mnist.json and validates") {
  const json c = tr::default_config();
  CHECK(c == read_json(kConfigs + "/fashion_mnist.json"));
  CHECK_NOTHROW(tr::validate_config(c));
  // The recipe named in the issue, with the preset cut to depth 3, a convolutional stem,
  // drop-path 0.1 and flips, 10 epochs, evaluated on one view of each image (docs/benchmarks.md).
  CHECK(c["model"] ==
        json{{"preset", "fmnist"}, {"depth", 3}, {"stem", {32, 64, 128}}, {"drop_path", 0.1}});
  CHECK(c["train"]["tta_hflip"] == false);
  CHECK(c["train"]["sync_bn"] == true);  // BatchNorm synchronised under mpirun
  CHECK(c["train"]["epochs"] == 10);
  CHECK(c["data"]["dataset"] == "fashion-mnist");
  CHECK(c["data"]["batch_size"] == 128);
  CHECK(c["data"]["validation_fraction"] == 0);  // all 60000 training images train
  CHECK(c["optim"]["name"] == "adamw");
  CHECK(c["optim"]["lr"].get<double>() == 1e-3);
  CHECK(c["optim"]["weight_decay"].get<double>() == 0.05);
  CHECK(c["optim"]["label_smoothing"].get<double>() == 0.1);
  CHECK(c["schedule"]["name"] == "warmup_cosine");
  CHECK(c["data"]["transforms"] == json{{"hflip", 0.5}, {"mean", {0.2860}}, {"std", {0.3530}}});
  models::ViTConfig fmnist = models::ViTConfig::preset("fmnist");
  fmnist.depth = 3;
  fmnist.stem = {32, 64, 128};
  fmnist.drop_path = 0.1;
  CHECK(tr::model_config(c).to_json() == fmnist.to_json());
  CHECK(tr::data_path(c) == nn::data::fashion_mnist_dir());
}

TEST_CASE("train config: every preset file in configs/ loads complete and validates") {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".json") continue;  // configs/seeds/ too
    const std::string path = entry.path().string();
    INFO("preset: " << path);
    names.insert(entry.path().filename().string());
    const json c = tr::load_config(path);
    CHECK_NOTHROW(tr::validate_config(c));
    // Presets list every key: filling in the defaults adds nothing.
    CHECK(c == read_json(path));
  }
  CHECK(names.count("fashion_mnist.json") == 1);
  CHECK(names.count("cifar10.json") == 1);
  CHECK(names.count("imagefolder.json") == 1);
  for (const char* seed :
       {"001_cifar_vit_pytorch.json", "003_mnist_vit.json", "004_transfer_vit_b16.json"})
    CHECK(names.count(seed) == 1);

  const json cifar = tr::load_config(kConfigs + "/cifar10.json");
  const models::ViTConfig vit = tr::model_config(cifar);
  CHECK(vit.channels == 3);
  CHECK(vit.image_h == 32);
  CHECK(vit.num_classes == 10);
  const json folder = tr::load_config(kConfigs + "/imagefolder.json");
  CHECK(tr::model_config(folder).image_h == 64);
  CHECK(tr::model_config(folder).patch == 8);
}

TEST_CASE("train config: --set overrides of each type") {
  SUBCASE("integer under a preset: the ViTConfig field is added to the model section") {
    const json c = with("model.depth=5");
    CHECK(c["model"] ==
          json{{"preset", "fmnist"}, {"depth", 5}, {"stem", {32, 64, 128}}, {"drop_path", 0.1}});
    CHECK(tr::model_config(c).depth == 5);
    CHECK(tr::model_config(c).dim == 128);  // the rest from the preset
    CHECK_NOTHROW(tr::validate_config(c));
  }
  SUBCASE("float") {
    const json c = with("optim.lr=5e-4");
    CHECK(c["optim"]["lr"].get<double>() == 5e-4);
    CHECK(with("train.ema_decay=0.999")["train"]["ema_decay"].get<double>() == 0.999);
    // An integer for a float key (numbers are one type) and a float for an integer key.
    CHECK(with("optim.lr=1")["optim"]["lr"] == 1);
    CHECK(with("optim.lr=.5")["optim"]["lr"].get<double>() == 0.5);  // what C reads, JSON not
    CHECK(with("optim.lr=1.")["optim"]["lr"].get<double>() == 1.0);
    CHECK(with("train.epochs=3.0")["train"]["epochs"].get<double>() == 3.0);
    CHECK_NOTHROW(tr::validate_config(with("train.epochs=3.0")));
  }
  SUBCASE("string: the text as it is, even where it would parse as JSON") {
    CHECK(with("data.path=/x")["data"]["path"] == "/x");
    CHECK(with("train.out=2024")["train"]["out"] == "2024");
    CHECK(with("train.out=true")["train"]["out"] == "true");
    CHECK(with("train.out=\"quoted\"")["train"]["out"] == "quoted");
    CHECK(with("data.path=")["data"]["path"] == "");
    CHECK(with("data.path=a=b")["data"]["path"] == "a=b");
    CHECK(with("model.pool=mean")["model"]["pool"] == "mean");
    CHECK(with("model.preset=cifar10")["model"]["preset"] == "cifar10");
  }
  SUBCASE("bool") {
    CHECK(with("optim.nesterov=true")["optim"]["nesterov"] == true);
    const json no_sync = with("train.sync_bn=false");
    CHECK(no_sync["train"]["sync_bn"] == false);
    CHECK(tr::TrainConfig::from_json(no_sync).train.sync_bn == false);
    CHECK(tr::TrainConfig::from_json(tr::default_config()).train.sync_bn == true);
    CHECK(with("model.qkv_bias=false")["model"]["qkv_bias"] == false);
  }
  SUBCASE("arrays, and sizes as a number or [h, w]") {
    CHECK(with("optim.betas=[0.9, 0.95]")["optim"]["betas"] == json{0.9, 0.95});
    json c = with("model.image_size=[32,32]");
    CHECK(c["model"]["image_size"] == json{32, 32});
    CHECK(tr::model_config(c).image_h == 32);
    tr::apply_override(c, "model.image_size=36");
    CHECK(tr::model_config(c).image_w == 36);
    tr::apply_override(c, "model.image_size=[32, 32]");
    // The transforms still give 28x28 images; a resize makes them fit.
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "1x28x28", "1x32x32");
    tr::apply_override(c, "data.transforms.resize=32");
    tr::apply_override(c, "data.transforms.random_crop=32");
    CHECK(c["data"]["transforms"]["resize"] == 32);
    CHECK_NOTHROW(tr::validate_config(c));
    tr::apply_override(c, "data.transforms.random_crop={\"size\": [32, 32], \"padding\": 4}");
    CHECK(c["data"]["transforms"]["random_crop"]["padding"] == 4);
  }
  SUBCASE("nested keys, transforms absent from the config, whole sections") {
    const json crop = with("data.transforms.random_crop={\"size\": 28, \"padding\": 2}");
    json c2 = crop;
    tr::apply_override(c2, "data.transforms.random_crop.padding=4");
    CHECK(c2["data"]["transforms"]["random_crop"]["padding"] == 4);
    // A key inside a transform the config does not have: set the transform whole.
    CHECK_ERROR_CONTAINS(
        with("data.transforms.random_crop.padding=4"),
        "data.transforms.random_crop is not in the config",
        R"(set it whole, as data.transforms.random_crop={"padding": ..., "size": ...})");
    const json c = with("data.transforms.hflip=0.5");
    CHECK(c["data"]["transforms"]["hflip"].get<double>() == 0.5);
    CHECK_NOTHROW(tr::validate_config(c));
    CHECK(with("data.transforms={}")["data"]["transforms"] == json::object());
    CHECK(with("model={\"preset\": \"fmnist\", \"depth\": 2}")["model"]["depth"] == 2);
  }
  SUBCASE("spaces around the key") { CHECK(with(" optim.lr =0.01")["optim"]["lr"] == 0.01); }
}

TEST_CASE("train config: --set with an unknown key names it and lists the valid keys") {
  json c = tr::default_config();
  const json before = c;
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "modle.depth=4"), "modle.depth=4",
                       "unknown section \"modle\"", "did you mean \"model\"?",
                       "model, data, optim, schedule, train");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.lrr=1e-3"), "unknown key \"optim.lrr\"",
                       "did you mean \"optim.lr\"?",
                       "the keys of \"optim\" are: betas, eps, grad_clip, label_smoothing, lr, "
                       "momentum, name, nesterov, no_decay, weight_decay");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "model.dept=4"), "unknown key \"model.dept\"",
                       "did you mean \"model.depth\"?", "preset", "mlp_dim", "num_classes");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "train.epoch=3"), "did you mean \"train.epochs\"?");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "data.transforms.rotate=10"),
                       "unknown key \"data.transforms.rotate\"",
                       "the keys of \"data.transforms\" are: center_crop, hflip, mean, "
                       "random_crop, resize, std");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "train.zzzzzz=1"), "unknown key \"train.zzzzzz\"",
                       "the keys of \"train\" are: accum_steps");
  {  // no suggestion when nothing is close
    json d = tr::default_config();
    try {
      tr::apply_override(d, "train.zzzzzz=1");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("did you mean") == std::string::npos);
    }
  }
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.lr.x=1"), "optim.lr is a number (now 0.001)",
                       "not a section", "\"x\"");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.betas.0=0.8"), "optim.betas is an array",
                       "set it whole", "optim.betas=[0.9,0.999]");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.lr"), "expected KEY=VALUE");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim..lr=1"), "not a dotted key");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "=1"), "not a dotted key");
  CHECK(c == before);  // failed overrides change nothing
}

TEST_CASE("train config: --set with a value of another type names the key, its type and value") {
  json c = tr::default_config();
  const json before = c;
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.lr=fast"),
                       "optim.lr holds a number (now 0.001), got fast (a string)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.nesterov=1"),
                       "optim.nesterov holds a boolean (now false), got 1 (a number)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "optim.betas=0.9"),
                       "optim.betas holds an array (now [0.9,0.999]), got 0.9 (a number)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "train.epochs=[3]"),
                       "train.epochs holds a number (now 10), got [3] (an array)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "data.transforms=3"),
                       "data.transforms holds an object, got 3 (a number)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "model.depth=deep"),
                       "model.depth holds a number (now 3), got deep (a string)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "model.qkv_bias=yes"),
                       "model.qkv_bias takes a boolean, got yes (a string)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "model.image_size=big"), "model.image_size",
                       "big (a string)");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "model.heads=many"),
                       "model.heads takes a number, got many (a string)");
  json crop = c;
  tr::apply_override(crop, "data.transforms.random_crop={\"size\": 28, \"padding\": 2}");
  CHECK_ERROR_CONTAINS(tr::apply_override(crop, "data.transforms.random_crop.size=x"),
                       "data.transforms.random_crop.size holds a number (now 28), got x");
  CHECK(c == before);
}

TEST_CASE("train config: validate_config names the key and the expected range") {
  struct Case {
    std::string set;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"optim.lr=0", {"config: optim.lr must be > 0, got 0"}},
      {"optim.weight_decay=-0.1", {"config: optim.weight_decay must be >= 0, got -0.1"}},
      {"optim.name=adamx",
       {"config: optim.name must be one of adamw, adam, sgd, got \"adamx\"",
        "did you mean \"adamw\"?"}},
      {"optim.betas=[0.9]", {"optim.betas must be [beta1, beta2], got [0.9]"}},
      {"optim.betas=[0.9, 1.0]", {"optim.betas must be in [0, 1)"}},
      {"optim.label_smoothing=1", {"optim.label_smoothing must be in [0, 1), got 1"}},
      {"optim.momentum=1.5", {"optim.momentum must be in [0, 1), got 1.5"}},
      {"data.batch_size=0", {"config: data.batch_size must be an integer >= 1, got 0"}},
      {"data.batch_size=2.5", {"data.batch_size must be an integer >= 1, got 2.5"}},
      {"data.workers=-2", {"data.workers must be an integer >= -1, got -2"}},
      {"data.validation_fraction=1", {"data.validation_fraction must be in [0, 1), got 1"}},
      {"data.dataset=fmnist",
       {"data.dataset must be one of fashion-mnist, mnist, cifar10, cifar100, imagefolder"}},
      {"data.transforms.mean=[0.5, 0.5]", {"config: data.transforms: ", "mean"}},
      {"data.transforms.hflip=2", {"config: data.transforms: ", "hflip"}},
      {"schedule.name=cosine", {"schedule.name must be one of constant, step, warmup_cosine"}},
      {"train.precision=fp16", {"train.precision must be one of fp32, tf32, bf16, got \"fp16\""}},
      {"schedule.warmup_epochs=20",
       {"schedule.warmup_epochs (20) must not exceed train.epochs (10)"}},
      {"schedule.min_lr_factor=2", {"schedule.min_lr_factor must be in [0, 1], got 2"}},
      {"schedule.step_epochs=0", {"schedule.step_epochs must be an integer >= 1"}},
      {"schedule.gamma=0", {"schedule.gamma must be in (0, 1], got 0"}},
      {"train.epochs=0", {"train.epochs must be an integer >= 1, got 0"}},
      {"train.seed=-1", {"train.seed must be an integer >= 0"}},
      {"train.log_every=0", {"train.log_every must be an integer >= 1"}},
      {"train.accum_steps=0", {"train.accum_steps must be an integer >= 1"}},
      {"train.ema_decay=1", {"train.ema_decay must be in [0, 1), got 1"}},
      {"train.device=gpu", {"config: train.device: ", "'gpu' is not a device"}},
      {"train.out=\"\"", {"train.out must name the run folder"}},
      {"model.depth=0", {"config: model: ViTConfig: ", "depth 0"}},
      {"model.patch_kernel=5",
       {"config: model: ViTConfig: patch_kernel 5 must be 0 (the patch size) or the patch size 4 "
        "plus an even number"}},
      {"model.heads=3", {"config: model: ViTConfig: dim 128 is not divisible by heads 3"}},
      {"model.preset=vit_huge", {"config: model: ViTConfig: unknown preset 'vit_huge'"}},
      {"model.channels=3", {"model.channels is 3, but fashion-mnist images have 1 channel"}},
      {"model.num_classes=100", {"model.num_classes is 100, but fashion-mnist has 10 classes"}},
      {"model.num_classes=0", {"model.num_classes must be >= 1"}},
      {"data.dataset=cifar10", {"model.channels is 1, but cifar10 images have 3 channels"}},
  };
  for (const Case& tc : cases) {
    INFO("--set " << tc.set);
    json c = tr::default_config();
    tr::apply_override(c, tc.set);
    bool thrown = false;
    try {
      tr::validate_config(c);
    } catch (const Error& e) {
      thrown = true;
      const std::string msg = e.what();
      INFO("message: " << msg);
      for (const std::string& s : tc.expected)
        CHECK_MESSAGE(msg.find(s) != std::string::npos, "missing \"" << s << "\"");
    }
    CHECK(thrown);
  }
}

TEST_CASE("train config: validate_config on the structure and the cross-section checks") {
  const json base = tr::default_config();
  {
    json c = base;
    c["trian"] = json::object();
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: unknown section \"trian\"",
                         "did you mean \"train\"?");
  }
  {
    json c = base;
    c["optim"]["lrr"] = 1;
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: unknown key \"optim.lrr\"",
                         "did you mean \"optim.lr\"?");
  }
  {
    json c = base;
    c["model"]["dpeth"] = 4;
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: unknown key \"model.dpeth\"",
                         "did you mean \"model.depth\"?");
  }
  {
    json c = base;
    c["optim"].erase("lr");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: missing key \"optim.lr\"");
  }
  {
    json c = base;
    c.erase("schedule");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: missing section \"schedule\"");
  }
  {  // train.sync_bn: optional (true when absent), a bool when given
    json c = base;
    c["train"]["sync_bn"] = 1;
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: train.sync_bn must be true or false",
                         "got 1");
    c["train"].erase("sync_bn");
    CHECK_NOTHROW(tr::validate_config(c));
    CHECK(tr::TrainConfig::from_json(c).train.sync_bn == true);
  }
  {
    json c = base;
    c["train"] = 3;
    CHECK_ERROR_CONTAINS(tr::validate_config(c),
                         "section \"train\" must be an object, got a number");
  }
  CHECK_ERROR_CONTAINS(tr::validate_config(json::array()), "expected a JSON object");
  {  // comments at every level are skipped, in the model and the transforms too
    json c = base;
    c["_note"] = "x";
    c["optim"]["_why"] = "y";
    c["model"]["_comment"] = "z";
    c["data"]["transforms"]["_comment"] = "w";
    CHECK_NOTHROW(tr::validate_config(c));
    CHECK(tr::model_config(c).dim == 128);
    CHECK(tr::without_comments(c) ==
          tr::without_comments(base));  // and without_comments drops them all
    CHECK_FALSE(tr::without_comments(c)["data"]["transforms"].contains("_comment"));
  }
  {  // early stopping needs a validation split
    json c = with("train.early_stopping_patience=3");
    tr::apply_override(c, "data.validation_fraction=0.1");
    CHECK_NOTHROW(tr::validate_config(c));
    tr::apply_override(c, "data.validation_fraction=0");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "train.early_stopping_patience 3",
                         "data.validation_fraction > 0");
  }
  {  // Nesterov needs momentum (SGD only)
    json c = with("optim.name=sgd");
    tr::apply_override(c, "optim.nesterov=true");
    CHECK_NOTHROW(tr::validate_config(c));
    tr::apply_override(c, "optim.momentum=0");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "optim.nesterov needs optim.momentum > 0");
  }
  {  // a model from full fields, no preset
    json c = base;
    c["model"] = models::ViTConfig::preset("fmnist").to_json();
    c["model"]["depth"] = 2;
    CHECK_NOTHROW(tr::validate_config(c));
    CHECK(tr::model_config(c).depth == 2);
  }
  {  // switching to CIFAR-10 needs the model and the transforms to follow
    json c = base;
    tr::apply_override(c, "data.dataset=cifar10");
    tr::apply_override(c, "model.preset=cifar10");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "config: data.transforms: ", "mean");
    tr::apply_override(c, "data.transforms={\"random_crop\": {\"size\": 32, \"padding\": 4}}");
    CHECK_NOTHROW(tr::validate_config(c));
    tr::apply_override(c, "data.transforms={\"random_crop\": 28}");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "cifar10's 3x32x32 images into 3x28x28",
                         "the model takes 3x32x32");
  }
  {  // image folders: the transforms must bring any size to the model's
    json c = tr::load_config(kConfigs + "/imagefolder.json");
    tr::apply_override(c, "data.transforms={\"random_crop\": 64, \"hflip\": 0.5}");
    CHECK_NOTHROW(tr::validate_config(c));  // a crop fixes the size too
    tr::apply_override(c, "data.transforms={\"hflip\": 0.5}");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "imagefolder images come in any size",
                         "needs a \"resize\"", "[64, 64]");
    tr::apply_override(c, "data.transforms={}");
    tr::apply_override(c, "model.channels=2");
    CHECK_ERROR_CONTAINS(tr::validate_config(c), "model.channels must be 1 (grey) or 3 (RGB)");
  }
}

TEST_CASE("train config: a ResNet by --set, the CIFAR ones or torchvision's ResNet-18") {
  // model.arch=resnet starts from ResNet-8 for the data's 1x28x28 images and 10 classes.
  json c = with("model.arch=resnet");
  CHECK(tr::model_spec(c).describe() == "ResNet-8, 1x28x28 input, 10 classes, width 16");
  tr::apply_override(c, "model.preset=resnet18");
  CHECK_NOTHROW(tr::validate_config(c));
  const models::ClassifierSpec r18 = tr::model_spec(c);
  CHECK(r18.describe() == "ResNet-18 (ImageNet stem), 1x28x28 input, 10 classes, width 64");
  Generator gen(0);
  // torchvision's 11,689,512 with a conv1 of 1 channel (-6,272) and 10 classes (-507,870)
  CHECK(r18.build(gen)->num_parameters() == 11175370);

  // layers and stem are keys of a ResNet's model section, set like the others.
  json d = with("model.arch=resnet");
  tr::apply_override(d, "model.layers=[1, 1, 1, 1]");
  tr::apply_override(d, "model.stem=imagenet");
  tr::apply_override(d, "model.width=8");
  CHECK(d["model"]["layers"] == json{1, 1, 1, 1});
  CHECK_NOTHROW(tr::validate_config(d));
  CHECK(tr::model_spec(d).describe() ==
        "ResNet-10 (ImageNet stem, layers [1, 1, 1, 1]), 1x28x28 input, 10 classes, width 8");
  CHECK_ERROR_CONTAINS(tr::apply_override(d, "model.layers=2"), "model.layers holds an array",
                       "got 2 (a number)");
  json e = with("model.arch=resnet");
  CHECK_ERROR_CONTAINS(tr::apply_override(e, "model.layers=2"), "model.layers takes an array",
                       "got 2");
  CHECK_ERROR_CONTAINS(tr::apply_override(e, "model.stme=imagenet"),
                       "did you mean \"model.stem\"?");
  tr::apply_override(e, "model.stem=fancy");
  CHECK_ERROR_CONTAINS(tr::validate_config(e), "config: model: ", "model.stem must be \"cifar\"",
                       "got \"fancy\"");
  json f = with("model.arch=resnet");
  tr::apply_override(f, "model.preset=resnet18");
  tr::apply_override(f, "model.depth=34");
  CHECK_ERROR_CONTAINS(tr::validate_config(f), "model.depth 34 disagrees with model.layers");
  // A ResNet preset in the ViT's section says to set the architecture first.
  CHECK_ERROR_CONTAINS(tr::validate_config(with("model.preset=resnet18")),
                       "preset 'resnet18' is a ResNet's", "--set model.arch=resnet");
}

TEST_CASE("train config: load_config errors name the file, JSON errors their line and column") {
  TempDir tmp;
  CHECK_ERROR_CONTAINS(tr::load_config(tmp / "nope.json"), "config file", "nope.json",
                       "no such file");
  CHECK_ERROR_CONTAINS(tr::load_config(tmp.dir.string()), "is a folder");

  write_file(tmp / "bad.json", "{\n  \"optim\": {\"lr\": 1e-3,}\n}\n");
  CHECK_ERROR_CONTAINS(tr::load_config(tmp / "bad.json"), "bad.json",
                       "invalid JSON at line 2, column 24", "expected string literal");
  write_file(tmp / "unclosed.json", "{\"train\": {\"epochs\": 3}\n");
  CHECK_ERROR_CONTAINS(tr::load_config(tmp / "unclosed.json"), "unclosed.json",
                       "invalid JSON at line 2, column 1");
  write_file(tmp / "empty.json", "");
  CHECK_ERROR_CONTAINS(tr::load_config(tmp / "empty.json"), "empty.json",
                       "invalid JSON at line 1, column 1");
  write_file(tmp / "list.json", "[1, 2]");
  CHECK_ERROR_CONTAINS(tr::load_config(tmp / "list.json"), "list.json",
                       "expected a JSON object with the sections model, data, optim, schedule, "
                       "train, got an array");
}

TEST_CASE("train config: a partial file takes the rest from the defaults") {
  TempDir tmp;
  write_file(tmp / "lr.json", R"({"optim": {"lr": 1e-4}, "train": {"epochs": 2}})");
  json c = tr::load_config(tmp / "lr.json");
  json expected = tr::default_config();
  expected["optim"]["lr"] = 1e-4;
  expected["train"]["epochs"] = 2;
  CHECK(c == tr::without_comments(expected));  // the default's own comment is not copied
  CHECK_NOTHROW(tr::validate_config(c));

  // A given value replaces the default whole: the model section and the transforms object.
  write_file(tmp / "model.json",
             R"({"model": {"preset": "fmnist", "depth": 2}, "data": {"transforms": {}}})");
  c = tr::load_config(tmp / "model.json");
  CHECK(c["model"] == json{{"preset", "fmnist"}, {"depth", 2}});
  CHECK(c["data"]["transforms"] == json::object());
  CHECK(c["data"]["batch_size"] == 128);
  CHECK_NOTHROW(tr::validate_config(c));
  CHECK(tr::with_defaults(json::object()) == tr::without_comments(tr::default_config()));
}

TEST_CASE("train config: data_path resolves the default folder only for Fashion-MNIST") {
  CHECK(tr::data_path(with("data.path=/data/fm")) == "/data/fm");
  CHECK(tr::data_path(tr::default_config()) == nn::data::fashion_mnist_dir());
  CHECK_ERROR_CONTAINS(tr::data_path(with("data.dataset=cifar10")),
                       "data.path is empty, and cifar10 has no default folder", "--data DIR",
                       "with DIR the folder holding data_batch_1.bin");
  CHECK_ERROR_CONTAINS(tr::data_path(with("data.dataset=imagefolder")),
                       "one sub-folder of images per class");
}

TEST_CASE("train config: fashion-mnist-pasted and its optional data.pasted section") {
  // The preset: the localisation benchmark's data set, every data.pasted key given.
  const json preset = tr::load_config(kConfigs + "/fashion_mnist_pasted.json");
  CHECK_NOTHROW(tr::validate_config(preset));
  CHECK(preset["data"]["dataset"] == "fashion-mnist-pasted");
  CHECK(tr::data_path(preset) == nn::data::fashion_mnist_dir());
  const models::ViTConfig vit = tr::model_config(preset);
  CHECK(vit.image_h == 64);
  CHECK(vit.patch == 8);
  const nn::data::PastedOptions o = tr::pasted_options(preset);
  CHECK(o.canvas == 64);
  CHECK(o.distractors == "fragments");
  CHECK(o.count == 3);

  // Without the section: PastedOptions' defaults (a 64x64 canvas), so a 64x64 model fits.
  json c = tr::default_config();
  c["data"]["dataset"] = "fashion-mnist-pasted";
  c["model"] = vit.to_json();
  CHECK_NOTHROW(tr::validate_config(c));
  CHECK(tr::pasted_options(c).canvas == 64);
  CHECK(tr::pasted_options(c).seed == 0);
  CHECK(tr::data_path(c) == nn::data::fashion_mnist_dir());
  // Part of the section: the rest from the defaults.
  tr::apply_override(c, "data.pasted={\"distractors\": \"noise\", \"noise\": 0.2}");
  CHECK_NOTHROW(tr::validate_config(c));
  CHECK(tr::pasted_options(c).distractors == "noise");
  CHECK(tr::pasted_options(c).noise == 0.2);
  CHECK(tr::pasted_options(c).max_scale == 1.5);
  tr::apply_override(c, "data.pasted.seed=7");  // a key the section leaves out
  CHECK(tr::pasted_options(c).seed == 7);
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "data.pasted.cont=2"),
                       "unknown key \"data.pasted.cont\"", "did you mean \"data.pasted.count\"?",
                       "the keys of \"data.pasted\" are: canvas, count, distractors, max_scale, "
                       "min_scale, noise, seed");
  CHECK_ERROR_CONTAINS(tr::apply_override(c, "data.pasted.count=many"),
                       "data.pasted.count takes a number, got many (a string)");
  {  // absent from the config: set it whole
    json d = tr::default_config();
    CHECK_ERROR_CONTAINS(tr::apply_override(d, "data.pasted.canvas=96"),
                         "data.pasted is not in the config", "set it whole, as data.pasted={");
  }
  // The canvas is the data set's image size: the model must take it.
  tr::apply_override(c, "data.pasted.canvas=72");
  CHECK_ERROR_CONTAINS(tr::validate_config(c), "fashion-mnist-pasted's 1x72x72 images",
                       "the model takes 1x64x64");

  struct Case {
    json pasted;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {{{"canvs", 64}},
       {"config: unknown key \"data.pasted.canvs\"", "did you mean \"data.pasted.canvas\"?",
        "the keys of \"data.pasted\" are: canvas, min_scale, max_scale"}},
      {{{"canvas", 40}},
       {"config: data.pasted.canvas 40 cannot hold fashion-mnist's 28x28 items at "
        "data.pasted.max_scale 1.5 (42x42)"}},
      {{{"canvas", 0}}, {"config: data.pasted.canvas must be an integer >= 1, got 0"}},
      {{{"min_scale", 0}}, {"config: data.pasted.min_scale must be > 0, got 0"}},
      {{{"max_scale", 0.5}},
       {"config: data.pasted.min_scale (1) must not exceed data.pasted.max_scale (0.5)"}},
      {{{"distractors", "fragment"}},
       {"config: data.pasted.distractors must be one of none, noise, fragments, got "
        "\"fragment\"",
        "did you mean \"fragments\"?"}},
      {{{"count", -1}}, {"config: data.pasted.count must be an integer in [0, 100], got -1"}},
      {{{"noise", 1.5}}, {"config: data.pasted.noise must be in [0, 1], got 1.5"}},
      {{{"seed", "x"}}, {"config: data.pasted.seed must be an integer >= 0, got \"x\""}},
      {3, {"config: data.pasted must be an object", "got a number"}},
  };
  for (const Case& tc : cases) {
    INFO("data.pasted = " << tc.pasted.dump());
    json bad = preset;
    bad["data"]["pasted"] = tc.pasted;
    bool thrown = false;
    try {
      tr::validate_config(bad);
    } catch (const Error& e) {
      thrown = true;
      const std::string msg = e.what();
      INFO("message: " << msg);
      for (const std::string& s : tc.expected)
        CHECK_MESSAGE(msg.find(s) != std::string::npos, "missing \"" << s << "\"");
    }
    CHECK(thrown);
  }
  // The section belongs to fashion-mnist-pasted alone.
  json other = tr::default_config();
  other["data"]["pasted"] = json::object();
  CHECK_ERROR_CONTAINS(tr::validate_config(other),
                       "config: data.pasted is read by data.dataset \"fashion-mnist-pasted\" "
                       "only, got data.dataset \"fashion-mnist\"");
  CHECK_NOTHROW(tr::validate_config(tr::default_config()));  // the others are unchanged
  CHECK_FALSE(tr::default_config()["data"].contains("pasted"));
}

TEST_CASE("train config: make_schedule counts epochs in optimizer steps") {
  json c = tr::default_config();  // cosine to 0 over train.epochs
  // the config's schedule, read as the Trainer reads it
  auto make_schedule = [](const json& config, int64_t updates_per_epoch) {
    const tr::TrainConfig t = tr::TrainConfig::from_json(config);
    return tr::make_schedule(t.schedule, t.train.epochs, updates_per_epoch);
  };
  tr::apply_override(c, "train.epochs=10");
  tr::apply_override(c, "schedule.warmup_epochs=1");
  auto s = make_schedule(c, 100);
  CHECK(s->type_name() == "warmup_cosine");
  CHECK(s->state_json()["warmup_steps"] == 100);
  CHECK(s->state_json()["total_steps"] == 1000);
  CHECK(s->factor(0) == 0);
  CHECK(s->factor(50) == doctest::Approx(0.5));
  CHECK(s->factor(100) == doctest::Approx(1.0));
  CHECK(s->factor(550) == doctest::Approx(0.5));  // half-way through the decay
  CHECK(s->factor(1000) == doctest::Approx(0.0));

  tr::apply_override(c, "schedule.warmup_epochs=0.25");
  tr::apply_override(c, "schedule.min_lr_factor=0.1");
  s = make_schedule(c, 10);
  CHECK(s->state_json()["warmup_steps"] == 3);  // round(2.5) away from zero
  CHECK(s->factor(100) == doctest::Approx(0.1));

  tr::apply_override(c, "schedule.name=step");
  tr::apply_override(c, "schedule.step_epochs=2");
  tr::apply_override(c, "schedule.gamma=0.5");
  s = make_schedule(c, 100);
  CHECK(s->type_name() == "step");
  CHECK(s->factor(199) == 1.0);
  CHECK(s->factor(200) == 0.5);
  CHECK(s->factor(400) == 0.25);

  tr::apply_override(c, "schedule.name=constant");
  CHECK(make_schedule(c, 7)->factor(12345) == 1.0);
  CHECK_ERROR_CONTAINS(make_schedule(c, 0), "updates_per_epoch must be >= 1");
}
