// The server tests' fixture, shared with the test that holds the command line and the server to
// one call: the command-line tests' tiny ViT (tiny_vit.h) saved as checkpoints (three named
// classes, or none) and 12 PNG images.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <span>
#include <string>
#include <vector>

#include "decode.h"
#include "explain/serve.h"
#include "nn/data/image_decode.h"
#include "nn/state.h"
#include "test_util.h"
#include "tiny_vit.h"

namespace vt_test {

/// A 28 x 28 grey image: a bright square at (y, x) on a dark ramp.
inline std::vector<uint8_t> square(int y0, int x0) {
  std::vector<uint8_t> px(28 * 28);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x)
      px[y * 28 + x] = (y >= y0 && y < y0 + 8 && x >= x0 && x < x0 + 8) ? 230 : (x + y) % 60;
  return px;
}

/// A checkpoint (three classes with names, or none), and images, in a folder of their own.
/// (It holds no tensors: a static that outlives the backends' own statics must not free any.)
struct Files {
  TempDir dir;
  std::string checkpoint = dir / "model.safetensors", backbone = dir / "backbone.safetensors";
  std::vector<std::string> images;  // 12 PNGs, the square in different places
  Files() {
    for (const auto& [path, classes] : {std::pair{checkpoint, 3}, std::pair{backbone, 0}}) {
      vitrine::Generator gen(5);
      vitrine::models::ViTConfig config = cli_vit_config();
      config.num_classes = classes;
      vitrine::models::VisionTransformer model(config, gen);
      vitrine::nn::Metadata md;
      vitrine::nn::set_metadata_json(md, vitrine::nn::kMeanKey, std::vector<double>{0.25});
      vitrine::nn::set_metadata_json(md, vitrine::nn::kStdKey, std::vector<double>{0.5});
      if (classes)
        vitrine::nn::set_metadata_json(md, vitrine::nn::kClassesKey,
                                       std::vector<std::string>{"shirt", "bag", "boot"});
      vitrine::models::save_vit_timm(path, model, md);
    }
    for (int i = 0; i < 12; ++i) {
      images.push_back(dir / fmt::format("im{}.png", i));
      write_png(images.back(), 28, 28, 1, square(2 * i, 20 - i));
    }
  }
};

inline Files& files() {
  static Files f;
  return f;
}

inline std::string bytes_of(const std::string& path) { return read_text(path); }

inline vitrine::explain::ExplainService make_service(const std::string& checkpoint,
                                                     vitrine::explain::ServeLimits limits = {}) {
  vitrine::explain::ModelSource source;
  source.checkpoint = checkpoint;
  return vitrine::explain::ExplainService(vitrine::explain::load_model(source), limits);
}

/// The pixels of a data:image/png;base64 URI.
inline vitrine::nn::data::DecodedImage png_of(const std::string& uri) {
  const std::string prefix = "data:image/png;base64,";
  REQUIRE(uri.rfind(prefix, 0) == 0);
  const std::string bytes = base64_decode(uri.substr(prefix.size()));
  return vitrine::nn::data::decode_image(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "overlay");
}

}  // namespace vt_test
