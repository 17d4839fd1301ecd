#!/usr/bin/env bash
# The planning half without LibTorch (docs/design.md): configures with -DPT_WITH_TORCH=OFF into
# build-notorch/ (no find_package(Torch), no gloo), builds core, profile's format, plan, schedule,
# sim, metrics, the pipetrain front end and their tests, fails when any object it compiled
# included a LibTorch, c10 or gloo header (Debian installs some of them on the default include
# path, so a compile alone would not notice), and runs the tests. scripts/test.sh calls it.
# Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --only build-essential cmake ninja-build ccache pkg-config nlohmann-json3-dev libcli11-dev \
  googletest libgtest-dev zlib1g-dev
export CCACHE_BASEDIR="$PWD"  # objects shared with build/ (scripts/build.sh)
cmake -G Ninja -S . -B build-notorch -DCMAKE_BUILD_TYPE=Release -DPT_WITH_TORCH=OFF >/dev/null
ninja -C build-notorch -j "${PT_JOBS:-2}"
leaks=$(ninja -C build-notorch -t deps | grep -E '/(torch|ATen|c10|caffe2|gloo)/' | sort -u | head -20 || true)
if [ -n "$leaks" ]; then
  echo "test_torch_free: the torch-free build included LibTorch headers:" >&2
  echo "$leaks" >&2
  exit 1
fi
cd build-notorch
ctest --output-on-failure -j 2 "$@"
