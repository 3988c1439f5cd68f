// Reading a JSON file with an error that says where it is wrong, and writing a tool's output
// files so that a reader never sees half of one.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "nn/atomic_write.h"

namespace vitrine::tools {

/// The library's atomic write (nn/atomic_write.h): a temp file beside path (path + ".tmp-<pid>"),
/// renamed over it.
using vitrine::write_file_atomically;

/// Appends one line (a '\n' is added) to path, created when missing, checked: a failed or short
/// write (a full disk, a file-size limit) truncates the file back to where it was, so it never
/// ends mid-line, and is an Error naming path and the reason at once.
void append_line(const std::string& path, std::string_view line);

/// Writes all of bytes to the open file descriptor fd, going on after short writes and EINTR.
/// Returns 0, or the errno of the failure (ENOSPC for a write that wrote nothing): the caller
/// truncates back and reports, as append_line does.
int write_all(int fd, std::string_view bytes);

/// Removes the temporary files ("<name>.tmp-<pid>") that write_file_atomically and
/// write_safetensors leave in dir when their process is killed before the rename: those of
/// processes that are no longer running. Returns how many were removed.
int remove_stale_temporaries(const std::string& dir);

/// The JSON value in a file. Errors (vitrine::Error) start with `what` and the path ("config file
/// \"runs/x/config.json\": ..."): no such file, a folder, unreadable, or invalid JSON with the line
/// and column of the fault.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace vitrine::tools
