#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's test command; .ci/run calls it): first the
# planning half alone without LibTorch (scripts/test_torch_free.sh, build-notorch/), then the
# whole project (build/), less the tests labelled torch_free: those are the very tests the first
# half ran (cmake/pipetrain.cmake), built from the same sources. Extra arguments go to ctest,
# e.g. scripts/test.sh -L unit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test_torch_free.sh "$@"
bash scripts/build.sh
cd build
ctest --output-on-failure -j 2 -LE torch_free "$@"
