// JSON files read with their faults located, and atomic file writes: temp file, rename (see
// files.h).
#include "tools/common/files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "backends/error.h"
#include "nn/json.h"

namespace vitrine::tools {

void write_file_atomically(const std::string& path, std::string_view bytes) {
  // The same folder as path, so that rename() replaces it in one step (never across devices).
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  VT_CHECK(f, "cannot write {}: cannot create {}: {}", path, tmp, std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;  // flushes: a full disk may show up only here
  if (!written || !closed) {
    const int e = written ? errno : write_errno;
    std::remove(tmp.c_str());
    fail("cannot write {}: {}", path, std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail("cannot write {}: cannot rename {} to it: {}", path, tmp, std::strerror(e));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  using nlohmann::json;
  namespace fs = std::filesystem;
  std::error_code ec;
  VT_CHECK(fs::exists(path, ec), "{} \"{}\": no such file", what, path);
  VT_CHECK(!fs::is_directory(path, ec), "{} \"{}\": is a folder, expected a JSON file", what, path);
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in.good(), "{} \"{}\": cannot open it ({})", what, path, std::strerror(errno));
  std::ostringstream text_stream;
  text_stream << in.rdbuf();
  VT_CHECK(!in.bad(), "{} \"{}\": cannot read it ({})", what, path, std::strerror(errno));
  const std::string text = text_stream.str();
  return nn::parse_json(text, fmt::format("{} \"{}\"", what, path));
}

}  // namespace vitrine::tools
