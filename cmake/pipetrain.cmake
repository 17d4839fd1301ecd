# Helpers shared by every step's CMakeLists.

# pt_torch_target(TARGET): LibTorch include/link plus the shared precompiled header, so each
# LibTorch translation unit does not re-parse torch/torch.h (about 30 s each on this machine).
function(pt_torch_target target)
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_compile_definitions(${target} PUBLIC USE_C10D_GLOO)
  if(TARGET pt_torch_pch)
    target_precompile_headers(${target} REUSE_FROM pt_torch_pch)
  endif()
endfunction()

# pt_test(NAME LABEL [TORCH_PARTS] [SERIAL] [COST SECONDS] SOURCES... [LIBS ...]): a GoogleTest executable registered
# with CTest (cmake/gtest_suites.cmake): one test per suite where a process starts in
# milliseconds; in the LibTorch half, one test NAME for all of its suites, since each process
# pays 0.8-1 s of CPU loading LibTorch and its 288 libraries (a process per test once paid a
# sixth of the suite's CPU; a process per suite, 19 loads, 17 s of CPU). A test the
# torch-free build builds too (scripts/test_torch_free.sh) is also labelled torch_free:
# scripts/test.sh runs it there and leaves it out of the full build's run, where the same code
# would run a second time. A folder sets PT_TORCH_HALF where its LibTorch-only tests begin;
# TORCH_PARTS marks a test that the LibTorch build compiles with more in it.
function(pt_test name label)
  # SERIAL: the suites measure wall time against the simulator, which needs an idle CPU; CTest
  # runs them when no other test runs (under -j 2 beside the Accuracy trainings, 2bw's emulated
  # minibatch measured 704 ms where it takes 366 alone and the simulator says 360).
  cmake_parse_arguments(T "TORCH_PARTS;SERIAL" "COST" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_BINARY_DIR}/generated ${PROJECT_SOURCE_DIR})
  set(labels ${label})
  if(NOT PT_TORCH_HALF AND NOT T_TORCH_PARTS)
    list(APPEND labels torch_free)
  endif()
  set(group "")
  if(PT_TORCH_HALF AND NOT T_TORCH_PARTS)
    set(group ${name})
  endif()
  # A fresh build has no ctest timings yet: the slow tests (minutes) start first, then the
  # integration suites (up to a minute each), so that the quick unit suites fill the slots at the
  # end (scripts/test.sh runs -j 2). In that order a clean clone's run ended with the integration
  # suites, TrainCli's minute alone on one core: COST puts the longest integration tests first.
  set(cost 1)
  if(T_COST)
    set(cost ${T_COST})  # about its seconds here, where they stand out
  elseif(label STREQUAL "slow")
    set(cost 300)
  elseif(label STREQUAL "integration")
    set(cost 30)
  endif()
  string(REPLACE ";" "|" labels "${labels}")
  set(suites ${CMAKE_CURRENT_BINARY_DIR}/${name}_suites.cmake)
  add_custom_command(TARGET ${name} POST_BUILD BYPRODUCTS ${suites}
    COMMAND ${CMAKE_COMMAND} -D EXE=$<TARGET_FILE:${name}> -D OUT=${suites} -D LABELS=${labels} -D COST=${cost}
            -D SERIAL=$<BOOL:${T_SERIAL}> -D GROUP=${group}
            -D DIR=${CMAKE_CURRENT_BINARY_DIR} -D CLAIMS=${PROJECT_BINARY_DIR}/test_suites -P ${PT_CMAKE_DIR}/gtest_suites.cmake VERBATIM)
  # Until the executable is built its suites are unknown: a test in their place says so.
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_include.cmake)
  file(WRITE ${include_file} "if(EXISTS [==[${suites}]==])\n  include([==[${suites}]==])\nelse()\n"
       "  add_test(${name}_NOT_BUILT ${name}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
set(PT_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

# Paths for tests and benchmarks in a generated header rather than -D flags, so every
# LibTorch target compiles with identical flags and can share one precompiled header.
configure_file(${CMAKE_CURRENT_LIST_DIR}/pt_paths.h.in ${PROJECT_BINARY_DIR}/generated/pt_paths.h)

# pt_host_allocator(TARGET): an executable that trains allocates through tcmalloc
# (src/core/host_allocator.h). Linked by the runtime package's soname, so that no -dev package is
# needed, and kept though the code calls none of it: its malloc replaces glibc's.
function(pt_host_allocator target)
  find_library(PT_TCMALLOC NAMES tcmalloc_minimal libtcmalloc_minimal.so.4 REQUIRED)
  target_link_libraries(${target} PRIVATE "-Wl,--push-state,--no-as-needed" ${PT_TCMALLOC} "-Wl,--pop-state")
endfunction()
