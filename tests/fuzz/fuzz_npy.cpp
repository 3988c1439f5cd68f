// .npy arrays (vitrine-explain reads them: --input, saved maps).
#include "explain/npy.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = vt_fuzz::write_input(data, size, ".npy");
  vt_fuzz::expect_clean([&] { (void)vitrine::explain::read_npy(path); });
  return 0;
}
