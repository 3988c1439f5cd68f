// JSON files read with their faults located, lines appended whole, stale temporaries removed
// (see files.h).
#include "common/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
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

int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    done += static_cast<size_t>(n);
  }
  return 0;
}

void append_line(const std::string& path, std::string_view line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  VT_CHECK(fd >= 0, "cannot write {}: {}", path, std::strerror(errno));
  struct stat st;
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  std::string text(line);
  text += '\n';
  const int error = write_all(fd, text);
  if (error != 0 && before >= 0) (void)::ftruncate(fd, before);  // never leave half a line
  ::close(fd);
  VT_CHECK(error == 0, "cannot write {}: {} (the line was not added)", path, std::strerror(error));
}

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp-");
    if (at == std::string::npos || at + 5 >= name.size()) continue;
    const std::string pid_text = name.substr(at + 5);
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code remove_ec;  // (a file that cannot be removed is left, the listing goes on)
    if (fs::remove(it->path(), remove_ec)) ++removed;
  }
  return removed;
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
