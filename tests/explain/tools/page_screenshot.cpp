// page_screenshot URL IMAGE OUT.png [HEAD]: opens vitrine-explain --serve's page at URL in
// headless Chromium, chooses IMAGE in it as a user does, waits for every method, optionally picks
// a head, and writes a screenshot of the page (the picture in docs/explain.md). Not a test: the
// browser test (test_serve.cpp) drives the same page and checks it.
// The helpers' checks are doctest's: implemented here, outside any test (a failed one aborts).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "explain/browser.h"
#include "explain/cdp.h"
#include "test_util.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: page_screenshot URL IMAGE OUT.png [HEAD]\n");
    return 2;
  }
  doctest::Context checks;  // the helpers' failed checks: a message and exit 1
  checks.setAsDefaultForAssertsOutOfTestCases();
  checks.setAssertHandler([](const doctest::AssertData& a) {
    std::fprintf(stderr, "page_screenshot: %s:%d: %s %s\n", a.m_file, a.m_line, a.m_expr,
                 a.m_exception.c_str());
    std::exit(1);
  });
  const std::string chromium = vt_test::find_chromium();
  if (chromium.empty()) {
    std::fprintf(stderr, "page_screenshot: chromium is not on PATH\n");
    return 1;
  }
  vt_test::TempDir profile;
  vt_test::Devtools page(chromium, profile.dir.string());
  page.call("Emulation.setDeviceMetricsOverride",
            {{"width", 1280}, {"height", 1380}, {"deviceScaleFactor", 1}, {"mobile", false}});
  page.navigate(argv[1]);
  if (!page.wait_for("document.body.dataset.state === 'idle'")) return 1;
  page.set_files("#file", {std::filesystem::absolute(argv[2]).string()});
  if (!page.wait_for("document.body.dataset.explained === '1'")) return 1;
  if (argc == 5) {
    page.eval(std::string("(() => { const h = document.getElementById('head'); h.value = '") +
              argv[4] + "'; h.dispatchEvent(new Event('change')); })()");
    if (!page.wait_for("document.body.dataset.explained === '2'")) return 1;
  }
  page.screenshot(argv[3]);
  std::printf("page_screenshot: %s\n", argv[3]);
  return 0;
}
