#!/usr/bin/env bash
# bf16 against fp32 on this CPU (issue 68): the same training with --precision fp32 and bf16,
# runs interleaved, REPEATS of each, medians of train's own samples/s (evaluation excluded).
# Rows: mnist-cnn on Fashion-MNIST on one worker and on 1F1B over 2 stages (threads, 4
# microbatches); the zoo's GPT on its text on one worker and on 2 stages over gloo.
#   bench/bf16.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
mkdir -p out/bench
rate() {  # samples/s of one run
  build/pipetrain train --quiet "$@" 2>&1 | sed -n 's/^steps [0-9]*, [0-9.]* s, \([0-9.]*\) samples\/s.*/\1/p'
}
declare -A cases=(
  [1 "mnist-cnn, 1 worker"]="--model mnist-cnn --steps 300"
  [2 "mnist-cnn, 1f1b 2 stages, threads"]="--model mnist-cnn --steps 300 --stages 2 --schedule 1f1b --microbatches 4"
  [3 "gpt, 1 worker"]="--model gpt --steps 40 --batch-size 16"
  [4 "gpt, 1f1b 2 stages, gloo"]="--model gpt --steps 40 --batch-size 16 --stages 2 --schedule 1f1b --microbatches 4 --transport gloo"
)
rows=()
while IFS= read -r name; do
  fp32=() bf16=()
  for ((r = 0; r < repeats; r++)); do
    fp32+=("$(rate ${cases[$name]} --precision fp32)")
    bf16+=("$(rate ${cases[$name]} --precision bf16)")
  done
  rows+=("${name#* }|${fp32[*]}|${bf16[*]}")
done < <(printf '%s\n' "${!cases[@]}" | sort)
python3 - "${rows[@]}" <<'PY' | tee out/bench/bf16.txt
import statistics, sys
print("== samples/s, --precision fp32 against bf16 (median of runs interleaved) ==")
print(f"{'run':<36} {'fp32':>8} {'bf16':>8} {'bf16/fp32':>10}")
for r in sys.argv[1:]:
    name, a, b = r.split("|")
    a = statistics.median(float(x) for x in a.split())
    b = statistics.median(float(x) for x in b.split())
    print(f"{name:<36} {a:8.0f} {b:8.0f} {b / a:9.2f}x")
PY
