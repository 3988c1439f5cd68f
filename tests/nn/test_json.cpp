// Untrusted JSON (nn/json.h): depth and size limits, numbers out of range, integers that must be
// whole, and errors that name what was read.
#include "nn/json.h"
#include "test_util.h"

using namespace vitrine;
using nlohmann::json;

TEST_CASE("json: parse_json limits the depth before building a value, and names the source") {
  CHECK(nn::parse_json(R"({"a": [1, {"b": 2}]})", "x")["a"][1]["b"] == 2);
  const std::string ok = std::string(64 - 1, '[') + std::string(64 - 1, ']');
  CHECK_NOTHROW(nn::parse_json(ok, "x"));
  // Found by fuzzing: a million levels made the first copy of the value exhaust the stack.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  CHECK_ERROR_CONTAINS(nn::parse_json(deep, "config file \"d.json\""), "config file \"d.json\"",
                       "nested deeper than 64 levels");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\": ";
  CHECK_ERROR_CONTAINS(nn::parse_json(objects + "1" + std::string(65, '}'), "x"),
                       "nested deeper than 64");
  nn::JsonLimits small;
  small.max_depth = 2;
  small.max_bytes = 10;
  CHECK_ERROR_CONTAINS(nn::parse_json("[[[1]]]", "s", small), "deeper than 2");
  CHECK_ERROR_CONTAINS(nn::parse_json("[1, 2, 3, 4, 5]", "s", small), "15 bytes", "limit of 10");
  CHECK_ERROR_CONTAINS(nn::parse_json("{\"a\":\n 1e999}", "h"), "h: invalid JSON",
                       "number overflow");
  CHECK_ERROR_CONTAINS(nn::parse_json("{\"a\":\n ]", "h"), "h: invalid JSON at line 2, column 2");
}

TEST_CASE("json: integers must be whole and in range, numbers finite") {
  CHECK(nn::json_integer(json(3), "k") == 3);
  CHECK(nn::json_integer(json(3.0), "k") == 3);
  CHECK_ERROR_CONTAINS(nn::json_integer(json(16.7), "model.dim"),
                       "model.dim must be an integer >= 0, got 16.7");
  CHECK_ERROR_CONTAINS(nn::json_integer(json(1e300), "d"), "must be an integer");
  CHECK_ERROR_CONTAINS(nn::json_integer(json(18446744073709551615ull), "d"), "must be an integer");
  CHECK_ERROR_CONTAINS(nn::json_integer(json("3"), "d"), "got \"3\"");
  CHECK_ERROR_CONTAINS(nn::json_integer(json(7), "d", 1, 5), "an integer in [1, 5], got 7");
  CHECK_ERROR_CONTAINS(nn::json_integer(json::array({1, 2}), "d"), "got array of 2 items");
  CHECK(nn::json_number(json(0.5), "lr") == 0.5);
  CHECK_ERROR_CONTAINS(nn::json_number(json(2.0), "p", 0, 1),
                       "p must be a finite number in [0, 1]");
  CHECK_ERROR_CONTAINS(nn::json_number(json(true), "p"), "finite number", "got true");
}
