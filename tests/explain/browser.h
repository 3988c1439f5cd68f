// Opening an HTML page in headless Chromium, for the tests of the tools' reports: did every image
// decode, did the console stay quiet, did the page fetch anything, and what does it look like.
// No DevTools protocol: a copy of the page with a script appended that, on window load, writes a
// marker element into the DOM, which `chromium --dump-dom` prints; the console reaches Chromium's
// log on stderr (--enable-logging=stderr) as "CONSOLE" lines. A second run takes the screenshot.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vt_test {

/// What a page did in the browser.
struct BrowserCheck {
  int64_t images = 0;   // <img> elements after the load event
  int64_t decoded = 0;  // of those, the ones complete with naturalWidth > 0
  /// Every console message (Chromium logs them all at one level, so errors cannot be told from
  /// console.log; the reports have no script, so any message is a problem), and uncaught errors.
  std::vector<std::string> console_errors;
  /// URLs the page requested (resource timing); images in data: URIs fetch nothing.
  std::vector<std::string> fetched;
  /// The screenshot, a 1200 x 900 PNG: the page's path with ".html" replaced by
  /// ".screenshot.png" (or with that appended).
  std::string screenshot_path;
};

/// The Chromium to run: the first of chromium, chromium-browser, google-chrome found on PATH;
/// empty when there is none (the browser tests then skip themselves).
std::string find_chromium();

/// Loads html_path in headless Chromium (a virtual-time budget of 5 s for the page to settle) and
/// reports what it did. Fails the test when Chromium is missing, fails, or writes no marker.
/// Leaves only the screenshot beside the page.
BrowserCheck check_in_browser(const std::string& html_path);

}  // namespace vt_test
