# The library's symbol table for tests/layout/links_test.cpp: `nm -C` over every object of
# the library (the list CMake generates, one path a line) into one file. Run at build time
# (cmake -P), so the test reads a file and needs no nm of its own, also when cross-compiled.
# Arguments: -DNM=nm -DOBJECTS=list-file -DOUTPUT=table-file
file(STRINGS "${OBJECTS}" objects)
execute_process(COMMAND "${NM}" -C ${objects} OUTPUT_FILE "${OUTPUT}.tmp" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "symbol_table.cmake: ${NM} failed (${rc})")
endif()
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
