// Helpers the train tests share for reading a run folder (metrics.jsonl, the TensorBoard event
// file through tests/train/read_tfevents.py), and a file-size limit for writes that fail.
#pragma once
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "train/tfevents.h"

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

/// The run folder's event files.
inline std::vector<std::string> event_files(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(run_dir))
    if (vitrine::train::is_event_file_name(e.path().filename().string()))
      out.push_back(e.path().string());
  return out;
}

/// Runs tests/train/read_tfevents.py on run_dir: its exit status (0 the file is good, 1 a fault,
/// 77 it cannot run here: no /usr/bin/python3, google.protobuf or protoc) and what it printed.
inline ProcessResult run_independent_reader(const TempDir& dir, const std::string& run_dir) {
  if (!std::filesystem::exists("/usr/bin/python3"))
    return {77, "no /usr/bin/python3: the event file's independent reader did not run"};
  return run_process("/usr/bin/python3", {VITRINE_TESTS_TRAIN "/read_tfevents.py", run_dir}, dir,
                     "reader");
}

/// Checks that the independent reader passes run_dir's event file; marks the case skipped when
/// it cannot run here.
inline void check_with_independent_reader(const TempDir& dir, const std::string& run_dir) {
  const ProcessResult r = run_independent_reader(dir, run_dir);
  INFO(r.output);
  if (r.code == 77) {
    skip(r.output);
    return;
  }
  CHECK(r.code == 0);
  CHECK(r.output.find("every CRC good") != std::string::npos);
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
