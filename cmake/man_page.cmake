# Writes OUTPUT (cnnbench.1) with `CLI man`: the man page made from the CLI's own options. A failed
# run leaves no half-written page.
execute_process(COMMAND ${CLI} man OUTPUT_FILE ${OUTPUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUTPUT}.tmp)
  message(FATAL_ERROR "${CLI} man failed: ${rc}")
endif()
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
