// Image decoding (nn/data/image_decode.h): libpng and libjpeg-turbo give the pixels Pillow gives
// (tests/fixtures/make_image_fixtures.py), PNG and BMP the pixels stb_image gave before, JPEG
// within a few levels of stb's; sizes are checked from the header before decoding; damaged files
// are errors naming the file.
#include <zlib.h>

#include <fstream>
#include <iterator>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

#include "nn/data/image_decode.h"
#include "test_util.h"

using namespace vitrine;
using namespace vitrine::nn::data;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

/// stb_image's pixels of a file, as it decoded every image before.
DecodedImage stb_decode(const Bytes& b) {
  int w = 0, h = 0, n = 0;
  stbi_uc* p = stbi_load_from_memory(b.data(), static_cast<int>(b.size()), &w, &h, &n, 0);
  REQUIRE_MESSAGE(p != nullptr, "stb_image: " << stbi_failure_reason());
  DecodedImage d;
  d.width = w;
  d.height = h;
  d.channels = n;
  d.pixels.assign(p, p + static_cast<size_t>(w) * h * n);
  stbi_image_free(p);
  return d;
}

int max_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

void put32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

/// A PNG holding only a valid signature and IHDR chunk (CRC included) for a w x h 8-bit grey
/// image: what a decompression bomb shows before its data.
Bytes png_header(uint32_t w, uint32_t h) {
  Bytes b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put32(b, 13);
  const size_t type_at = b.size();
  for (char c : std::string("IHDR")) b.push_back(static_cast<uint8_t>(c));
  put32(b, w);
  put32(b, h);
  for (uint8_t v : {8, 0, 0, 0, 0}) b.push_back(v);  // depth 8, grey, deflate, filter, no interlace
  put32(b, static_cast<uint32_t>(crc32(0, b.data() + type_at, 17)));
  return b;
}

/// A JPEG whose SOF0 header says w x h and that ends there.
Bytes jpeg_header(uint16_t w, uint16_t h) {
  return {0xff,
          0xd8,
          0xff,
          0xc0,
          0,
          11,
          8,
          uint8_t(h >> 8),
          uint8_t(h & 0xff),
          uint8_t(w >> 8),
          uint8_t(w & 0xff),
          1,
          1,
          0x11,
          0,
          0xff,
          0xd9};
}

}  // namespace

TEST_CASE("image decode: PNG, JPEG and BMP give Pillow's pixels, PNG and BMP stb_image's too") {
  const nlohmann::json& fx = vt_test::fixture_json("images/pixels.json");
  const int64_t H = fx["height"], W = fx["width"];
  for (const auto& item : fx["files"].items()) {
    const std::string name = item.key();
    INFO(name);
    const Bytes bytes = file_bytes(vt_test::fixture("images/" + name));
    const DecodedImage d = decode_image(bytes, name);
    CHECK(d.width == W);
    CHECK(d.height == H);
    const std::string mode = item.value()["mode"];
    CHECK(d.channels == static_cast<int64_t>(mode.size()));  // L, LA, RGB, RGBA
    const std::vector<uint8_t> pillow = item.value()["pixels"].get<std::vector<uint8_t>>();
    CHECK(max_difference(d.pixels, pillow) == 0);
    const DecodedImage stb = stb_decode(bytes);
    CHECK(stb.channels == d.channels);
    const int to_stb = max_difference(d.pixels, stb.pixels);
    if (std::string(d.format) == "JPEG") {
      MESSAGE(name << ": largest difference from stb_image " << to_stb << " levels");
      CHECK(to_stb <= 3);  // two IDCTs and upsamplers: 1 or 2 levels apart here
    } else {
      CHECK(to_stb == 0);
    }
    // Header only: the same size, nothing decoded.
    const DecodedImage head = read_image_header(bytes, name);
    CHECK(head.width == W);
    CHECK(head.pixels.empty());
  }
}

TEST_CASE("image decode: CMYK JPEG (Adobe, inverted) is converted to RGB") {
  const Bytes bytes = file_bytes(vt_test::fixture("images/cmyk.jpg"));
  const DecodedImage d = decode_image(bytes, "cmyk.jpg");
  CHECK(d.channels == 3);
  CHECK(d.pixels.size() == static_cast<size_t>(d.width * d.height * 3));
  // The reference RGB image is what the CMYK file was converted from: close to it.
  const nlohmann::json& fx = vt_test::fixture_json("images/pixels.json");
  const auto rgb = fx["files"]["rgb.png"]["pixels"].get<std::vector<uint8_t>>();
  double mean = 0;
  for (size_t i = 0; i < rgb.size(); ++i) mean += std::abs(int(rgb[i]) - int(d.pixels[i]));
  CHECK(mean / static_cast<double>(rgb.size()) < 12);
}

