// Reading a JSON file with an error that says where it is wrong, and writing a tool's output
// files so that a reader never sees half of one.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vitrine::tools {

/// Writes bytes to path atomically: to a temp file beside it (path + ".tmp-<pid>"), then renamed
/// over path, so path holds either its old content or all of the new. The temp file is removed
/// when anything fails. Errors (vitrine::Error) name path and the system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// The JSON value in a file. Errors (vitrine::Error) start with `what` and the path ("config file
/// \"runs/x/config.json\": ..."): no such file, a folder, unreadable, or invalid JSON with the line
/// and column of the fault.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace vitrine::tools
