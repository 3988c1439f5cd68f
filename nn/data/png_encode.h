// PNG encoding of 8-bit pixels (save_image's grids, vitrine-explain's maps, vitrine-train's
// TensorBoard confusion matrix): the library's one copy of stb_image_write's encoder.
#pragma once
#include <cstdint>
#include <string>

namespace vitrine {

/// The PNG file's bytes of an 8-bit image of width x height pixels, `channels` (1 grey, 2 grey +
/// alpha, 3 RGB, 4 RGBA) interleaved per pixel, rows top to bottom. `what` names the picture in
/// the error (vitrine::Error) when it is empty or stb_image_write cannot encode it.
std::string encode_png(const uint8_t* pixels, int64_t width, int64_t height, int channels,
                       const std::string& what);

}  // namespace vitrine
