// Errors. A user mistake throws vitrine::Error with a message that names the op or file, what was
// given and what was expected. An internal invariant uses VT_ASSERT, which names file:line.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vitrine {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Throws Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void internal_error(const char* cond, const char* file, int line);

}  // namespace vitrine

/// Checks a user-facing condition: VT_CHECK(a == b, "op: {} != {}", a, b).
#define VT_CHECK(cond, ...)                    \
  do {                                         \
    if (!(cond)) ::vitrine::fail(__VA_ARGS__); \
  } while (0)

/// Checks an internal invariant; failure is a bug in Vitrine, reported with file:line.
#define VT_ASSERT(cond)                                                \
  do {                                                                 \
    if (!(cond)) ::vitrine::internal_error(#cond, __FILE__, __LINE__); \
  } while (0)
