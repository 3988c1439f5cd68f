// Image files (PNG with libpng, JPEG with libjpeg-turbo, BMP with stb_image), with the explain
// server's limits (4096 x 4096): the header, the pixels, and the float planes the models take.
#include <span>

#include "fuzz_util.h"
#include "nn/data/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vitrine::nn::data::ImageLimits limits;
  limits.max_pixels = 4096 * 4096;
  const std::span<const uint8_t> bytes(data, size);
  vt_fuzz::expect_clean([&] { (void)vitrine::nn::data::read_image_header(bytes, "fuzz", limits); });
  vt_fuzz::expect_clean([&] {
    const auto d = vitrine::nn::data::decode_image(bytes, "fuzz", limits);
    (void)vitrine::nn::data::to_image(d, d.channels == 1 ? 1 : 3);
  });
  return 0;
}
