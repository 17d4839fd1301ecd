# Run after a test executable is built (pt_test, pipetrain.cmake): lists its GoogleTest suites and
# writes one CTest test per suite, `SUITE` running `--gtest_filter=SUITE.*`, into OUT.
# Inputs: EXE, OUT, LABELS (a ;-list, passed with | between), COST, SERIAL (1: each suite runs
# alone, RUN_SERIAL), GROUP (a name: one test of that name runs all the suites, in one process),
# DIR (working directory),
# CLAIMS (a folder where each suite's executable is noted: CTest would run a suite name that two
# executables hold as two tests of one name).
execute_process(COMMAND "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}): ${listing}")
endif()
string(REPLACE "|" ";" LABELS "${LABELS}")
string(REPLACE "\n" ";" lines "${listing}")
set(text "")
foreach(line IN LISTS lines)
  # Suites start a line and end with a dot; their tests are indented under them.
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(REPLACE "/" "_" claim "${suite}")
    set(claim "${CLAIMS}/${claim}")
    if(EXISTS "${claim}")
      file(READ "${claim}" owner)
      if(NOT owner STREQUAL EXE AND EXISTS "${owner}")
        execute_process(COMMAND "${owner}" --gtest_list_tests OUTPUT_VARIABLE theirs TIMEOUT 60)
        string(FIND "\n${theirs}" "\n${suite}." at)
        if(at GREATER -1)
          message(FATAL_ERROR "GoogleTest suite ${suite} is in both ${owner} and ${EXE}: rename one")
        endif()
      endif()
    endif()
    file(WRITE "${claim}" "${EXE}")
    list(APPEND suites "${suite}")
  endif()
endforeach()
set(tests "")
if(GROUP)
  list(JOIN suites ".*:" filter)
  set(tests "${GROUP}")
  set(filter_of_${GROUP} "${filter}.*")
else()
  foreach(suite IN LISTS suites)
    list(APPEND tests "${suite}")
    set(filter_of_${suite} "${suite}.*")
  endforeach()
endif()
foreach(test IN LISTS tests)
  # One compute thread per worker, as pipetrain's front end sets for pipetrain-torch (main.cpp):
  # OpenBLAS would start and spin a thread per core in every test process.
  string(APPEND text "add_test([=[${test}]=] [==[${EXE}]==] [=[--gtest_filter=${filter_of_${test}}]=])\n"
         "set_tests_properties([=[${test}]=] PROPERTIES LABELS [=[${LABELS}]=] COST ${COST} "
         "WORKING_DIRECTORY [==[${DIR}]==] ENVIRONMENT OPENBLAS_NUM_THREADS=1)\n")
  if(SERIAL)
    string(APPEND text "set_tests_properties([=[${test}]=] PROPERTIES RUN_SERIAL TRUE)\n")
  endif()
endforeach()
file(WRITE "${OUT}" "${text}")
