#!/usr/bin/env bash
# Installs the Debian packages pipetrain needs; idempotent and quiet when nothing is missing.
#   scripts/setup.sh                 the default set below
#   scripts/setup.sh --only P...     just packages P... (scripts/fuzz.sh: clang, libFuzzer)
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config
      libtorch-dev libgloo-dev nlohmann-json3-dev libcli11-dev
      googletest libgtest-dev zlib1g-dev dataset-fashion-mnist fortunes
      iproute2 openmpi-bin
      # GNU time: a test reads a process's peak RSS from the OS through it (tests/python).
      time
      # scripts/testbed.sh --delay where the kernel has no netem: an NFQUEUE rule and testbed_delay.
      iptables libnetfilter-queue-dev
      # pipetrain export and the import tests run the user's side: PyTorch and torchvision for Python.
      python3-torch python3-torchvision
      # Debian's LibTorch calls libblas.so.3; without this it is the reference BLAS and the
      # dense layers run ~3x slower. The pthread build, not the serial one: the serial build is
      # not safe to call from several threads at once (worker threads got wrong results), the
      # pthread build is; model::use_one_compute_thread() keeps it to one thread per caller.
      libopenblas0-pthread
      # pipetrain-torch allocates through tcmalloc (src/core/host_allocator.h): glibc's arenas held
      # a 2048-wide MLP's 4 worker threads 240 MiB over what tcmalloc holds, a quarter of the peak.
      libtcmalloc-minimal4)
if [ "${1:-}" = "--only" ]; then
  shift
  pkgs=("$@")
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
