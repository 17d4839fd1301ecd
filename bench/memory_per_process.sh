#!/usr/bin/env bash
# The memory model against the OS (docs/results.md, "A worker holds only its stage"): for each
# schedule, a gloo job of 4 processes trains the zoo's mlp (8 dense layers of 4096 x 4096, 134M
# parameters) on 4 stages, and each process's peak RSS as the OS counts it (VmHWM, printed by
# train) is put beside the memory model's: its tensors (schedule/memory.h, from the profile) plus
# the data and what `pipetrain calibrate` measured a worker process to hold besides
# (process_bytes). Prints a markdown table; build/pipetrain built.
#   bench/memory_per_process.sh [--schedules "1f1b gpipe pipedream 2bw zb-v"] [--steps 8]
set -euo pipefail
cd "$(dirname "$0")/.."
schedules="1f1b gpipe pipedream 2bw zb-v" steps=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --schedules) schedules=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "memory_per_process: unknown option '$1'" >&2; exit 2 ;;
  esac
done
bin=build/pipetrain
out=out/bench/memory_per_process
mkdir -p "$out"
model=(--model mlp --width 4 --depth 8 --data synthetic --synthetic-samples 64)
"$bin" calibrate --workers 4 --transport gloo -o "$out/cluster.json" 2> "$out/calibrate.log"
"$bin" profile "${model[@]}" --batch-size 8 -o "$out/profile.json" 2> "$out/profile.log"
echo "| schedule | worker | modelled peak RSS | measured peak RSS | error | modelled tensors | measured tensors |"
echo "|---|---|---|---|---|---|---|"
for s in $schedules; do
  "$bin" train "${model[@]}" --batch-size 8 --steps "$steps" --quiet --stages 4 --schedule "$s" --microbatches 2 \
    --transport gloo --profile "$out/profile.json" --cluster "$out/cluster.json" > "$out/$s.txt" 2>&1 ||
    { echo "| $s | (train failed: $(tail -1 "$out/$s.txt")) ||||||"; continue; }
  python3 - "$out/$s.txt" "$s" <<'EOF'
import re, sys
text, s = open(sys.argv[1]).read(), sys.argv[2]
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def line(head):
    l = next(l for l in text.splitlines() if l.startswith(head))
    # Each worker's figure, not what follows a ';' (the shared memory the transfers mapped, w0 ... again).
    figures = l.split(":", 1)[1].split(";")[0]
    return [float(v) * units[u] for v, u in re.findall(r"w\d+ ([0-9.]+) (B|KiB|MiB|GiB|TiB)", figures)]
modelled, measured = line("peak RSS per worker process (modelled)"), line("peak RSS per worker process (measured")
mt, at = line("peak tensor memory per worker (modelled)"), line("peak tensor memory per worker (measured")
for w in range(len(measured)):
    print(f"| {s} | {w} | {modelled[w] / 2**20:.1f} MiB | {measured[w] / 2**20:.1f} MiB | "
          f"{100 * (modelled[w] / measured[w] - 1):+.1f}% | {mt[w] / 2**20:.1f} MiB | {at[w] / 2**20:.1f} MiB |")
EOF
done
echo
echo "process_bytes (calibrate, gloo): $(python3 -c "import json; print(json.load(open('$out/cluster.json'))['process_bytes'])") bytes"
