// Atomic file writes: temp file, rename (see atomic_write.h).
#include "nn/atomic_write.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "backends/error.h"

namespace vitrine {

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

}  // namespace vitrine
