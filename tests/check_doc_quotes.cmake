# ctest script: a doc must quote an example file verbatim (so the doc's code is the code that
# the test suite builds and runs).
file(READ ${DOC} doc)
file(READ ${CODE} code)
string(FIND "${doc}" "${code}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${DOC} does not contain ${CODE} verbatim: paste the file into its code block")
endif()
