#!/usr/bin/env bash
# What staleness costs in steps (issue 69): the time-to-accuracy objective weighs an asynchronous
# configuration's time per sample by the steps it takes to the same accuracy, by k, the most
# updates a stage's weights lag (referee::kMeasuredStalenessSteps). This measures them:
# mnist-cnn on Fashion-MNIST (batch 64, the CLI's lr, momentum and warm-up), test accuracy every
# 25 steps, and the steps until the best so far first reaches each target under 1f1b
# (synchronous: one worker's gradients, k = 0) and under pipedream on S stages (k = S - 1), seeds
# 1..SEEDS; per k the median over seeds and targets of the steps over 1f1b's. Steps do not
# depend on the machine's speed: the runs are deterministic.
#   bench/staleness.sh [SEEDS] [TARGETS, comma-separated %]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}
targets=${2:-80,82,84,86}
mkdir -p out/bench/staleness
run() {  # NAME ARGS...: trains, its test accuracy every 25 steps in out/bench/staleness/NAME.csv
  local name=$1; shift
  build/pipetrain train --model mnist-cnn --epochs 2 --eval-every 25 --quiet \
    --metrics "out/bench/staleness/$name.csv" "$@" >"out/bench/staleness/$name.log" 2>&1
}
# ANALYSE_ONLY=1: the tables again from the runs' files, without training.
for ((s = 1; s <= seeds; s++)); do
  [ -n "${ANALYSE_ONLY:-}" ] && break
  run "1f1b-4-seed$s" --seed "$s" --stages 4 --schedule 1f1b --microbatches 4
  run "pipedream-2-seed$s" --seed "$s" --stages 2 --schedule pipedream
  run "pipedream-4-seed$s" --seed "$s" --stages 4 --schedule pipedream
done
python3 - "$seeds" "$targets" <<'PY' | tee out/bench/staleness.txt
import csv, statistics, sys
seeds, targets = int(sys.argv[1]), [float(t) for t in sys.argv[2].split(",")]

def curve(name):  # (step, best test accuracy so far, %): the envelope, so one noisy dip does not count
    best, out = 0.0, []
    for r in csv.DictReader(open(f"out/bench/staleness/{name}.csv")):
        if r["test_accuracy"] in ("", "-1"):
            continue
        best = max(best, 100 * float(r["test_accuracy"]))
        out.append((int(r["step"]), best))
    return out

def steps_to(c, target):
    return next((step for step, acc in c if acc >= target), None)

print(f"== steps until the best test accuracy so far reaches each target: mnist-cnn on Fashion-MNIST, batch 64, "
      f"evaluated every 25 steps, seeds 1-{seeds} ==")
print(f"{'seed':>4} {'target':>7} {'1f1b (k=0)':>11} {'pipedream 2 (k=1)':>18} {'pipedream 4 (k=3)':>18}")
costs, ratios = {1: [], 3: []}, {1: [], 3: []}
for s in range(1, seeds + 1):
    sync, pd2, pd4 = (curve(f"{n}-seed{s}") for n in ("1f1b-4", "pipedream-2", "pipedream-4"))
    for t in targets:
        row = [steps_to(c, t) for c in (sync, pd2, pd4)]
        print(f"{s:>4} {t:>6.0f}% " + " ".join(f"{('-' if x is None else x):>{w}}" for x, w in zip(row, (11, 18, 18))))
        if row[0]:
            for steps, k in ((row[1], 1), (row[2], 3)):
                if steps:
                    costs[k].append((steps / row[0] - 1) / k)
                    ratios[k].append(steps / row[0])
for k, c in costs.items():
    if c:
        print(f"k = {k}: steps over 1f1b's, median {statistics.median(ratios[k]):.3f}; extra steps per update of "
              f"staleness, median {statistics.median(c):.3f} (over {len(c)} seeds and targets)")
PY
