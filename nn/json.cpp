// Reading untrusted JSON (see json.h).
#include "nn/json.h"

#include <algorithm>
#include <cmath>

#include "backends/error.h"

namespace vitrine::nn {

using nlohmann::json;

namespace {

/// Thrown from the parser's callback to stop at the first level too deep.
struct TooDeep {};

/// "invalid JSON at line 3, column 1: syntax error while parsing ..." from nlohmann's parse_error.
std::string where_invalid(std::string_view text, const json::parse_error& e) {
  // e.byte counts the characters read, the offending one included.
  const size_t end = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
  const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + end, '\n'));
  const size_t nl = text.rfind('\n', end == 0 ? std::string_view::npos : end - 1);
  const size_t column = (end == 0 || nl == std::string_view::npos) ? end + 1 : end - nl;
  // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column 1:
  // syntax error while parsing ..."; keep what follows the position.
  std::string detail = e.what();
  if (size_t p = detail.find("parse error"); p != std::string::npos) {
    const size_t colon = detail.find(": ", p);
    if (colon != std::string::npos) detail = detail.substr(colon + 2);
  }
  return fmt::format("invalid JSON at line {}, column {}: {}", line, column, detail);
}

}  // namespace

json parse_json(std::string_view text, const std::string& what, const JsonLimits& limits) {
  VT_CHECK(text.size() <= limits.max_bytes, "{}: {} bytes of JSON, over the limit of {} bytes",
           what, text.size(), limits.max_bytes);
  const int max_depth = limits.max_depth;
  // depth counts the containers around the value; an object or array opens one more level.
  const json::parser_callback_t check_depth = [max_depth](int depth, json::parse_event_t event,
                                                          json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw TooDeep{};
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check_depth);
  } catch (const TooDeep&) {
    fail("{}: JSON nested deeper than {} levels (objects and arrays); refused before reading it",
         what, max_depth);
  } catch (const json::parse_error& e) {
    fail("{}: {}", what, where_invalid(text, e));
  } catch (const json::exception& e) {  // out_of_range.406: a number beyond double's range
    std::string detail = e.what();
    if (size_t p = detail.find("] "); p != std::string::npos) detail = detail.substr(p + 2);
    fail("{}: invalid JSON: {}", what, detail);
  }
}

std::optional<int64_t> json_as_integer(const json& v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::optional<int64_t>(static_cast<int64_t>(v.get<uint64_t>()))
               : std::nullopt;
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9007199254740992.0)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::string json_brief(const json& v) {
  if (v.is_primitive()) return v.dump().substr(0, 80);
  return fmt::format("{} of {} items", v.type_name(), v.size());
}

int64_t json_integer(const json& v, std::string_view what, int64_t lo, int64_t hi) {
  const std::optional<int64_t> i = json_as_integer(v);
  if (!i || *i < lo || *i > hi) {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(),
                      kMax = std::numeric_limits<int64_t>::max();
    const std::string want = lo == kMin && hi == kMax ? std::string("an integer")
                             : hi == kMax             ? fmt::format("an integer >= {}", lo)
                                          : fmt::format("an integer in [{}, {}]", lo, hi);
    fail("{} must be {}, got {}", what, want, json_brief(v));
  }
  return *i;
}

double json_number(const json& v, std::string_view what, double lo, double hi) {
  const bool ok = v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo &&
                  v.get<double>() <= hi;
  if (!ok) {
    const bool bounded =
        lo > -std::numeric_limits<double>::max() || hi < std::numeric_limits<double>::max();
    fail("{} must be a finite number{}, got {}", what,
         bounded ? fmt::format(" in [{}, {}]", lo, hi) : std::string(), json_brief(v));
  }
  return v.get<double>();
}

}  // namespace vitrine::nn
