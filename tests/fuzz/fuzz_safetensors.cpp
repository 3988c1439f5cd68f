// safetensors: the header (JSON), the tensors, the metadata and a checkpoint's optimizer state.
#include "fuzz_util.h"
#include "models/vit.h"
#include "nn/optim/adam.h"
#include "nn/state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = vt_fuzz::write_input(data, size, ".safetensors");
  vt_fuzz::expect_clean([&] {
    vitrine::nn::SafetensorsFile f = vitrine::nn::read_safetensors(path);
    for (const auto& kv : f.metadata) (void)vitrine::nn::metadata_json(f.metadata, kv.first);
  });
  // As a checkpoint of a tiny ViT with AdamW (what --resume reads).
  vt_fuzz::expect_clean([&] {
    vitrine::models::VisionTransformer model(vt_fuzz::tiny_vit());
    vitrine::nn::optim::AdamW opt(model.parameters());
    vitrine::nn::load_checkpoint(path, model, &opt);
  });
  return 0;
}
