// PNG encoding with stb_image_write (see png_encode.h).
#include "nn/data/png_encode.h"

#include "backends/error.h"

// stb_image_write's implementation, private to this file (STB_IMAGE_WRITE_STATIC), so that it
// cannot clash with another copy in the same program (the tests and tools/demo have their own).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace vitrine {

std::string encode_png(const uint8_t* pixels, int64_t width, int64_t height, int channels,
                       const std::string& what) {
  VT_CHECK(width > 0 && height > 0 && width <= (1 << 24) && height <= (1 << 24),
           "{}: cannot encode a {} x {} image as PNG", what, height, width);
  VT_CHECK(channels >= 1 && channels <= 4, "{}: {} channels per pixel (expected 1 to 4)", what,
           channels);
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                               static_cast<size_t>(size));
  };
  const int w = static_cast<int>(width), h = static_cast<int>(height);
  VT_CHECK(stbi_write_png_to_func(append, &png, w, h, channels, pixels, w * channels) != 0,
           "{}: stb_image_write could not encode the {} x {} image", what, height, width);
  return png;
}

}  // namespace vitrine
