// Headless Chromium runs for the report tests (see browser.h).
#include "browser.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"

namespace vt_test {

namespace fs = std::filesystem;

namespace {

const char* kMarker = "<div id=\"vitrine-browser-check\">";

// Appended to the page's copy (the HTML parser moves it into <body>): on load, counts the
// images and the decoded ones and lists the resources fetched, in the marker element.
const char* kCheckScript = R"js(
<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const decoded = images.filter((i) => i.complete && i.naturalWidth > 0).length;
  const fetched = performance.getEntriesByType("resource").map((e) => e.name);
  const marker = document.createElement("div");
  marker.id = "vitrine-browser-check";
  marker.textContent = `images=${images.length} decoded=${decoded} fetched=${fetched.join(" ")}`;
  document.body.appendChild(marker);
});
</script>
)js";

/// s in single quotes for sh (a quote inside becomes '\'').
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// A file:// URL of an absolute path, every byte but unreserved ones and '/' percent-encoded.
std::string file_url(const fs::path& path) {
  std::string url = "file://";
  for (unsigned char c : fs::absolute(path).string()) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~')
      url += static_cast<char>(c);
    else
      url += fmt::format("%{:02X}", c);
  }
  return url;
}

/// Runs Chromium headless with the extra arguments on url; stdout to out, stderr to log. A
/// timeout (coreutils) keeps a hung browser from hanging the tests.
void run_chromium(const std::string& chromium, const fs::path& profile, const std::string& args,
                  const std::string& url, const fs::path& out, const fs::path& log) {
  const std::string cmd = fmt::format(
      "timeout 120 {} --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--no-first-run --user-data-dir={} --virtual-time-budget=5000 --enable-logging=stderr "
      "--v=0 {} {} > {} 2> {}",
      quote(chromium), quote(profile.string()), args, quote(url), quote(out.string()),
      quote(log.string()));
  const int rc = std::system(cmd.c_str());
  const std::string err = read_text(log.string());
  REQUIRE_MESSAGE(rc == 0, "chromium failed (status "
                               << rc << "): " << cmd << "\n"
                               << err.substr(err.size() > 4000 ? err.size() - 4000 : 0));
}

}  // namespace

std::string find_chromium() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::vector<std::string> folders;
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty()) folders.push_back(d);
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    for (const std::string& d : folders) {
      const fs::path p = fs::path(d) / name;
      std::error_code ec;
      if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
    }
  return "";
}

BrowserCheck check_in_browser(const std::string& html_path) {
  const std::string chromium = find_chromium();
  REQUIRE_MESSAGE(!chromium.empty(), "chromium is not on PATH");
  const fs::path page = fs::absolute(html_path);
  REQUIRE_MESSAGE(fs::is_regular_file(page), html_path << " does not exist");
  TempDir work;  // the browser profile and the outputs
  // The copy sits beside the page, so that relative links would resolve as they do for it.
  const fs::path copy = page.string() + ".check.html";
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove_copy{copy};
  {
    std::ofstream f(copy, std::ios::binary);
    REQUIRE_MESSAGE(f, "cannot write " << copy);
    f << read_text(page.string()) << kCheckScript;
  }

  BrowserCheck check;
  run_chromium(chromium, work.dir / "profile", "--dump-dom", file_url(copy), work.dir / "dom.html",
               work.dir / "log.txt");
  const std::string dom = read_text((work.dir / "dom.html").string());
  const size_t at = dom.rfind(kMarker);
  REQUIRE_MESSAGE(at != std::string::npos, "no marker in the DOM chromium printed ("
                                               << dom.size() << " bytes): did the page load?");
  const size_t start = at + std::strlen(kMarker), end = dom.find("</div>", start);
  // "images=N decoded=M fetched=URL URL ..."
  const std::string text = dom.substr(start, end - start);
  long long images = -1, decoded = -1;
  int used = 0;
  REQUIRE_MESSAGE((std::sscanf(text.c_str(), "images=%lld decoded=%lld fetched=%n", &images,
                               &decoded, &used) == 2 &&
                   used > 0),
                  "unexpected marker: " << text);
  check.images = images;
  check.decoded = decoded;
  std::istringstream urls(text.substr(static_cast<size_t>(used)));
  for (std::string url; urls >> url;) check.fetched.push_back(url);
  std::istringstream log(read_text((work.dir / "log.txt").string()));
  for (std::string line; std::getline(log, line);)
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos)
      check.console_errors.push_back(line);

  std::string shot = page.string();
  if (shot.size() > 5 && shot.compare(shot.size() - 5, 5, ".html") == 0)
    shot.resize(shot.size() - 5);
  check.screenshot_path = shot + ".screenshot.png";
  run_chromium(chromium, work.dir / "profile",
               "--window-size=1200,900 --screenshot=" + quote(check.screenshot_path),
               file_url(page), work.dir / "shot.txt", work.dir / "log.txt");
  REQUIRE_MESSAGE(fs::is_regular_file(check.screenshot_path),
                  "chromium wrote no screenshot " << check.screenshot_path);
  return check;
}

}  // namespace vt_test
