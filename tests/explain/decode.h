// Test helpers for the explain outputs: undoing base64 and PNG encoding, to compare what a report
// or a PNG holds with the pixels that went in.
#pragma once
#include <string>
#include <string_view>

#include "explain/render.h"

namespace vt_test {

/// The bytes of standard base64 text (RFC 4648, '=' padding); fails the test on a character
/// outside the alphabet or a length that is not a multiple of 4.
std::string base64_decode(std::string_view text);

/// The pixels of a PNG as 8-bit RGB (stb_image); fails the test when stb cannot decode it.
vitrine::explain::Rgb8 decode_png(const std::string& bytes);

}  // namespace vt_test