TEST_CASE("image decode: to_image gives RGB or luma planes, alpha dropped") {
  DecodedImage d;
  d.width = 2;
  d.height = 1;
  d.channels = 4;
  d.pixels = {255, 0, 0, 9, 0, 0, 255, 9};
  const Image rgb = to_image(d, 3);
  CHECK(rgb.pixels == std::vector<float>{1, 0, 0, 0, 0, 1});
  const Image grey = to_image(d, 1);
  CHECK(grey.pixels[0] == doctest::Approx(0.299));
  CHECK(grey.pixels[1] == doctest::Approx(0.114));
  d.channels = 2;
  d.pixels = {51, 9, 102, 9};
  CHECK(to_image(d, 3).pixels == std::vector<float>{0.2f, 0.4f, 0.2f, 0.4f, 0.2f, 0.4f});
}

TEST_CASE("image decode: a size over the limits is refused from the header, before decoding") {
  // The finding: a 389 KB PNG of 20000x20000 pixels was decoded (3.3 GB). Its header is enough.
  CHECK_ERROR_CONTAINS(decode_image(png_header(20000, 20000), "bomb.png"), "bomb.png",
                       "20000x20000 = 400000000 pixels", "limit of 67108864",
                       "ImageLimits::max_pixels", "refused before decoding");
  CHECK_ERROR_CONTAINS(decode_image(jpeg_header(20000, 20000), "bomb.jpg"), "bomb.jpg", "JPEG",
                       "ImageLimits::max_pixels");
  ImageLimits small;
  small.max_pixels = 100;
  small.max_side = 64;
  CHECK_ERROR_CONTAINS(decode_image(png_header(11, 10), "a.png", small), "a.png",
                       "110 pixels, over the limit of 100");
  CHECK_ERROR_CONTAINS(decode_image(png_header(65, 1), "a.png", small), "a.png", "max_side");
  CHECK_ERROR_CONTAINS(decode_image(jpeg_header(65, 1), "a.jpg", small), "a.jpg", "at most 64",
                       "max_side");
  small.max_file_bytes = 10;
  CHECK_ERROR_CONTAINS(decode_image(png_header(2, 2), "a.png", small), "a.png", "33 bytes",
                       "max_file_bytes");
  // The header alone passes the limits and says the size without decoding.
  const DecodedImage head = read_image_header(png_header(300, 200), "h.png");
  CHECK(head.width == 300);
  CHECK(head.height == 200);
  CHECK(std::string(head.format) == "PNG");
}

TEST_CASE("image decode: damaged files are errors naming the file, never a crash") {
  const Bytes png = file_bytes(vt_test::fixture("images/rgb.png"));
  const Bytes jpg = file_bytes(vt_test::fixture("images/baseline_420.jpg"));
  const Bytes bmp = file_bytes(vt_test::fixture("images/rgb24.bmp"));
  CHECK_ERROR_CONTAINS(decode_image(Bytes{}, "e.png"), "e.png", "the image file is empty");
  const std::string text = "hello, I am a text file named .png";
  CHECK_ERROR_CONTAINS(decode_image(Bytes(text.begin(), text.end()), "t.png"), "t.png",
                       "not a PNG, JPEG or BMP file (it starts with \"hello, I\")");
  for (size_t cut : {9, 20, 40, 100, 300}) {
    INFO("cut at " << cut);
    CHECK_ERROR_CONTAINS(decode_image(Bytes(png.begin(), png.begin() + cut), "cut.png"), "cut.png",
                         "PNG");
    CHECK_ERROR_CONTAINS(decode_image(Bytes(jpg.begin(), jpg.begin() + cut), "cut.jpg"), "cut.jpg",
                         "JPEG");
    CHECK_ERROR_CONTAINS(decode_image(Bytes(bmp.begin(), bmp.begin() + cut), "cut.bmp"), "cut.bmp",
                         "BMP");
  }
  Bytes bad_crc = png;
  bad_crc[40] ^= 0x55;  // inside the first data chunk
  CHECK_ERROR_CONTAINS(decode_image(bad_crc, "crc.png"), "crc.png", "cannot decode the PNG file");
  CHECK_ERROR_CONTAINS(decode_image(png_header(0, 5), "zero.png"), "zero.png", "PNG");
}

TEST_CASE("image decode: read_image reads a file and names it in errors") {
  vt_test::TempDir dir;
  const Image im = read_image(vt_test::fixture("images/grey.png"), 3);
  CHECK(im.channels == 3);
  CHECK(im.width == 17);
  CHECK_ERROR_CONTAINS(read_image(dir / "missing.png", 3), dir / "missing.png",
                       "cannot read the image");
}
