// Writing a whole file so that a reader never sees half of it: the library's one atomic write
// (save_image uses it, and so do the tools, through common/files.h).
#pragma once
#include <string>
#include <string_view>

namespace vitrine {

/// Writes bytes to path atomically: to a temp file beside it (path + ".tmp-<pid>"), then renamed
/// over path, so path holds either its old content or all of the new. The temp file is removed
/// when anything fails. Errors (vitrine::Error) name path and the system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace vitrine
