#!/usr/bin/env bash
# Runtime efficiency (emulated): a balanced 8-stage pipedream pipeline on threads, measured
# against the simulator and against the ideal rate of one minibatch per stage time, with small
# and with large weights per stage. build/pipetrain built; about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf out/bench/efficiency
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
# The simulator replays each run with the profile measured of the emulated model at that byte
# scale (`pipetrain profile --compute emulated`): its waits, and the runtime's own work on this
# machine, gradient accumulation in the backward and the optimizer step with its stash copy.
sim_ms() {  # makespan of a simulator trace
  python3 -c "import json; t=json.load(open('$1')); e=[x for w in t['workers'] for x in w]; print(max(x['end_ms'] for x in e)-min(x['start_ms'] for x in e))"
}
build/pipetrain simulate --profile "$dir/balanced8.json" --workers 8 --bandwidth-gbps 1000 --schedule pipedream \
  --minibatches 80 --save-trace "$dir/sim-unmeasured.json" >/dev/null 2>&1
plain=$(sim_ms "$dir/sim-unmeasured.json")
echo "== runtime efficiency: balanced 8-stage pipedream on threads, 80 minibatches (emulated) =="
echo "simulated without the runtime's own work: $(printf %.0f "$plain") ms"
echo "byte_scale,weights_per_stage_bytes,measured_ms,sim_ms,pct_of_sim,pct_of_ideal,sim_unmeasured_ms" >"$dir/summary.csv"
for B in 0.001 1; do
  build/pipetrain profile --compute emulated --profile "$dir/balanced8.json" --byte-scale $B --repeats 5 \
    -o "$dir/measured-profile-$B.json" >/dev/null 2>&1
  build/pipetrain simulate --profile "$dir/measured-profile-$B.json" --workers 8 --bandwidth-gbps 1000 \
    --schedule pipedream --minibatches 80 --save-trace "$dir/sim-$B.json" >/dev/null 2>&1
  sim=$(sim_ms "$dir/sim-$B.json")
  line=$(build/pipetrain train --compute emulated --profile "$dir/balanced8.json" --byte-scale $B --stages 8 \
           --schedule pipedream --steps 80 --quiet --trace "$PWD/$dir/measured-$B.json" 2>&1 | grep '] steps')
  secs=$(sed -n 's/.*steps [0-9]*, \([0-9.]*\) s,.*/\1/p' <<<"$line")
  awk -v s="$secs" -v sim="$sim" -v b="$B" 'BEGIN { printf "bytes x %s: %.0f ms, simulated %.0f ms: %.1f%% of the simulated rate; %.1f%% of the ideal 1/stage time\n", b, s * 1000, sim, sim / (s * 1000) * 100, 80 * 30 / (s * 1000) * 100 }'
  awk -v s="$secs" -v sim="$sim" -v b="$B" -v plain="$plain" 'BEGIN { printf "%s,%.0f,%.1f,%.1f,%.1f,%.1f,%.1f\n", b, b * 4194304, s * 1000, sim, sim / (s * 1000) * 100, 80 * 30 / (s * 1000) * 100, plain }' >>"$dir/summary.csv"
done
build/pipetrain trace "$dir/measured-0.001.json" --svg "$dir/measured.svg" \
  --title "balanced 8-stage pipedream on threads, measured (emulated compute)" >/dev/null
