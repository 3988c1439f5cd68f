// Image decoding (see image_decode.h). libpng and libjpeg report errors by longjmp: each decoder
// keeps its setjmp in small functions whose locals are plain C values, so that no C++ object is
// skipped by a jump; the C++ side (buffers, messages) lives in the caller and in a context struct.
// This is the one place stb_image's code is compiled (for BMP only); STB_IMAGE_STATIC keeps its
// symbols out of libvitrine's exported ones. stb_image keeps no shared state on this path (its
// failure reason is thread_local since v2.26, and its global flip flags are never set), and
// libpng and libjpeg keep theirs in the structs each call creates: decoding is thread-safe.
#include "nn/data/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>

#include <jpeglib.h>
// (after jpeglib.h, which it needs)
#include <jerror.h>
#include <png.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

#include "backends/error.h"

namespace vitrine::nn::data {

namespace {

constexpr uint8_t kPngMagic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool starts_with(std::span<const uint8_t> bytes, std::span<const uint8_t> magic) {
  return bytes.size() >= magic.size() && std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
}

/// The first bytes of a file, printable, for "not an image" messages.
std::string first_bytes(std::span<const uint8_t> bytes) {
  std::string s;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    const uint8_t c = bytes[i];
    s += (c >= 32 && c < 127 && c != '\\') ? std::string(1, static_cast<char>(c))
                                           : fmt::format("\\x{:02x}", c);
  }
  return s;
}

/// An image's size and layout as its header gives them, checked against the limits; no pixel
/// is allocated yet.
DecodedImage checked_header(int64_t w, int64_t h, int64_t channels, const char* format,
                            const std::string& name, const ImageLimits& limits) {
  VT_CHECK(w > 0 && h > 0, "{}: the {} header gives a size of {}x{} pixels", name, format, w, h);
  VT_CHECK(w <= limits.max_side && h <= limits.max_side,
           "{}: the {} image is {}x{} pixels; a side may be at most {} (ImageLimits::max_side)",
           name, format, w, h, limits.max_side);
  VT_CHECK(w * h <= limits.max_pixels,
           "{}: the {} image is {}x{} = {} pixels, over the limit of {} "
           "(ImageLimits::max_pixels); refused before decoding",
           name, format, w, h, w * h, limits.max_pixels);
  DecodedImage out;
  out.width = w;
  out.height = h;
  out.channels = channels;
  out.format = format;
  return out;
}

// ---- PNG (libpng) ------------------------------------------------------------------------------

struct PngContext {
  const uint8_t* data;
  size_t size, at;
  char error[200];
};

[[noreturn]] void png_on_error(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof ctx->error, "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

void png_read_memory(png_structp png, png_bytep out, size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->at) png_error(png, "the file ends early (truncated?)");
  std::memcpy(out, ctx->data + ctx->at, n);
  ctx->at += n;
}

/// Owns libpng's read and info structs.
struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

/// Reads the header and sets up the 8-bit transforms; false (ctx.error set) on a libpng error.
bool png_start(png_structp png, png_infop info, int64_t max_side, png_uint_32* w, png_uint_32* h,
               int* channels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, static_cast<png_uint_32>(max_side), static_cast<png_uint_32>(max_side));
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  // Fuzzed files rarely have valid CRCs; ignore them so that the fuzzer reaches the decoder.
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
#endif
  png_read_info(png, info);
  *w = png_get_image_width(png, info);
  *h = png_get_image_height(png, info);
  png_set_expand(png);    // palette to RGB, grey below 8 bits to 8, tRNS to an alpha channel
  png_set_strip_16(png);  // 16-bit samples keep their high byte (as stb_image)
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *channels = png_get_channels(png, info);
  return png_get_rowbytes(png, info) == static_cast<size_t>(*w) * static_cast<size_t>(*channels);
}

bool png_finish(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

uint32_t big_endian32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
uint16_t big_endian16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t little_endian32(const uint8_t* p) {
  return uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0];
}

