// Decoding image files that come from outside (data sets, a user's photo, an upload): PNG with
// libpng and JPEG with libjpeg-turbo (both maintained and continuously fuzzed upstream), BMP with
// stb_image behind the same checks. The format is taken from the file's first bytes, not its
// name. Width and height are read from the header and checked against ImageLimits before any
// pixel memory is allocated, so a small file that claims 20000x20000 pixels (a decompression
// bomb) is refused at once.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nn/data/dataset.h"

namespace vitrine::nn::data {

/// Limits on an image file, named in the error that refuses one.
struct ImageLimits {
  /// Width and height allowed, each.
  int64_t max_side = 32768;
  /// width x height allowed (8192 x 8192; Pillow warns at 89 million pixels).
  int64_t max_pixels = int64_t{8192} * 8192;
  /// File size allowed.
  int64_t max_file_bytes = int64_t{256} << 20;
};

/// An image as its file holds it: 8-bit samples, interleaved, row-major; channels is 1 (grey),
/// 2 (grey, alpha), 3 (RGB) or 4 (RGBA). 16-bit PNG samples keep their high byte.
struct DecodedImage {
  int64_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
  const char* format = "";      // "PNG", "JPEG" or "BMP"
};

/// Width, height and format from the header alone (nothing decoded). Errors name `name`: not a
/// PNG, JPEG or BMP (the first bytes shown), a damaged header, a size over `limits`.
DecodedImage read_image_header(std::span<const uint8_t> bytes, const std::string& name,
                               const ImageLimits& limits = {});

/// Decodes a PNG, JPEG or BMP file's bytes. Errors (vitrine::Error) start with `name`: an unknown
/// format, a size over `limits` (checked from the header before decoding), a truncated or corrupt
/// file with the decoder's reason.
DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name,
                          const ImageLimits& limits = {});

/// Float planes of a decoded image, value / 255: channels 3 gives RGB (grey replicated), channels
/// 1 gives grey (colour converted with ITU-R 601 luma, 0.299 R + 0.587 G + 0.114 B); alpha is
/// dropped, not composited.
Image to_image(const DecodedImage& decoded, int channels);

/// Reads and decodes an image file into float planes (to_image). Errors name the file.
Image read_image(const std::string& path, int channels, const ImageLimits& limits = {});

}  // namespace vitrine::nn::data
