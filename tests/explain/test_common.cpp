// common/ (the library shared by vitrine-train's and vitrine-explain's reports, tested here with
// the explain tests that link it): base64 against RFC 4648's test vectors, data: URIs, escaping,
// the nice axis, and atomic file writes. The nice axis's ticks in charts are tested in
// tests/train/test_report.cpp.
#include "common/files.h"
#include "common/html.h"
#include "decode.h"
#include "test_util.h"

using namespace vt_test;
namespace tools = vitrine::tools;

TEST_CASE("common: base64 matches RFC 4648's test vectors and round trips any bytes") {
  // RFC 4648, section 10.
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [bytes, text] : vectors) {
    CHECK(tools::base64_encode(bytes) == text);
    CHECK(base64_decode(text) == bytes);
  }
  // The last characters of the alphabet, and every byte value once.
  CHECK(tools::base64_encode(std::string("\xfb\xff\xbf", 3)) == "+/+/");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string text = tools::base64_encode(all);
  CHECK(text.size() == 344);  // 256 bytes: 85 whole groups and one padded: 86 * 4
  CHECK(
      text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") ==
      std::string::npos);
  CHECK(base64_decode(text) == all);
}

TEST_CASE("common: data_uri and escape_html") {
  CHECK(tools::data_uri("image/png", "foo") == "data:image/png;base64,Zm9v");
  CHECK(tools::escape_html("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  CHECK(tools::escape_html("plain text") == "plain text");
}

TEST_CASE("common: nice_axis picks 1, 2 or 5 x 10^k and widens an empty range") {
  // 0..100: (100 - 0) / 5 = 20 -> step 20, ticks 0..100.
  tools::Axis a = tools::nice_axis(0, 100);
  CHECK(a.tick(1) == 20);
  CHECK(a.first == 0);
  CHECK(a.last == 5);
  // 0.13..0.87: 0.148 -> 0.2; from 0 (at or below 0.13) to 1.0; labels with one decimal.
  a = tools::nice_axis(0.13, 0.87);
  CHECK(a.lo == 0);
  CHECK(a.hi == 1.0);
  CHECK(a.label(3) == "0.6");
  // A constant 3 is widened to 2.7..3.3: 0.12 -> 0.2, ticks 2.6..3.4.
  a = tools::nice_axis(3, 3);
  CHECK(a.label(a.first) == "2.6");
  CHECK(a.label(a.last) == "3.4");
}

TEST_CASE("common: write_file_atomically replaces the file and leaves no temp file") {
  TempDir dir;
  const std::string path = dir / "out.txt";
  tools::write_file_atomically(path, "first");
  tools::write_file_atomically(path, std::string("sec\0nd", 6));
  CHECK(read_text(path) == std::string("sec\0nd", 6));
  CHECK(dir.files() == std::vector<std::string>{"out.txt"});
  const std::string nowhere = dir / "missing/out.txt";
  CHECK_ERROR_CONTAINS(tools::write_file_atomically(nowhere, "x"), nowhere, "cannot write",
                       "No such file or directory");
  CHECK_ERROR_CONTAINS(tools::write_file_atomically(dir.dir.string(), "x"), dir.dir.string(),
                       "cannot write", "cannot rename");  // a folder is in the way
  CHECK(dir.files() == std::vector<std::string>{"out.txt"});
}
