#!/usr/bin/env bash
# Real CPU benchmark (not emulated): mnist-cnn on Fashion-MNIST, one worker against data
# parallelism and PipeDream with 2 workers (threads, one compute thread each, on this machine's
# 2 cores): throughput, and time to a test accuracy (default 88%), training time only
# (evaluations excluded; the pipelines drain at each one). build/pipetrain built.
#   bench/real_cpu.sh [--epochs 2] [--target 0.88] [--eval-every 200]
# Writes out/bench/real_cpu/<run>.csv (per-step metrics) and summary.csv (read by bench/report.py).
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=2 target=0.88 every=200
while [[ $# -gt 0 ]]; do
  case "$1" in
    --epochs) epochs=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --eval-every) every=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "real_cpu: unknown option '$1'" >&2; exit 2 ;;
  esac
done
out=out/bench/real_cpu
mkdir -p "$out"
# The recipe of the accuracy tests (docs/runtime.md): batch 32, SGD 0.02 with momentum 0.9, cosine.
common=(--model mnist-cnn --epochs "$epochs" --batch-size 32 --lr 0.02 --momentum 0.9 --lr-schedule cosine
        --warmup-steps 200 --eval-every "$every" --quiet)
runs=("single|" "dp-2|--schedule dp --workers 2 --microbatches 2" "pipedream-2|--schedule pipedream --stages 2")
echo "== real CPU: mnist-cnn on Fashion-MNIST, $epochs epochs, $(nproc) cores, threads transport =="
printf "%-12s %12s %10s %14s %12s\n" run samples/s "vs single" "s to $target" "final acc"
# The settings too: the report's caption reads them (it said "2 epochs" of any run).
echo "run,samples_per_s,seconds_to_target,final_accuracy,target,epochs,eval_every" >"$out/summary.csv"
base=""
for r in "${runs[@]}"; do
  name=${r%%|*} args=${r#*|}
  # shellcheck disable=SC2086
  # The base is the single worker's: where it failed, dp's rate was printed as "vs single".
  build/pipetrain train "${common[@]}" $args --metrics "$out/$name.csv" >"$out/$name.log" 2>&1 ||
    { echo "$name: failed (see $out/$name.log)"; [[ $name != single ]] || exit 1; continue; }
  read -r rate secs acc < <(python3 - "$out/$name.csv" "$target" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
hit = [r for r in rows if r["test_accuracy"] and float(r["test_accuracy"]) >= float(sys.argv[2])]
acc = [r for r in rows if r["test_accuracy"]]
last = rows[-1]
rate = int(last["step"]) * 32 / float(last["train_s"])
print("%.0f %s %.4f" % (rate, "%.1f" % float(hit[0]["train_s"]) if hit else "never", float(acc[-1]["test_accuracy"])))
PY
)
  [[ -n $base ]] || base=$rate
  printf "%-12s %12s %9.2fx %14s %11.2f%%\n" "$name" "$rate" "$(awk -v a="$rate" -v b="$base" 'BEGIN{print a/b}')" "$secs" \
    "$(awk -v a="$acc" 'BEGIN{print a*100}')"
  echo "$name,$rate,$secs,$acc,$target,$epochs,$every" >>"$out/summary.csv"
done
echo "(measured on this machine; per-step metrics in $out)"
# Throughput side by side over the same 300 minibatches, and the runtime's per-action overhead.
build/bench/bench_runtime_throughput 300 | tee "$out/runtime_throughput.txt"
