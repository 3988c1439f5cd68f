// vitrine-explain --serve's requests as the service receives them (after cpp-httplib, fuzzed
// upstream, has parsed the HTTP): the options' JSON text, a NUL byte, then the image file's bytes.
// A ClientError (4xx, or 503 past the time limit) is the expected answer to a bad request; any
// other exception, a 500 included, is a finding. The service is the tiny ViT on 8x8 grey images
// with small limits, so that each input runs in milliseconds.
#include <cstring>
#include <string_view>

#include "explain/serve.h"
#include "fuzz_util.h"
#include "models/vit.h"
#include "nn/state.h"

namespace {

vitrine::explain::ExplainService& service() {
  static vitrine::explain::ExplainService* s = [] {
    vitrine::models::VisionTransformer model(vt_test::tiny_vit_config(8, 8, 1));
    const uint8_t none = 0;
    const std::string path = vt_fuzz::write_input(&none, 0, ".safetensors");
    vitrine::models::save_vit_timm(path, model, {});
    vitrine::explain::ModelSource source;
    source.checkpoint = path;
    vitrine::explain::ServeLimits limits;
    limits.max_image_side = 64;
    limits.max_steps = 4;
    limits.max_attention_mb = 4;
    limits.request_timeout_s = 10;
    return new vitrine::explain::ExplainService(vitrine::explain::load_model(source), limits);
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* text = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(text, 0, size);
  const size_t split = nul ? static_cast<size_t>(static_cast<const char*>(nul) - text) : size;
  const std::string_view options(text, split);
  const std::string_view image =
      nul ? std::string_view(text + split + 1, size - split - 1) : std::string_view();
  try {
    (void)service().explain(image, options, "fuzz");
  } catch (const vitrine::explain::ClientError& e) {
    if (e.status < 400 || (e.status >= 500 && e.status != 503)) std::abort();
  }
  return 0;
}
