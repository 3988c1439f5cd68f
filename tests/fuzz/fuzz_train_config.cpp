// vitrine-train's config: a JSON file (the input up to its first NUL), then each following
// NUL-separated piece as a --set KEY=VALUE override, then the checks and what the trainer derives
// from it (model, data set options, pasted options).
#include <string_view>

#include "fuzz_util.h"
#include "nn/json.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tr = vitrine::train;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view json_text = all.substr(0, nul);
  const std::string& path = vt_fuzz::write_input(reinterpret_cast<const uint8_t*>(json_text.data()),
                                                 json_text.size(), ".json");
  vt_fuzz::expect_clean([&] {
    nlohmann::json config = tr::with_defaults(tr::load_config(path));
    for (size_t at = nul; at != std::string_view::npos && at < all.size();) {
      const size_t next = all.find('\0', at + 1);
      tr::apply_override(config, std::string(all.substr(at + 1, next - at - 1)));
      at = next;
    }
    tr::validate_config(config);
    (void)tr::model_spec(config);
    (void)tr::dataset_options(config);
    (void)tr::data_path(config);
  });
  return 0;
}
