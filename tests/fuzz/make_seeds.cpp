// fuzz_make_seeds DIR SOURCE_DIR: writes the fuzz targets' seed corpora into DIR/<target>/:
// valid files made with the library itself, and copies of the repository's image fixtures
// (SOURCE_DIR/tests/fixtures/images) and training configs (SOURCE_DIR/configs). `make fuzz` runs
// it before the fuzzers, the suite before its replay tests.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "explain/npy.h"
#include "fuzz_util.h"
#include "nn/optim/adam.h"
#include "nn/state.h"
#include "ops/ops.h"

namespace fs = std::filesystem;
using namespace vitrine;

namespace {
void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}
std::string bytes_of(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s += static_cast<char>(b);
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_make_seeds DIR SOURCE_DIR\n");
    return 2;
  }
  const fs::path dir = argv[1], source = argv[2];
  try {
    // The repository's valid files: images in every layout, and the training configs.
    // Every regular file below from (configs/seeds/ too), named by its path below it.
    const auto copy_all = [&](const fs::path& from, const char* target) {
      fs::create_directories(dir / target);
      for (const auto& e : fs::recursive_directory_iterator(from)) {
        if (!e.is_regular_file()) continue;
        std::string name = fs::relative(e.path(), from).string();
        std::replace(name.begin(), name.end(), '/', '_');
        fs::copy_file(e.path(), dir / target / name, fs::copy_options::overwrite_existing);
      }
    };
    copy_all(source / "tests/fixtures/images", "image");
    copy_all(source / "configs", "train_config");
    // The explain server's requests: options, a NUL byte, an image file (fuzz_serve_request).
    const std::vector<std::string> options = {
        "", R"({"methods": "all", "head": 1, "threshold": 0.5, "samples": 2, "steps": 3})",
        R"({"methods": ["attention", "rollout"], "layer": -2, "resize": "none", "crop": "topleft"})",
        R"({"target": 2, "colormap": "jet", "alpha": 0.2, "grids": true, "heads": false})",
        R"({"resize": "factor:0.5", "pos_interp": "dino", "head_fusion": "max"})"};
    std::vector<fs::path> images;
    for (const auto& e : fs::directory_iterator(source / "tests/fixtures/images"))
      if (e.path().extension() != ".json") images.push_back(e.path());
    std::sort(images.begin(), images.end());
    size_t n = 0;
    for (const fs::path& p : images) {
      std::ifstream in(p, std::ios::binary);
      const std::string image((std::istreambuf_iterator<char>(in)), {});
      write(dir / "serve_request" / p.filename(),
            options[n++ % options.size()] + std::string(1, '\0') + image);
    }
    // safetensors: a checkpoint with AdamW state after one step, and plain tensors of every dtype.
    models::VisionTransformer model(vt_fuzz::tiny_vit());
    nn::optim::AdamW opt(model.parameters());
    Tensor loss = ops::sum(model.forward(ops::ones({1, 1, 4, 4})));
    loss.backward();
    opt.step();
    fs::create_directories(dir / "safetensors");
    nn::save_checkpoint((dir / "safetensors/checkpoint.safetensors").string(), model,
                        {{"vitrine.config", model.config().to_json().dump()}}, &opt);
    nn::write_safetensors((dir / "safetensors/tensors.safetensors").string(),
                          {{"f", ops::ones({2, 3})},
                           {"d", ops::zeros({2}, kFloat64)},
                           {"i", ops::from_vector(std::vector<int64_t>{1, -2})},
                           {"empty", ops::zeros({0, 3})}},
                          {{"note", "{\"a\": [1, 2.5, \"x\"]}"}});
    // .npy
    fs::create_directories(dir / "npy");
    explain::write_npy((dir / "npy/a.npy").string(), ops::ones({2, 3}));
    explain::write_npy((dir / "npy/scalar.npy").string(), ops::ones({}));
    // IDX (first byte: 1 = the images file, 0 = the labels file)
    write(dir / "idx/images", bytes_of({1, 0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0,  3,  0, 0,
                                        0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
    write(dir / "idx/labels", bytes_of({0, 0, 0, 8, 1, 0, 0, 0, 2, 1, 0}));
    // CIFAR: a CIFAR-10 record (label + 3072 bytes) and a CIFAR-100 one (2 labels + 3072)
    write(dir / "cifar/cifar10",
          std::string(1, '\0') + std::string(1, '\3') + std::string(3072, 'a'));
    write(dir / "cifar/cifar100",
          std::string(1, '\1') + bytes_of({2, 57}) + std::string(3072, 'b'));
    // model configs
    write(dir / "model_config/vit.json", model.config().to_json().dump());
    write(dir / "model_config/hf.json",
          R"({"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1, )"
          R"("num_attention_heads": 2, "intermediate_size": 16, "image_size": 8, "patch_size": 4, )"
          R"("num_channels": 1, "id2label": {"0": "a", "1": "b"}})");
    write(dir / "model_config/dinov2.json",
          R"({"model_type": "dinov2", "hidden_size": 8, "num_hidden_layers": 1, )"
          R"("num_attention_heads": 2, "mlp_ratio": 2, "image_size": 8, "patch_size": 4})");
    write(dir / "model_config/resnet.json",
          R"({"arch": "resnet", "depth": 8, "channels": 3, "num_classes": 10, "width": 4})");
    write(dir / "model_config/resnet_imagenet.json",
          R"({"arch": "resnet", "layers": [1, 2, 1, 1], "stem": "imagenet", "width": 4})");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
