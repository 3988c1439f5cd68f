// The tests' main: doctest's, except that a case that called vt_test::skip() and passed exits
// with $VITRINE_TEST_SKIP_CODE when ctest runs it (tests/CMakeLists.txt sets that variable and
// the same SKIP_RETURN_CODE), so ctest reports it as skipped rather than passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

#include "test_util.h"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;
  const char* code = std::getenv("VITRINE_TEST_SKIP_CODE");
  if (result == 0 && code != nullptr && vt_test::skipped()) return std::atoi(code);
  return result;
}