DecodedImage decode_png(std::span<const uint8_t> bytes, const std::string& name,
                        const ImageLimits& limits, bool header_only) {
  // The size, from the IHDR chunk that must come first, checked before libpng reads further.
  VT_CHECK(bytes.size() >= 26 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0,
           "{}: cannot decode the PNG file: it has no IHDR chunk after the signature", name);
  const uint8_t colour = bytes[25];  // 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA
  const DecodedImage header =
      checked_header(big_endian32(bytes.data() + 16), big_endian32(bytes.data() + 20),
                     colour == 0   ? 1
                     : colour == 4 ? 2
                     : colour == 6 ? 4
                                   : 3,
                     "PNG", name, limits);
  if (header_only) return header;
  PngContext ctx{bytes.data(), bytes.size(), 0, {0}};
  PngReader r;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_on_error, png_on_warning);
  VT_CHECK(r.png, "{}: cannot start the PNG decoder (out of memory)", name);
  r.info = png_create_info_struct(r.png);
  VT_CHECK(r.info, "{}: cannot start the PNG decoder (out of memory)", name);
  png_set_read_fn(r.png, &ctx, png_read_memory);
  // Ancillary chunks (text, ICC profiles) may take at most 1 MB each.
  png_set_chunk_malloc_max(r.png, 1 << 20);

  png_uint_32 w = 0, h = 0;
  int channels = 0;
  if (!png_start(r.png, r.info, limits.max_side, &w, &h, &channels)) {
    // libpng refuses a side over png_set_user_limits itself: say which limit.
    if (std::strstr(ctx.error, "exceeds user limit"))
      fail("{}: the PNG image is larger than {} pixels a side (ImageLimits::max_side): {}", name,
           limits.max_side, ctx.error);
    fail("{}: cannot decode the PNG file: {}", name,
         ctx.error[0] ? ctx.error : "unsupported layout");
  }
  DecodedImage out = checked_header(w, h, channels, "PNG", name, limits);  // after libpng's expand
  const size_t row = static_cast<size_t>(w) * static_cast<size_t>(channels);
  out.pixels.resize(row * h);
  std::vector<png_bytep> rows(h);
  for (size_t y = 0; y < h; ++y) rows[y] = out.pixels.data() + y * row;
  VT_CHECK(png_finish(r.png, rows.data()), "{}: cannot decode the PNG file: {}", name, ctx.error);
  return out;
}

// ---- JPEG (libjpeg-turbo) ----------------------------------------------------------------------

/// libjpeg's error manager with a jump target and the message of the error that jumped.
struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

[[noreturn]] void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

/// Warnings are not printed; a file that ends early is remembered (and refused), others (extra
/// bytes between markers, as many cameras write) are tolerated, as Pillow does.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
    reinterpret_cast<JpegError*>(cinfo->err)->truncated = true;
}

/// A progressive file may hold any number of scans, each a pass over the whole image: a few
/// kilobytes can ask for minutes of work. libjpeg-turbo's own fuzzers stop at 500 scans.
constexpr int kMaxScans = 500;

void jpeg_on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->is_decompressor && d->input_scan_number > kMaxScans) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message,
                  "more than %d scans (a progressive file that would take too long)", kMaxScans);
    std::longjmp(err->jump, 1);
  }
}

