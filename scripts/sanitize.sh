#!/usr/bin/env bash
# Builds the whole test suite with AddressSanitizer + UndefinedBehaviorSanitizer (gcc) into
# build-asan/ and runs it. Not part of CI: the instrumented build takes long on 2 cores.
#   scripts/sanitize.sh            # build, then ctest -L unit and -L integration
#   scripts/sanitize.sh -R test_idx   # extra arguments go to ctest
# LibTorch, gloo and OpenMPI come from Debian uninstrumented; only our code is checked.
# Reports from their code are silenced by the narrow suppression files in scripts/sanitizers/,
# each entry with the reason; every report in our code fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
supp="$PWD/scripts/sanitizers"
# halt_on_error + exitcode: a report fails the test that triggered it, under ctest too.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=23:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
# -O1 -g1: line numbers in reports at a fraction of -O3's compile time; no -DNDEBUG so our
# assert()s stay on. -fno-sanitize-recover makes every UBSan finding fatal.
cmake -G Ninja -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DPT_SANITIZE=ON -DPT_BENCH=OFF >/dev/null
# gtest_discover_tests runs each test binary at build time, so the options above matter here too.
ninja -C build-asan -j "${PT_JOBS:-1}"
cd build-asan
# The `slow` label (long training runs) is left out: instrumented it takes too long here.
ctest --output-on-failure -j 1 -LE slow "$@"
