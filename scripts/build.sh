#!/usr/bin/env bash
# Configures and builds pipetrain into build/ (Release, Ninja, ccache). Calls setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Paths relative to the checkout in ccache's keys: the planning half's objects compiled for
# build-notorch/ (scripts/test_torch_free.sh, run first by scripts/test.sh) are reused here.
export CCACHE_BASEDIR="$PWD"
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
# Two cores here; LibTorch translation units need ~1 GB each, so -j2 is safe.
ninja -C build -j "${PT_JOBS:-2}" "$@"
