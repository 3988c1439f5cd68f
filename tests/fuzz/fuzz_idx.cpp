// IDX image and label files (MNIST, Fashion-MNIST, EMNIST): the first byte picks which of the two
// files the input is, the other is a valid one; both raw (the .gz path is zlib's).
#include <vector>

#include "fuzz_util.h"
#include "nn/data/idx.h"

namespace {
const std::string& valid_file(const std::vector<uint8_t>& bytes, const char* suffix) {
  static std::string path;
  path = std::string("/tmp/vitrine-fuzz-valid-") + std::to_string(getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool images = data[0] & 1;
  const std::string fuzzed =
      vt_fuzz::write_input(data + 1, size - 1, images ? "-images" : "-labels");
  // 2 images of 3x2 and their labels.
  static const std::vector<uint8_t> kImages = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3,  0,  0,
                                               0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  static const std::vector<uint8_t> kLabels = {0, 0, 8, 1, 0, 0, 0, 2, 1, 0};
  const std::string other = valid_file(images ? kLabels : kImages, images ? "-labels" : "-images");
  vt_fuzz::expect_clean([&] {
    vitrine::nn::data::IdxOptions o;
    o.transpose = data[0] & 2;
    vitrine::nn::data::IdxDataset ds(images ? fuzzed : other, images ? other : fuzzed, o);
    for (int64_t i = 0; i < ds.size() && i < 4; ++i) (void)ds.get(i);
  });
  return 0;
}