/// Owns libjpeg's decompressor.
struct JpegReader {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  jpeg_progress_mgr progress{};
  bool created = false;
  ~JpegReader() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

bool jpeg_start(JpegReader* r, const uint8_t* data, size_t size) {
  if (setjmp(r->err.jump)) return false;
  jpeg_create_decompress(&r->cinfo);
  r->created = true;
  r->progress.progress_monitor = jpeg_on_progress;
  r->cinfo.progress = &r->progress;
  r->cinfo.mem->max_memory_to_use = 512L << 20;
  jpeg_mem_src(&r->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&r->cinfo, TRUE);
  return true;
}

bool jpeg_decode(JpegReader* r, uint8_t* out, size_t row_bytes) {
  if (setjmp(r->err.jump)) return false;
  jpeg_decompress_struct& c = r->cinfo;
  const J_COLOR_SPACE in = c.jpeg_color_space;
  c.out_color_space = in == JCS_GRAYSCALE                  ? JCS_GRAYSCALE
                      : (in == JCS_CMYK || in == JCS_YCCK) ? JCS_CMYK
                                                           : JCS_RGB;
  jpeg_start_decompress(&c);
  if (static_cast<size_t>(c.output_width) * static_cast<size_t>(c.output_components) != row_bytes) {
    std::snprintf(r->err.message, sizeof r->err.message, "unexpected output layout");
    return false;
  }
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = out + static_cast<size_t>(c.output_scanline) * row_bytes;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  return true;
}

/// The size in the first SOF (start of frame) segment, found by walking the marker segments
/// after SOI; {0, 0} when there is none before the scan data (libjpeg then says what is wrong).
std::pair<int64_t, int64_t> jpeg_frame_size(std::span<const uint8_t> b) {
  size_t at = 2;
  while (at + 4 <= b.size()) {
    if (b[at] != 0xff) return {0, 0};
    const uint8_t marker = b[at + 1];
    if (marker == 0xff) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {  // no length: TEM, RSTn, SOI
      at += 2;
      continue;
    }
    const size_t length = big_endian16(b.data() + at + 2);
    const bool sof =
        marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
    if (sof) {
      if (at + 9 > b.size()) return {0, 0};
      return {big_endian16(b.data() + at + 7), big_endian16(b.data() + at + 5)};
    }
    if (marker == 0xda || marker == 0xd9 || length < 2) return {0, 0};  // SOS, EOI, damaged
    at += 2 + length;
  }
  return {0, 0};
}

DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& name,
                         const ImageLimits& limits, bool header_only) {
  // The size from the frame header, checked before libjpeg reads anything.
  if (const auto [w, h] = jpeg_frame_size(bytes); w > 0 || h > 0)
    (void)checked_header(w, h, 3, "JPEG", name, limits);
  auto r = std::make_unique<JpegReader>();
  r->cinfo.err = jpeg_std_error(&r->err.mgr);
  r->err.mgr.error_exit = jpeg_on_error;
  r->err.mgr.emit_message = jpeg_on_message;
  VT_CHECK(jpeg_start(r.get(), bytes.data(), bytes.size()), "{}: cannot decode the JPEG file: {}",
           name, r->err.message);
  const jpeg_decompress_struct& c = r->cinfo;
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  DecodedImage out =
      checked_header(c.image_width, c.image_height, c.jpeg_color_space == JCS_GRAYSCALE ? 1 : 3,
                     "JPEG", name, limits);
  if (header_only) return out;
  const size_t in_channels = cmyk ? 4 : static_cast<size_t>(out.channels);
  const size_t row = static_cast<size_t>(out.width) * in_channels;
  out.pixels.resize(row * static_cast<size_t>(out.height));
  VT_CHECK(jpeg_decode(r.get(), out.pixels.data(), row), "{}: cannot decode the JPEG file: {}",
           name, r->err.message);
  VT_CHECK(!r->err.truncated, "{}: the JPEG file ends before its last pixel (truncated or damaged)",
           name);
  if (cmyk) {  // Adobe's inverted CMYK (what Photoshop writes): R = C K / 255, etc.
    const size_t n = static_cast<size_t>(out.width) * static_cast<size_t>(out.height);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = out.pixels.data() + 4 * i;
      const unsigned k = p[3];
      uint8_t rgb[3];
      for (int ch = 0; ch < 3; ++ch) rgb[ch] = static_cast<uint8_t>((p[ch] * k + 127) / 255);
      std::memcpy(out.pixels.data() + 3 * i, rgb, 3);
    }
    out.pixels.resize(3 * n);
  }
  return out;
}

// ---- BMP (stb_image) ---------------------------------------------------------------------------

DecodedImage decode_bmp(std::span<const uint8_t> bytes, const std::string& name,
                        const ImageLimits& limits, bool header_only) {
  VT_CHECK(bytes.size() <= static_cast<size_t>(INT32_MAX), "{}: the BMP file is too large", name);
  const int size = static_cast<int>(bytes.size());
  int w = 0, h = 0, n = 0;
  if (!stbi_info_from_memory(bytes.data(), size, &w, &h, &n)) {
    const char* reason = stbi_failure_reason();
    fail("{}: cannot decode the BMP file: {}", name, reason ? reason : "a damaged header");
  }
  DecodedImage out = checked_header(w, h, n, "BMP", name, limits);
  // stb_image reads past the end of a truncated file as zeros: refuse one whose uncompressed
  // pixel rows are not all there (file header: data offset at 10; info header: bits per pixel
  // at 28, compression at 30; rows padded to 4 bytes).
  if (bytes.size() >= 34) {
    const uint64_t offset = little_endian32(bytes.data() + 10);
    const uint32_t bpp = bytes[28] | uint32_t{bytes[29]} << 8;
    const uint32_t compression = little_endian32(bytes.data() + 30);
    const uint64_t row = (static_cast<uint64_t>(w) * bpp + 31) / 32 * 4;
    if ((compression == 0 || compression == 3) && bpp > 0)
      VT_CHECK(offset + row * static_cast<uint64_t>(h) <= bytes.size(),
               "{}: the BMP file is truncated: {}x{} pixels of {} bits need {} bytes from offset "
               "{}, the file has {}",
               name, w, h, bpp, row * static_cast<uint64_t>(h), offset, bytes.size());
  }
  if (header_only) return out;
  std::unique_ptr<stbi_uc, void (*)(void*)> data(
      stbi_load_from_memory(bytes.data(), size, &w, &h, &n, 0), stbi_image_free);
  if (!data) {
    const char* reason = stbi_failure_reason();
    fail("{}: cannot decode the BMP file: {}", name, reason ? reason : "unknown reason");
  }
  VT_CHECK(w == out.width && h == out.height && n >= 1 && n <= 4,
           "{}: the BMP file's header and pixels disagree", name);
  out.channels = n;
  out.pixels.assign(data.get(), data.get() + static_cast<size_t>(w) * h * n);
  return out;
}

