// Helpers the train tests share for reading a run folder, and a file-size limit for writes that
// fail.
#pragma once
#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace vt_test {

/// run_dir/metrics.jsonl's lines without "train_seconds" and "images_per_second", the values
/// that differ between two runs of the same config (each line must have the first, >= 0; train
/// lines the second, > 0). The file must exist and hold lines, so that two comparisons of nothing
/// cannot pass.
inline std::vector<nlohmann::json> metrics_lines(const std::string& run_dir) {
  std::vector<nlohmann::json> lines;
  std::string line;
  std::ifstream f(run_dir + "/metrics.jsonl");
  CHECK_MESSAGE(f.is_open(), run_dir, "/metrics.jsonl is missing");
  while (std::getline(f, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    CHECK(j.at("train_seconds").get<double>() >= 0);
    j.erase("train_seconds");
    if (j.at("type") == "train") {
      CHECK(j.at("images_per_second").get<double>() > 0);
      j.erase("images_per_second");
    }
    lines.push_back(j);
  }
  CHECK_MESSAGE(!lines.empty(), run_dir, "/metrics.jsonl is empty");
  return lines;
}

/// Sets the file-size limit (and ignores SIGXFSZ, so that a write past it fails with EFBIG as it
/// does under a shell's `ulimit -f` with the signal ignored) until the end of its scope.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int);
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old);
    old_handler = signal(SIGXFSZ, SIG_IGN);
    rlimit r = old;
    r.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &r) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
  }
};

}  // namespace vt_test
