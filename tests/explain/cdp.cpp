// Headless Chromium over the DevTools protocol's pipe transport (see cdp.h).
#include "cdp.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "decode.h"
#include "test_util.h"

namespace vt_test {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

Devtools::Devtools(const std::string& chromium, const std::string& profile_dir) {
  int to[2], from[2];
  REQUIRE(pipe(to) == 0);
  REQUIRE(pipe(from) == 0);
  const std::string log = profile_dir + "/chromium.log";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the browser: commands on fd 3, answers on fd 4
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    const int in = dup(to[0]), out = dup(from[1]);  // above 4 before they move to 3 and 4
    dup2(in, 3);
    dup2(out, 4);
    for (int fd = 5; fd < 1024; ++fd) close(fd);
    const std::string profile = "--user-data-dir=" + profile_dir + "/profile";
    execl(chromium.c_str(), chromium.c_str(), "--headless=new", "--no-sandbox", "--disable-gpu",
          "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
          "--remote-debugging-pipe", "--window-size=1280,1000", profile.c_str(), "about:blank",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  pid_ = pid;
  to_browser_ = to[1];
  from_browser_ = from[0];
  // A page of our own, attached in flat mode: its commands carry the session id.
  const json target = call("Target.createTarget", {{"url", "about:blank"}});
  const json attached =
      call("Target.attachToTarget", {{"targetId", target.at("targetId")}, {"flatten", true}});
  session_ = attached.at("sessionId").get<std::string>();
  for (const char* domain : {"Runtime.enable", "Log.enable", "Network.enable", "Page.enable"})
    call(domain);
}

Devtools::~Devtools() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 50 && waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  if (to_browser_ >= 0) close(to_browser_);
  if (from_browser_ >= 0) close(from_browser_);
}

void Devtools::send(const json& message) {
  const std::string text = message.dump() + std::string(1, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(to_browser_, text.data() + done, text.size() - done);
    REQUIRE_MESSAGE(n > 0, "cannot write to chromium's DevTools pipe");
    done += static_cast<size_t>(n);
  }
}

bool Devtools::receive(json& message, clock_type::time_point deadline) {
  for (;;) {
    const size_t end = buffer_.find('\0');
    if (end != std::string::npos) {
      message = json::parse(buffer_.substr(0, end));
      buffer_.erase(0, end + 1);
      return true;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0) return false;
    pollfd p{from_browser_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[65536];
    const ssize_t n = read(from_browser_, chunk, sizeof chunk);
    REQUIRE_MESSAGE(n > 0, "chromium closed its DevTools pipe (did it crash?)");
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

void Devtools::record(const json& event) {
  const std::string method = event.value("method", "");
  const json& p = event.contains("params") ? event["params"] : json::object();
  if (method == "Runtime.consoleAPICalled") {
    std::vector<std::string> args;
    for (const json& a : p.value("args", json::array()))
      args.push_back(a.contains("value") ? a["value"].dump() : a.value("description", "?"));
    console.push_back(fmt::format("console.{}: {}", p.value("type", "?"), fmt::join(args, " ")));
  } else if (method == "Runtime.exceptionThrown") {
    console.push_back(fmt::format("exception: {}", p["exceptionDetails"].dump()));
  } else if (method == "Log.entryAdded") {
    const json& e = p["entry"];
    const std::string level = e.value("level", "");
    if (level == "error" || level == "warning")
      console.push_back(
          fmt::format("log.{}: {} {}", level, e.value("text", ""), e.value("url", "")));
  } else if (method == "Network.requestWillBeSent") {
    requested.push_back(p["request"].value("url", ""));
  }
}

json Devtools::call(const std::string& method, const json& params,
                    std::chrono::milliseconds timeout) {
  const int64_t id = next_id_++;
  json message = {
      {"id", id}, {"method", method}, {"params", params.is_null() ? json::object() : params}};
  if (!session_.empty()) message["sessionId"] = session_;
  send(message);
  const auto deadline = clock_type::now() + timeout;
  for (json m; receive(m, deadline);) {
    if (!m.contains("id")) {
      record(m);
      continue;
    }
    if (m["id"] != id) continue;
    REQUIRE_MESSAGE(!m.contains("error"), method << " failed: " << m["error"].dump());
    return m.value("result", json::object());
  }
  FAIL(method << ": no answer from chromium within " << timeout.count() << " ms");
  return {};
}

json Devtools::eval(const std::string& expression) {
  const json r =
      call("Runtime.evaluate",
           {{"expression", expression}, {"awaitPromise", true}, {"returnByValue", true}});
  REQUIRE_MESSAGE(!r.contains("exceptionDetails"),
                  "the page's script failed: " << expression << "\n"
                                               << r["exceptionDetails"].dump());
  return r.at("result").value("value", json());
}

bool Devtools::wait_for(const std::string& expression, std::chrono::milliseconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  while (clock_type::now() < deadline) {
    if (eval("Boolean(" + expression + ")") == json(true)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void Devtools::navigate(const std::string& url) {
  call("Page.navigate", {{"url", url}});
  REQUIRE_MESSAGE(wait_for("document.readyState === 'complete'"), url << " did not finish loading");
}

void Devtools::set_files(const std::string& selector, const std::vector<std::string>& paths) {
  const json doc = call("DOM.getDocument");
  const json node =
      call("DOM.querySelector", {{"nodeId", doc["root"]["nodeId"]}, {"selector", selector}});
  REQUIRE_MESSAGE(node.value("nodeId", 0) != 0, "no element " << selector << " in the page");
  call("DOM.setFileInputFiles", {{"nodeId", node["nodeId"]}, {"files", paths}});
}

void Devtools::screenshot(const std::string& path) {
  const json r = call("Page.captureScreenshot", {{"format", "png"}});
  std::ofstream(path, std::ios::binary) << base64_decode(r.at("data").get<std::string>());
}

}  // namespace vt_test
