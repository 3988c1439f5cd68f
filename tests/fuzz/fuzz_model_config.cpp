// Model configs: Vitrine's ViT config (--model-config, a checkpoint's vitrine.config), a Hugging
// Face config.json, and a ResNet config, each parsed as untrusted JSON first.
#include <string_view>

#include "fuzz_util.h"
#include "models/classifier.h"
#include "models/resnet.h"
#include "models/vit.h"
#include "nn/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  vt_fuzz::expect_clean([&] {
    const nlohmann::json j = vitrine::nn::parse_json(text, "fuzz");
    vt_fuzz::expect_clean([&] { (void)vitrine::models::ViTConfig::from_json(j); });
    vt_fuzz::expect_clean([&] { (void)vitrine::models::config_from_hf(j); });
    vt_fuzz::expect_clean([&] { (void)vitrine::models::ResNetConfig::from_json(j); });
    vt_fuzz::expect_clean([&] { (void)vitrine::models::arch_of(j); });
  });
  return 0;
}
