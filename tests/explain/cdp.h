// Driving headless Chromium through the DevTools protocol, for the test of vitrine-explain
// --serve's page: navigate, run script in the page, set a file input's file, and record every
// console message, uncaught exception and network request. The protocol runs over a pipe
// (--remote-debugging-pipe: commands on the browser's fd 3, answers and events on its fd 4, each
// message JSON ended by a NUL byte), so no WebSocket client is needed.
#pragma once
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vt_test {

class Devtools {
 public:
  /// Starts Chromium headless (chromium: its path) with a fresh profile under profile_dir and
  /// opens one blank page, with the Runtime, Log, Network and Page domains enabled. Stderr goes
  /// to profile_dir/chromium.log.
  Devtools(const std::string& chromium, const std::string& profile_dir);
  ~Devtools();
  Devtools(const Devtools&) = delete;
  Devtools& operator=(const Devtools&) = delete;

  /// Sends a command to the page and returns its result; an error answer or no answer within the
  /// timeout fails the test.
  nlohmann::json call(const std::string& method, const nlohmann::json& params = {},
                      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Evaluates a JavaScript expression in the page (promises awaited) and returns its value.
  nlohmann::json eval(const std::string& expression);
  /// Evaluates the expression until it is true (polling every 50 ms); false when the timeout
  /// passed first.
  bool wait_for(const std::string& expression,
                std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Loads url and waits for its load event.
  void navigate(const std::string& url);
  /// Sets the files of the <input type=file> matched by the CSS selector (as a user choosing
  /// them), which fires its change event.
  void set_files(const std::string& selector, const std::vector<std::string>& paths);
  /// A PNG screenshot of the page's viewport, written to path.
  void screenshot(const std::string& path);

  /// Console messages (any level), uncaught exceptions and browser log entries of level error or
  /// warning, as "source: text" lines.
  std::vector<std::string> console;
  /// Every URL the page requested.
  std::vector<std::string> requested;

 private:
  void send(const nlohmann::json& message);
  /// Reads one message (false at the timeout), handling the events it may be.
  bool receive(nlohmann::json& message, std::chrono::steady_clock::time_point deadline);
  void record(const nlohmann::json& event);
  int pid_ = -1, to_browser_ = -1, from_browser_ = -1;
  int64_t next_id_ = 1;
  std::string session_, buffer_;
};

}  // namespace vt_test
