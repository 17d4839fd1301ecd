#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan, no LibTorch) into build-fuzz/ and
# runs each one after the other for SECONDS_PER_TARGET (default 60). Prints per target the
# executions and whether it crashed; exits non-zero when any target crashed or failed to run.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      e.g. scripts/fuzz.sh 150
# Not part of CI. Crash inputs are kept in build-fuzz/crashes/<target>/; inputs that found
# new coverage go to build-fuzz/corpus/<target>/ (copy the good ones to fuzz/corpus/ by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true

# What the fuzz build needs (no LibTorch); installed once, quietly.
bash scripts/setup.sh --only clang-14 libfuzzer-14-dev libclang-rt-14-dev cmake ninja-build \
     nlohmann-json3-dev zlib1g-dev

cmake -G Ninja -S . -B build-fuzz -DPT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
mkdir -p build-fuzz/logs
ninja -C build-fuzz -j "${PT_JOBS:-1}" >build-fuzz/logs/build.log 2>&1 || { tail -40 build-fuzz/logs/build.log; exit 1; }

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for exe in build-fuzz/fuzz/*_fuzz; do targets+=("$(basename "$exe" _fuzz)"); done
fi
# Targets that run a fixed number of executions instead of SECONDS_PER_TARGET: the
# checkpoint layer-file reader reads files passed between people and machines (issue 17).
declare -A runs=([layer_file]=1000000)
# Extra read-only seeds found at run time (not copied into the repository).
declare -A extra=([profile]="$PWD/../shared/data/pipedream-profiles")

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
failed=0
printf '%-12s %12s %8s  %s\n' target executions seconds result
for t in "${targets[@]}"; do
  exe="build-fuzz/fuzz/${t}_fuzz"
  [ -x "$exe" ] || { echo "fuzz: no target '$t' ($exe)" >&2; failed=1; continue; }
  work="build-fuzz/corpus/$t" crashes="build-fuzz/crashes/$t" log="build-fuzz/logs/$t.log"
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  dirs=("$work" "fuzz/corpus/$t")
  [ -n "${extra[$t]:-}" ] && [ -d "${extra[$t]}" ] && dirs+=("${extra[$t]}")
  # New inputs go to the first directory ($work), never into the checked-in seeds.
  # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: 2 GB is an allocation bug.
  rc=0 start=$SECONDS
  budget=(-max_total_time="$seconds")
  [ -n "${runs[$t]:-}" ] && budget=(-runs="${runs[$t]}")
  "$exe" "${dirs[@]}" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 \
         -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  ran=$((SECONDS - start))
  if [ "$rc" -eq 0 ]; then result="ok, no crash"; else result="CRASHED (exit $rc; see $log, $crashes/)"; failed=1; fi
  printf '%-12s %12s %8s  %s\n' "$t" "${execs:-?}" "$ran" "$result"
done
exit "$failed"
