# Builds each upward-include probe (tests/CMakeLists.txt) and passes only when every one fails to
# compile because the higher part's header is not visible: the layering of lib/CMakeLists.txt is
# a build error to break, not a convention. Run by CTest as
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DPROBES="target:header;..." -P check_upward_includes.cmake
foreach(probe IN LISTS PROBES)
  string(REPLACE ":" ";" fields "${probe}")
  list(GET fields 0 target)
  list(GET fields 1 header)
  # A header that exists nowhere would fail for the wrong reason.
  file(GLOB exists ${SOURCE_DIR}/lib/*/include/cnnbench/${header} ${SOURCE_DIR}/lib/strategies/*/include/cnnbench/${header})
  if(NOT exists)
    message(FATAL_ERROR "${target}: no part has cnnbench/${header}; the probe tests nothing")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${target}
    RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT 300)
  string(REPLACE "." "\\." header_pattern "${header}")
  if(status EQUAL 0)
    message(FATAL_ERROR "${target}: including cnnbench/${header} compiled; the part sees a higher part's headers")
  elseif(NOT output MATCHES "cnnbench/${header_pattern}[': ]+(No such file or directory|file not found)")
    message(FATAL_ERROR "${target}: failed for another reason than the missing header:\n${output}")
  endif()
  message(STATUS "ok   ${target}: cnnbench/${header} is not visible there")
endforeach()
