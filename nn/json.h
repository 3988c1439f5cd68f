// Reading JSON that comes from outside (configs, safetensors headers and their metadata, Hugging
// Face config.json, --set values): the nesting depth and the size are limited before a value is
// built, numbers out of range are refused, and every error starts with what was being read.
// nlohmann's parser is iterative, but copying a value is recursive: a value nested a million
// levels deep would exhaust the stack in the first copy, so it must never be built.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vitrine::nn {

struct JsonLimits {
  /// Nesting levels (objects and arrays) allowed; Vitrine's own files use at most 5.
  int max_depth = 64;
  /// Bytes of text allowed.
  uint64_t max_bytes = 64ull << 20;
};

/// Parses text as JSON. Errors (vitrine::Error) start with `what` ("config file \"x.json\"",
/// "w.safetensors: the header"): invalid syntax (with the line and column), nesting deeper than
/// limits.max_depth, text longer than limits.max_bytes, a number beyond double's range (1e999).
nlohmann::json parse_json(std::string_view text, const std::string& what,
                          const JsonLimits& limits = {});

/// A JSON number that is an integer in [lo, hi]: 3 and 3.0 are, 16.7, 1e300, NaN, "3" and true
/// are not (Error: "{what} must be an integer in [lo, hi], got 16.7").
int64_t json_integer(const nlohmann::json& v, std::string_view what, int64_t lo = 0,
                     int64_t hi = std::numeric_limits<int64_t>::max());
/// A finite JSON number in [lo, hi] (Error naming `what`, the range and the value otherwise).
double json_number(const nlohmann::json& v, std::string_view what,
                   double lo = -std::numeric_limits<double>::max(),
                   double hi = std::numeric_limits<double>::max());
/// The integer a JSON value holds exactly (integers, and floats with no fraction below 2^53), or
/// nothing.
std::optional<int64_t> json_as_integer(const nlohmann::json& v);
/// A short description of an untrusted value for messages: scalars as text (cut to 80 characters),
/// containers by type and size.
std::string json_brief(const nlohmann::json& v);

}  // namespace vitrine::nn
