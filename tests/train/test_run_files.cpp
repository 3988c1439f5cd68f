// Run files are written so that a reader never sees half of one: config.json and
// confusion_matrix.json atomically (tools::write_file_atomically), metrics.jsonl a whole line at a
// time (tools::append_line), and the temporary files a killed run leaves are removed.
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/files.h"
#include "run_files.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace fs = std::filesystem;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("run files: a line that does not fit is not added, the file never ends mid-line") {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  tools::append_line(path, R"({"step": 1})");
  tools::append_line(path, R"({"step": 2})");
  CHECK(read_all(path) == "{\"step\": 1}\n{\"step\": 2}\n");
  {
    FileSizeLimit limit(30);
    CHECK_ERROR_CONTAINS(tools::append_line(path, R"({"step": 3, "loss": 0.5})"), path,
                         "File too large", "the line was not added");
  }
  CHECK(read_all(path) == "{\"step\": 1}\n{\"step\": 2}\n");  // cut back to the last whole line
  CHECK_ERROR_CONTAINS(tools::append_line(dir / "no/such/dir/m.jsonl", "{}"), "no/such/dir",
                       "cannot write");
}

TEST_CASE("run files: an atomic write that does not fit leaves the old file and no temporary") {
  TempDir dir;
  const std::string path = dir / "config.json";
  tools::write_file_atomically(path, "{\"old\": true}\n");
  {
    FileSizeLimit limit(1000);
    // The finding: config.json was silently cut to the limit (then --resume failed on it).
    CHECK_ERROR_CONTAINS(tools::write_file_atomically(path, std::string(5000, ' ') + "{}"), path,
                         "cannot write");
  }
  CHECK(read_all(path) == "{\"old\": true}\n");
  CHECK(dir.files() == std::vector<std::string>{"config.json"});
}

TEST_CASE("run files: the temporary files of killed processes are removed, others kept") {
  TempDir dir;
  write_file(dir / "last.safetensors.tmp-4999999", "x");                    // no such process
  write_file(dir / fmt::format("best.safetensors.tmp-{}", getpid()), "x");  // this one: running
  write_file(dir / "notes.tmp-abc", "x");                                   // not ours
  write_file(dir / "last.safetensors", "x");
  CHECK(tools::remove_stale_temporaries(dir.dir.string()) == 1);
  CHECK(!fs::exists(dir / "last.safetensors.tmp-4999999"));
  CHECK(fs::exists(dir / fmt::format("best.safetensors.tmp-{}", getpid())));
  CHECK(fs::exists(dir / "notes.tmp-abc"));
  CHECK(fs::exists(dir / "last.safetensors"));
}
