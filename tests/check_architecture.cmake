# ctest script: docs/architecture.md names every source file (.h, .cpp, .cu, .cuh) of the library,
# the libraries over it (explain, train, common) and the tools, so that the page cannot drift
# silently. Run as
#   cmake -DSOURCE_DIR=<repository> -P tests/check_architecture.cmake
#
# The convention (docs/architecture.md, "What lives where today", says it too). A file is named
# when one of the page's code spans (`...`, outside fenced blocks) names it:
# - anywhere on the page, by its path from the repository's root: `backends/cpu/sgemm.cpp`,
#   `nn/summary.{h,cpp}`, `autograd/tensor.h/.cpp`;
# - in a table row whose first cell is a folder (`nn/data/`), by its path from that folder: a
#   file name (`loader.h`), a stem for every file of that stem (`loader`: loader.h and
#   loader.cpp), a stem with its extensions (`loader.{h,cpp}`, `loader.h/.cpp`);
# - in such a row, a span ending in '/' covers a folder as a whole, with everything under it
#   (the row of `backends/` naming `dist/`). Only table rows cover folders: a folder's path in
#   prose or in the table of features names nothing, and wildcards (`backends/cpu/*.cpp`) name
#   nothing anywhere.
cmake_minimum_required(VERSION 3.20)  # policies: if(TRUE) is a boolean
set(folders autograd backends ops nn models explain train common tools)
set(doc ${SOURCE_DIR}/docs/architecture.md)

set(files "")
foreach(folder IN LISTS folders)
  foreach(ext h cpp cu cuh)
    file(GLOB_RECURSE found RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${folder}/*.${ext})
    list(APPEND files ${found})
  endforeach()
endforeach()
list(LENGTH files count)
if(count LESS 100)
  message(FATAL_ERROR "only ${count} source files under ${folders} in ${SOURCE_DIR}: wrong SOURCE_DIR?")
endif()

# The page, one list entry a line: characters that CMake lists treat specially become spaces
# (no span that names a file holds them).
file(READ ${doc} text)
string(REGEX REPLACE "[][;\\]" " " text "${text}")
string(REPLACE "\n" ";" lines "${text}")

# Every span becomes keys: F:<file>, S:<folder>/<stem> (any extension), D:<folder>/ (everything
# under it).
set(keys "")
macro(add_span span base allow_folder)
  set(s "${span}")
  if(s MATCHES "^[A-Za-z0-9_./{},-]+$" AND NOT s MATCHES "^[./]")
    string(REPLACE "/." ",." s "${s}")  # `simd.h/.cpp`: one name with two extensions
    if(s MATCHES "/$")
      if(${allow_folder})
        list(APPEND keys "D:${base}${s}")
      endif()
    else()
      set(dir "")
      set(name "${s}")
      if(s MATCHES "^(.*/)([^/]+)$")
        set(dir "${CMAKE_MATCH_1}")
        set(name "${CMAKE_MATCH_2}")
      endif()
      if(name MATCHES "^([^.]+)\\.(.+)$")
        set(stem "${CMAKE_MATCH_1}")
        string(REGEX MATCHALL "[A-Za-z0-9]+" exts "${CMAKE_MATCH_2}")
        foreach(e IN LISTS exts)
          list(APPEND keys "F:${base}${dir}${stem}.${e}")
        endforeach()
      else()
        list(APPEND keys "S:${base}${dir}${name}")
      endif()
    endif()
  endif()
endmacro()

set(fenced FALSE)
foreach(line IN LISTS lines)
  if(line MATCHES "^```")
    if(fenced)
      set(fenced FALSE)
    else()
      set(fenced TRUE)
    endif()
    continue()
  endif()
  if(fenced)
    continue()
  endif()
  set(row_folder "")
  set(rest "${line}")
  if(line MATCHES "^\\| *`([A-Za-z0-9_./-]+/)` *\\|(.*)$")
    set(row_folder "${CMAKE_MATCH_1}")
    set(rest "${CMAKE_MATCH_2}")
  endif()
  string(REGEX MATCHALL "`[^`]+`" spans "${rest}")
  foreach(span IN LISTS spans)
    string(REGEX REPLACE "^`(.*)`$" "\\1" span "${span}")
    add_span("${span}" "" FALSE)
    if(row_folder)
      add_span("${span}" "${row_folder}" TRUE)
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES keys)

set(missing "")
foreach(f IN LISTS files)
  get_filename_component(dir "${f}" DIRECTORY)
  get_filename_component(name "${f}" NAME)
  string(REGEX REPLACE "\\..*$" "" stem "${name}")
  set(candidates "F:${f}" "S:${dir}/${stem}")
  set(up "${dir}")
  while(up)
    list(APPEND candidates "D:${up}/")
    get_filename_component(up "${up}" DIRECTORY)
  endwhile()
  set(named FALSE)
  foreach(c IN LISTS candidates)
    list(FIND keys "${c}" at)
    if(NOT at EQUAL -1)
      set(named TRUE)
      break()
    endif()
  endforeach()
  if(NOT named)
    string(APPEND missing "\n  ${f}")
  endif()
endforeach()

if(missing)
  message(FATAL_ERROR
    "docs/architecture.md names none of these source files (name each in the row of its folder "
    "in 'What lives where today', or cover its folder; the convention is at the top of "
    "tests/check_architecture.cmake):${missing}")
endif()
message(STATUS "docs/architecture.md names all ${count} source files under ${folders}")
