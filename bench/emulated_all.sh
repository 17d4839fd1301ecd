#!/usr/bin/env bash
# Every emulated-cluster figure of docs/emulation.md in one run (root; build/pipetrain built;
# about 15 minutes). Each block prints its own table; outputs under out/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
b=bench/emulated_cluster.sh
$b --model vgg16 --cluster 4x4 --uplink per-worker --shape send
$b --model vgg16 --cluster 4x4 --uplink per-worker --shape both --schedules "pipedream dp"
$b --model vgg16 --cluster 4x4 --uplink shared --shape both --schedules "pipedream dp"
$b --model vgg16 --cluster flat4 --schedules "pipedream dp 1f1b"
$b --model vgg16 --cluster flat8 --schedules "pipedream dp 1f1b"
$b --model resnet50 --cluster flat4 --schedules "pipedream dp 1f1b"
for m in gnmt16 awd-lm; do $b --model $m --cluster flat4 --schedules "pipedream dp"; done

# Runtime efficiency: a balanced 8-stage pipeline on threads against the simulator (free links).
dir=out/bench/efficiency
mkdir -p "$dir"
python3 - "$dir/balanced8.json" <<'PY'
import json, sys
layers = [{"name": f"l{i}", "forward_ms": 10, "backward_ms": 20, "activation_bytes": 1 << 20,
           "parameter_bytes": 4 << 20} for i in range(8)]
json.dump({"format": "pipetrain.profile/1", "model": "balanced8", "batch_size": 64, "device": "emulated",
           "layers": layers}, open(sys.argv[1], "w"))
PY
build/pipetrain simulate --profile "$dir/balanced8.json" --workers 8 --bandwidth-gbps 1000 --schedule pipedream \
  --minibatches 80 --save-trace "$dir/sim.json" >/dev/null 2>&1
sim=$(python3 -c "import json; t=json.load(open('$dir/sim.json')); e=[x for w in t['workers'] for x in w]; print(max(x['end_ms'] for x in e)-min(x['start_ms'] for x in e))")
echo "== runtime efficiency: balanced 8-stage pipedream on threads, 80 minibatches (emulated) =="
for B in 0.001 1; do
  line=$(build/pipetrain train --compute emulated --profile "$dir/balanced8.json" --byte-scale $B --stages 8 \
           --schedule pipedream --steps 80 --quiet 2>&1 | grep '] steps')
  secs=$(sed -n 's/.*steps [0-9]*, \([0-9.]*\) s,.*/\1/p' <<<"$line")
  awk -v s="$secs" -v sim="$sim" -v b="$B" 'BEGIN { printf "bytes x %s: %.0f ms, simulated %.0f ms: %.1f%% of the simulated rate; %.1f%% of the ideal 1/stage time\n", b, s * 1000, sim, sim / (s * 1000) * 100, 80 * 30 / (s * 1000) * 100 }'
done
