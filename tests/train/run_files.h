// Helpers the train tests share for reading a run folder.
#pragma once
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace vt_test {

/// run_dir/metrics.jsonl's lines without "train_seconds", the one value that differs between
/// two runs of the same config (each line must have it, >= 0). The file must exist and hold
/// lines, so that two comparisons of nothing cannot pass.
inline std::vector<nlohmann::json> metrics_lines(const std::string& run_dir) {
  std::vector<nlohmann::json> lines;
  std::string line;
  std::ifstream f(run_dir + "/metrics.jsonl");
  CHECK_MESSAGE(f.is_open(), run_dir, "/metrics.jsonl is missing");
  while (std::getline(f, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    CHECK(j.at("train_seconds").get<double>() >= 0);
    j.erase("train_seconds");
    lines.push_back(j);
  }
  CHECK_MESSAGE(!lines.empty(), run_dir, "/metrics.jsonl is empty");
  return lines;
}

}  // namespace vt_test
