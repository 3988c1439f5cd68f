# ctest script: no TEST_CASE name may hold a ';'. doctest_discover_tests passes the name to
# --test-case=, where a ';' ends CMake's list: the test would then run no case and pass.
file(GLOB_RECURSE sources ${SOURCE_DIR}/tests/*.cpp)
set(bad "")
foreach(f IN LISTS sources)
  file(STRINGS ${f} lines REGEX "TEST_CASE\\(\"[^\"]*;")
  foreach(line IN LISTS lines)
    string(APPEND bad "\n  ${f}: ${line}")
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "test case names with ';' (ctest would run none of them):${bad}")
endif()
