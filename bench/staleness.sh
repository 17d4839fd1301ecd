#!/usr/bin/env bash
# What staleness costs in steps (issue 69): the time-to-accuracy objective weighs an asynchronous
# configuration's time per sample by 1 + c k, k the most updates a stage's weights lag. This
# measures c: mnist-cnn on Fashion-MNIST (batch 64, the CLI's lr, momentum and warm-up), test
# accuracy every 25 steps, and the steps until it first reaches TARGET% under 1f1b (synchronous:
# one worker's gradients, k = 0) and under pipedream on S stages (k = S - 1), seeds 1..SEEDS.
# c = (steps under pipedream / steps under 1f1b - 1) / k, per seed, then the median. Steps do
# not depend on the machine's speed: the runs are deterministic.
#   bench/staleness.sh [SEEDS] [TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}
target=${2:-85}
mkdir -p out/bench/staleness
steps_to() {  # NAME ARGS...: the first step whose test accuracy reaches the target ("-": never)
  local csv=out/bench/staleness/$1.csv; shift
  build/pipetrain train --model mnist-cnn --epochs 2 --eval-every 25 --quiet --metrics "$csv" "$@" >/dev/null 2>&1
  python3 - "$csv" "$target" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
hit = [int(r["step"]) for r in rows if r.get("test_accuracy") not in (None, "", "-1") and float(r["test_accuracy"]) * 100 >= float(sys.argv[2])]
print(min(hit) if hit else "-")
PY
}
rows=()
for ((s = 1; s <= seeds; s++)); do
  sync=$(steps_to "1f1b-4-seed$s" --seed "$s" --stages 4 --schedule 1f1b --microbatches 4)
  pd2=$(steps_to "pipedream-2-seed$s" --seed "$s" --stages 2 --schedule pipedream)
  pd4=$(steps_to "pipedream-4-seed$s" --seed "$s" --stages 4 --schedule pipedream)
  rows+=("$s $sync $pd2 $pd4")
done
python3 - "$target" "${rows[@]}" <<'PY' | tee out/bench/staleness.txt
import statistics, sys
target, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
print(f"== steps until test accuracy >= {target}%: mnist-cnn on Fashion-MNIST, batch 64, evaluated every 25 steps ==")
print(f"{'seed':>4} {'1f1b (k=0)':>11} {'pipedream 2 (k=1)':>18} {'pipedream 4 (k=3)':>18}")
cs = []
for s, sync, pd2, pd4 in rows:
    print(f"{s:>4} {sync:>11} {pd2:>18} {pd4:>18}")
    if sync == "-":
        continue
    for steps, k in ((pd2, 1), (pd4, 3)):
        if steps != "-":
            cs.append((int(steps) / int(sync) - 1) / k)
if cs:
    print(f"extra steps per update of staleness, c = (steps / 1f1b's - 1) / k: median {statistics.median(cs):.3f} "
          f"(each: {', '.join(f'{c:.3f}' for c in cs)})")
PY
