#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's test command; .ci/run calls it).
# Extra arguments go to ctest, e.g. scripts/test.sh -L unit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j 2 "$@"
