// Shared by the fuzz targets (tests/fuzz/*.cpp, built with -fsanitize=fuzzer,address,undefined
// when VITRINE_FUZZ=ON; `make fuzz` runs each). A target feeds the fuzzer's bytes to one reader
// the way a user's file reaches it; vitrine::Error is the expected answer to a bad input, anything
// else (a crash, a sanitizer report, another exception, a leak) is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/error.h"
#include "explain/tiny_vit.h"

namespace vt_fuzz {

/// The ViT whose checkpoints fuzz_safetensors reads (and fuzz_make_seeds writes): the explanation
/// tests' tiny ViT on one 4x4 grey patch.
inline vitrine::models::ViTConfig tiny_vit() { return vt_test::tiny_vit_config(4, 4, 1); }

/// A file holding `data` (one per process, rewritten for each input, in /dev/shm when there).
inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  static std::string path;
  path = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/vitrine-fuzz-" +
         std::to_string(getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  return path;
}

/// Runs f; a vitrine::Error is a clean refusal. Any other exception is a finding (abort).
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const vitrine::Error&) {
  }
}

}  // namespace vt_fuzz
