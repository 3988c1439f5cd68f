// base64 and PNG decoding for the explain tests (see decode.h).
#include "decode.h"

#include <doctest/doctest.h>

// stb_image's implementation, private to this file: libvitrine has its own (static) copy.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace vt_test {

std::string base64_decode(std::string_view text) {
  REQUIRE_MESSAGE(text.size() % 4 == 0, "base64 length " << text.size() << " is not 4k");
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t group = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const bool last_group = i + 4 == text.size();
      if (c == '=' && last_group && k >= 2) {
        ++pad;
        group <<= 6;
        continue;
      }
      const int v = value(c);
      REQUIRE_MESSAGE((v >= 0 && pad == 0), "bad base64 character '" << c << "' at " << i + k);
      group = group << 6 | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(group >> 16 & 0xff);
    if (pad < 2) out += static_cast<char>(group >> 8 & 0xff);
    if (pad < 1) out += static_cast<char>(group & 0xff);
  }
  return out;
}

vitrine::explain::Rgb8 decode_png(const std::string& bytes) {
  int w = 0, h = 0, comp = 0;
  unsigned char* p = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(bytes.data()),
                                           static_cast<int>(bytes.size()), &w, &h, &comp, 3);
  REQUIRE_MESSAGE(p != nullptr, "stb_image cannot decode the PNG: " << stbi_failure_reason());
  vitrine::explain::Rgb8 out{h, w, std::vector<uint8_t>(p, p + static_cast<size_t>(w) * h * 3)};
  stbi_image_free(p);
  return out;
}

}  // namespace vt_test
