#!/usr/bin/env bash
# Asynchronous accuracy (issue 31): mnist-cnn on Fashion-MNIST, 2 epochs at the CLI's defaults,
# one worker against pipedream on 4 stages with the paper's weight stashing alone and with
# pipetrain's defaults (weight prediction, stale stages' warm-up), and 2bw on 4 stages as the
# paper runs it (its delayed version, no warm-up) and with pipetrain's defaults (each minibatch's
# weights predicted, the stages' warm-up); seeds 1..SEEDS, then means.
# The runs are deterministic; about 35 s each on 2 cores.
#   bench/async_accuracy.sh [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}
mkdir -p out/bench
acc() {  # test accuracy (%) of one run
  build/pipetrain train --model mnist-cnn --epochs 2 --quiet "$@" 2>&1 | sed -n 's/^test accuracy \([0-9.]*\)%$/\1/p'
}
rows=()
for ((s = 1; s <= seeds; s++)); do
  one=$(acc --seed "$s")
  plain=$(acc --seed "$s" --stages 4 --schedule pipedream --no-weight-prediction --stale-warmup 0)
  ours=$(acc --seed "$s" --stages 4 --schedule pipedream)
  bw_plain=$(acc --seed "$s" --stages 4 --schedule 2bw --no-weight-prediction --stale-warmup 0)
  bw=$(acc --seed "$s" --stages 4 --schedule 2bw)
  rows+=("$s $one $plain $ours $bw_plain $bw")
done
python3 - "${rows[@]}" <<'PY' | tee out/bench/async_accuracy.txt
import statistics, sys
rows = [r.split() for r in sys.argv[1:]]
print("== test accuracy after 2 epochs, mnist-cnn on Fashion-MNIST, batch 64, lr 0.02, momentum 0.9 ==")
print(f"{'seed':>4} {'one worker':>11} {'pd4 stashing':>13} {'pd4 default':>12} {'2bw4 paper':>16} {'2bw4 default':>13}")
for s, one, plain, ours, bw_plain, bw in rows:
    print(f"{s:>4} {float(one):10.2f}% {float(plain):12.2f}% {float(ours):11.2f}% {float(bw_plain):15.2f}% "
          f"{float(bw):12.2f}%")
m = [statistics.mean(float(r[i]) for r in rows) for i in (1, 2, 3, 4, 5)]
print(f"mean {m[0]:10.2f}% {m[1]:12.2f}% {m[2]:11.2f}% {m[3]:15.2f}% {m[4]:12.2f}%")
print(f"pipedream on 4 stages, points below one worker: stashing alone {m[0] - m[1]:.2f}, "
      f"with weight prediction and the stale stages' warm-up {m[0] - m[2]:.2f}")
print(f"2bw on 4 stages, points below one worker: the paper's {m[0] - m[3]:.2f}, with weight prediction and the "
      f"stages' warm-up {m[0] - m[4]:.2f}")
PY
