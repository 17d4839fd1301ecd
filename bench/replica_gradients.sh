#!/usr/bin/env bash
# pipedream's replicated stages, their round's gradients averaged (the default, PipeDream's and
# DDP's) or summed (--replica-gradients sum): mnist-cnn on Fashion-MNIST, 2 epochs at the CLI's
# defaults (batch 64, lr 0.02, momentum 0.9), threads. Plans: every stage replicated (data
# parallelism as pipedream runs it: each replica a whole minibatch) on 4 and 8 workers, and a
# replicated and an unreplicated stage both ways round (1-3, 3-1: conv1-conv2 | fc1-fc3); one
# worker beside them; seeds 1..SEEDS. The runs are deterministic; 20-40 s each on 2 cores.
#   bench/replica_gradients.sh [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-2}
plans=out/bench/replica_plans
mkdir -p "$plans"
python3 - "$plans" <<'PY'
import json, sys
for name, shape in {"1-3": (1, 3), "3-1": (3, 1)}.items():
    first = list(range(shape[0]))
    second = list(range(shape[0], shape[0] + shape[1]))
    plan = {"format": "pipetrain.plan/1", "model": "mnist-cnn", "batch_size": 64, "schedule": "pipedream",
            "microbatches": 1, "workers": sum(shape),
            "stages": [{"layers": [0, 1], "replicas": shape[0], "workers": first},
                       {"layers": [2, 3, 4], "replicas": shape[1], "workers": second}]}
    json.dump(plan, open(f"{sys.argv[1]}/{name}.json", "w"), indent=1)
PY
acc() {  # test accuracy (%) of one run
  build/pipetrain train --model mnist-cnn --epochs 2 --quiet "$@" 2>&1 | sed -n 's/^test accuracy \([0-9.]*\)%$/\1/p'
}
rows=()
for ((s = 1; s <= seeds; s++)); do
  row="$s $(acc --seed "$s")"
  for plan in "--workers 4" "--workers 8" "--plan $plans/1-3.json" "--plan $plans/3-1.json"; do
    for reduce in mean sum; do
      # shellcheck disable=SC2086
      row+=" $(acc --seed "$s" $plan --schedule pipedream --replica-gradients "$reduce")"
    done
  done
  rows+=("$row")
done
python3 - "${rows[@]}" <<'PY' | tee out/bench/replica_gradients.txt
import statistics, sys
rows = [r.split() for r in sys.argv[1:]]
heads = ["one worker", "4 mean", "4 sum", "8 mean", "8 sum", "1-3 mean", "1-3 sum", "3-1 mean", "3-1 sum"]
print("== test accuracy after 2 epochs, mnist-cnn on Fashion-MNIST, batch 64 a replica, lr 0.02, momentum 0.9, "
      "pipedream; a replicated stage's round steps with its gradients' mean or sum ==")
print(f"{'seed':>4} " + " ".join(f"{h:>10}" for h in heads))
for r in rows:
    print(f"{r[0]:>4} " + " ".join(f"{float(v):9.2f}%" for v in r[1:]))
means = [statistics.mean(float(r[i]) for r in rows) for i in range(1, len(heads) + 1)]
print(f"{'mean':>4} " + " ".join(f"{m:9.2f}%" for m in means))
PY