DecodedImage decode(std::span<const uint8_t> bytes, const std::string& name,
                    const ImageLimits& limits, bool header_only) {
  VT_CHECK(!bytes.empty(), "{}: the image file is empty", name);
  VT_CHECK(static_cast<uint64_t>(bytes.size()) <= static_cast<uint64_t>(limits.max_file_bytes),
           "{}: the image file has {} bytes, over the limit of {} (ImageLimits::max_file_bytes)",
           name, bytes.size(), limits.max_file_bytes);
  if (starts_with(bytes, kPngMagic)) return decode_png(bytes, name, limits, header_only);
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return decode_jpeg(bytes, name, limits, header_only);
  if (bytes.size() >= 2 && bytes[0] == 'B' && bytes[1] == 'M')
    return decode_bmp(bytes, name, limits, header_only);
  fail("{}: not a PNG, JPEG or BMP file (it starts with \"{}\")", name, first_bytes(bytes));
}

}  // namespace

DecodedImage read_image_header(std::span<const uint8_t> bytes, const std::string& name,
                               const ImageLimits& limits) {
  return decode(bytes, name, limits, true);
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name,
                          const ImageLimits& limits) {
  return decode(bytes, name, limits, false);
}

Image to_image(const DecodedImage& d, int channels) {
  VT_CHECK(channels == 1 || channels == 3, "to_image: channels must be 1 or 3, got {}", channels);
  VT_ASSERT(d.channels >= 1 && d.channels <= 4 &&
            d.pixels.size() == static_cast<size_t>(d.width * d.height * d.channels));
  Image im;
  im.channels = channels;
  im.height = d.height;
  im.width = d.width;
  const size_t plane = static_cast<size_t>(d.width) * static_cast<size_t>(d.height);
  im.pixels.resize(plane * static_cast<size_t>(channels));
  const uint8_t* src = d.pixels.data();
  const size_t stride = static_cast<size_t>(d.channels);  // 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
  if (d.channels <= 2) {
    for (size_t i = 0; i < plane; ++i) {
      const float g = src[i * stride] / 255.0f;
      for (int c = 0; c < channels; ++c) im.pixels[static_cast<size_t>(c) * plane + i] = g;
    }
  } else if (channels == 3) {
    for (size_t i = 0; i < plane; ++i)
      for (size_t c = 0; c < 3; ++c) im.pixels[c * plane + i] = src[i * stride + c] / 255.0f;
  } else {
    for (size_t i = 0; i < plane; ++i) {
      const uint8_t* p = src + i * stride;
      im.pixels[i] = (0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]) / 255.0f;
    }
  }
  return im;
}

Image read_image(const std::string& path, int channels, const ImageLimits& limits) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  VT_CHECK(!ec, "{}: cannot read the image ({})", path, ec.message());
  VT_CHECK(file_size <= static_cast<uint64_t>(limits.max_file_bytes),
           "{}: the image file has {} bytes, over the limit of {} (ImageLimits::max_file_bytes)",
           path, file_size, limits.max_file_bytes);
  std::vector<uint8_t> bytes(file_size);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(file_size));
  VT_CHECK(in.good() || (file_size == 0 && in.eof()),
           "{}: cannot read the image (read {} of {} bytes)", path, in.gcount(), file_size);
  return to_image(decode_image(bytes, path, limits), channels);
}

}  // namespace vitrine::nn::data
