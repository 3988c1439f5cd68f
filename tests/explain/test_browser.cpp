// The explain report in a real browser (headless Chromium, see browser.h): every image decodes,
// the console stays quiet, nothing is fetched, and the screenshot shows the page. The checker is
// first shown to see a broken image, a console error and a fetch. Without Chromium (it is an
// optional dependency: scripts/install-deps.sh installs it) the tests say they are skipped.
#include <filesystem>
#include <fstream>

#include "browser.h"
#include "decode.h"
#include "explain/report.h"
#include "report_data.h"
#include "test_util.h"

using namespace vt_test;

namespace {

/// Whether Chromium is there; when not, says so in the test's output.
bool have_chromium() {
  if (!find_chromium().empty()) return true;
  skip(
      "chromium is not on PATH (install it with scripts/install-deps.sh to run the browser tests "
      "of the HTML reports)");
  return false;
}

}  // namespace

TEST_CASE("browser: the checker sees a broken image, a console error and a fetch") {
  if (!have_chromium()) return;
  TempDir dir;
  const std::string page = dir / "bad.html";
  {
    std::ofstream f(page);
    f << "<!DOCTYPE html><html><body>\n"
         "<img src=\"data:image/png;base64,AAAA\">\n"
         "<link rel=\"stylesheet\" href=\"https://example.invalid/x.css\">\n"
         "<script>undefined_function();</script>\n</body></html>\n";
  }
  const BrowserCheck b = check_in_browser(page);
  CHECK(b.images == 1);
  CHECK(b.decoded == 0);
  REQUIRE(b.console_errors.size() == 1);
  CHECK(b.console_errors[0].find("Uncaught ReferenceError: undefined_function") !=
        std::string::npos);
  CHECK(b.fetched == std::vector<std::string>{"https://example.invalid/x.css"});
  CHECK(b.screenshot_path == dir / "bad.screenshot.png");
  CHECK(dir.files() == std::vector<std::string>{"bad.html", "bad.screenshot.png"});
}

TEST_CASE("browser: the explain report's images all decode, quietly, with nothing fetched") {
  if (!have_chromium()) return;
  TempDir dir;
  const std::string page = vitrine::explain::write_report(dir / "index.html", sample_report());
  const BrowserCheck b = check_in_browser(page);
  CHECK(b.images == 9);
  CHECK(b.decoded == 9);
  for (const std::string& e : b.console_errors) FAIL_CHECK("console: " << e);
  for (const std::string& url : b.fetched) FAIL_CHECK("fetched: " << url);

  // The screenshot: 1200 x 900, mostly the white page, with the first original's colour
  // (0, 255, 128) over the 112 x 112 px it is shown at.
  const vitrine::explain::Rgb8 shot = decode_png(read_text(b.screenshot_path));
  CHECK(shot.width == 1200);
  CHECK(shot.height == 900);
  int64_t white = 0, original = 0;
  for (size_t i = 0; i < shot.pixels.size(); i += 3) {
    const uint8_t r = shot.pixels[i], g = shot.pixels[i + 1], bl = shot.pixels[i + 2];
    white += r == 255 && g == 255 && bl == 255;
    original += r == 0 && g == 255 && bl == 128;
  }
  CHECK(white > shot.width * shot.height / 2);
  CHECK(original == 112 * 112);
}
