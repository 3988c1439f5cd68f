# ctest script: install the built tree into a temporary prefix, check that it holds the headers,
# the CMake package and every configs/*.json (identical, in DATA_DIR/vitrine/configs), configure
# and build the consumer project against it with find_package(vitrine), run it, and check its
# output.
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR DATA_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_install.cmake: ${v} not set")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(f include/vitrine/vitrine.h include/vitrine/autograd/tensor.h include/vitrine/ops/ops.h
          include/vitrine/explain/explain.h include/vitrine/train/trainer.h
          include/vitrine/common/files.h lib/cmake/vitrine/vitrineConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "installed tree lacks ${f}")
  endif()
endforeach()
# The libraries over the API install beside it (explain/, train/, common/), not under tools/.
if(EXISTS ${prefix}/include/vitrine/tools)
  message(FATAL_ERROR "installed tree has include/vitrine/tools: the libraries' headers belong in "
                      "include/vitrine/explain, train and common")
endif()
file(GLOB configs RELATIVE ${SOURCE_DIR}/configs ${SOURCE_DIR}/configs/*.json)
if(NOT configs)
  message(FATAL_ERROR "no configs/*.json in ${SOURCE_DIR}")
endif()
foreach(f ${configs})
  set(installed ${prefix}/${DATA_DIR}/vitrine/configs/${f})
  if(NOT EXISTS ${installed})
    message(FATAL_ERROR "installed tree lacks ${DATA_DIR}/vitrine/configs/${f}")
  endif()
  file(SHA256 ${installed} got)
  file(SHA256 ${SOURCE_DIR}/configs/${f} want)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "installed ${DATA_DIR}/vitrine/configs/${f} differs from configs/${f}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                        -DCMAKE_CXX_COMPILER=${CONSUMER_CXX}
                        "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_LINK_FLAGS}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc OR NOT out MATCHES "grad 2 4 6")
  message(FATAL_ERROR "the consumer printed '${out}' (exit ${rc}), expected 'grad 2 4 6'")
endif()
message(STATUS "installed Vitrine works: ${out}")
# The training library: an event file written through the installed vitrine::train.
execute_process(COMMAND ${WORK_DIR}/build/train_events ${WORK_DIR} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "crc32c e3069283, event file of [0-9]+ bytes")
  message(FATAL_ERROR "train_events printed '${out}${err}' (exit ${rc})")
endif()
message(STATUS "vitrine::train: ${out}")
# The CNN: built against vitrine::explain, trained on Fashion-MNIST (when installed), explained.
set(fmnist /usr/share/datasets/fashion-mnist)
if(EXISTS ${fmnist}/t10k-images-idx3-ubyte.gz)
  execute_process(COMMAND ${WORK_DIR}/build/cnn ${fmnist} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(rc OR NOT out MATCHES "saliency: map 28x28" OR NOT out MATCHES "integrated-gradients: map 28x28"
     OR NOT out MATCHES "gradcam: map 28x28")
    message(FATAL_ERROR "the CNN consumer printed '${out}${err}' (exit ${rc})")
  endif()
  message(STATUS "the CNN consumer:\n${out}")
endif()
