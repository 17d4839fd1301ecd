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

# pt_test(NAME LABEL [TORCH_PARTS] SOURCES... [LIBS ...]): a GoogleTest executable registered
# with CTest. A test the torch-free build builds too (scripts/test_torch_free.sh) is also labelled
# torch_free: scripts/test.sh runs it there and leaves it out of the full build's run, where the
# same code would run a second time (about 110 s of the suite on 2 cores). A folder sets
# PT_TORCH_HALF where its LibTorch-only tests begin; TORCH_PARTS marks a test that the LibTorch
# build compiles with more in it.
function(pt_test name label)
  cmake_parse_arguments(T "TORCH_PARTS" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_BINARY_DIR}/generated ${PROJECT_SOURCE_DIR})
  # A fresh build has no ctest timings yet: the slow tests (minutes) start first, so that the
  # rest fill the other slot beside them (scripts/test.sh runs -j 2).
  set(cost 1)
  if(label STREQUAL "slow")
    set(cost 300)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS ${label} COST ${cost} DISCOVERY_TIMEOUT 60)
  if(NOT PT_TORCH_HALF AND NOT T_TORCH_PARTS)
    # The second label is set by a file ctest reads after the discovered tests (whose names are
    # in ${name}_TESTS): a list does not pass through the discovery's PROPERTIES.
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_torch_free.cmake)
    file(WRITE ${labels_file} "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${label};torch_free\")\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
endfunction()
include(GoogleTest)

# Paths for tests and benchmarks in a generated header rather than -D flags, so every
# LibTorch target compiles with identical flags and can share one precompiled header.
configure_file(${CMAKE_CURRENT_LIST_DIR}/pt_paths.h.in ${PROJECT_BINARY_DIR}/generated/pt_paths.h)
