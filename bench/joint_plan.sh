#!/usr/bin/env bash
# The joint search under memory caps (issue 13; src/referee/joint_search.h): for each model of
# data/profiles on 8 workers at 100 Gbit/s, `pipetrain plan --memory CAP` from no cap down to
# 5% above the least any configuration needs, then the chosen plan trained with emulated compute
# (`train --plan`: its schedule, microbatches and recomputation) to measure its time per sample
# and peak memory per worker. Prints a markdown table (docs/results.md, "Joint planning").
#
#   bench/joint_plan.sh [--steps N] [--models "vgg16 gpt-2048 ..."] [--threads]
#
# Emulated: compute waits the profile's V100-class times x S and tensors hold its bytes x B
# (S and B per model below); figures are converted back to the emulated cluster's scale. As root
# it runs on the testbed (scripts/testbed.sh: a gloo process per network namespace, links shaped
# to 100 Gbit/s x B / S); --threads (or not root) runs threads in one process, where links are
# not shaped and a received tensor is the sender's (the memory model assumes processes).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=16
threads=0
[[ $(id -u) -ne 0 ]] && threads=1
models="vgg16 resnet50 gnmt16 awd-lm gpt-2048"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --threads) threads=1; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin=build/pipetrain
out=out/bench/joint_plan
mkdir -p "$out"
cluster=(--workers 8 --bandwidth-gbps 100)

echo "| model | memory cap | schedule | plan | microbatches | recomputation | predicted ms/sample | measured ms/sample | modelled peak | measured peak | within cap |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for model in $models; do
  prof=data/profiles/$model.json
  # The unconstrained choice, and the least memory any configuration needs (from the error of
  # a cap nothing fits).
  free_peak=$("$bin" plan --profile "$prof" "${cluster[@]}" --schedule auto --json 2>&1 >/dev/null |
              sed -n 's/.*peak memory per worker \([0-9.]* [KMGT]iB\).*/\1/p' | head -1)
  least=$("$bin" plan --profile "$prof" "${cluster[@]}" --memory 1MB 2>&1 | sed -n 's/.* needs \([0-9.]* [KMGT]iB\).*/\1/p' || true)
  caps="none half least"
  # The GPT-like model's V100-class cap (issue 13): with microbatches of 2 sequences (8 per step)
  # nothing fits 16 GB without recomputation; with 1-sequence microbatches some plans do.
  [[ $model == gpt-2048 ]] && caps="$caps 16GB 16GB-m8"
  for cap in $caps; do
    args=(--schedule auto)
    case $cap in
      none) cap_text="none" ;;
      half) cap_text=$(python3 -c "import sys; v,u='$free_peak'.split(); print(f'{float(v)/2:.1f}{u[0]}B')") ;;
      least) cap_text=$(python3 -c "import sys; v,u='$least'.split(); print(f'{float(v)*1.05:.2f}{u[0]}B')") ;;
      16GB) cap_text=16GB ;;
      16GB-m8) cap_text=16GB; args+=(--microbatches 8) ;;
    esac
    [[ $cap != none ]] && args+=(--memory "$cap_text")
    plan_file=$out/$model-$cap.json
    if ! "$bin" plan --profile "$prof" "${cluster[@]}" "${args[@]}" -o "$plan_file" > "$out/$model-$cap.plan.txt" 2>&1; then
      echo "| $model | $cap_text | (no plan: $(tail -1 "$out/$model-$cap.plan.txt")) |||||||||"
      continue
    fi
    # Scales: a minibatch of about 200 ms of emulated compute, about 20 MB per worker.
    read -r S B < <(python3 - "$plan_file" "$out/$model-$cap.plan.txt" <<'EOF'
import json, re, sys
plan = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
ms = plan["predicted"]["simulated_ms_per_minibatch"]
peak = re.search(r"peak memory per worker ([0-9.]+) ([KMGT])iB", text)
peak_b = float(peak.group(1)) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[peak.group(2)]
print(f"{200.0 / ms:.6g} {20e6 / peak_b:.6g}")
EOF
)
    log=$out/$model-$cap.train.txt
    train=(--compute emulated --profile "$prof" --plan "$plan_file" --time-scale "$S" --byte-scale "$B" --steps "$steps" --quiet)
    if [[ $threads == 1 ]]; then
      "$bin" train "${train[@]}" > "$log" 2>&1 || { echo "| $model | $cap_text | (train failed: $(tail -1 "$log")) |||||||||"; continue; }
    else
      # The workers the plan runs on (an interleaved or V plan's chunks share them: plan.h).
      workers=$(python3 -c "import json; print(json.load(open('$plan_file'))['workers'])")
      rate=$(python3 -c "print(max(1, int(100e3 * $B / $S)))")mbit
      scripts/testbed.sh --workers "$workers" --rate "$rate" --out "$out/testbed-$model-$cap" -- "${train[@]}" > "$log" 2>&1 ||
        { echo "| $model | $cap_text | (testbed failed: $(tail -1 "$log")) |||||||||"; continue; }
    fi
    python3 - "$plan_file" "$out/$model-$cap.plan.txt" "$log" "$S" "$B" "$cap_text" "$model" "${args[*]}" <<'EOF'
import json, re, sys
plan = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read(); log = open(sys.argv[3]).read()
S, B, cap, model = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6], sys.argv[7]
pinned = " (--microbatches pinned)" if "--microbatches" in sys.argv[8] else ""
units = {"B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
def size(v, u): return float(v) * units[u[0]]
def human(b):
    for u in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if b < 1024 or u == "TiB": return f"{b:.1f} {u}"
        b /= 1024
pred = float(re.search(r"simulated ([0-9.]+) ms per sample", text).group(1))
peak_model = re.search(r"peak memory per worker ([0-9.]+) ([KMGT]?i?B)", text)
rate = float(re.search(r"steps \d+, [0-9.]+ s, (\d+) samples/s", log).group(1))
measured_ms = 1000.0 / (rate * S)
peaks = [size(v, u) for v, u in re.findall(r"w\d+ ([0-9.]+) ([KMGT]?i?B)", log.split("peak tensor memory per worker (measured")[1].split("):", 1)[1].split("\n")[0])]
measured_peak = max(peaks) / B
cap_b = None if cap == "none" else size(cap[:-2], cap[-2:])
rec = [i for i, s in enumerate(plan["stages"]) if s.get("recompute")]
rtext = "none" if not rec else ("all" if len(rec) == len(plan["stages"]) else "stages " + ",".join(map(str, rec)))
shape = "-".join(str(s["replicas"]) for s in plan["stages"]) + (f" x{plan['chunks']}" if plan.get("chunks") else "")
within = "" if cap_b is None else ("yes" if measured_peak <= cap_b else "NO")
print(f"| {model} | {cap}{pinned} | {plan['schedule']} | {shape} | {plan.get('microbatches', '-')} | {rtext} | {pred:.2f} | "
      f"{measured_ms:.2f} | {peak_model.group(1)} {peak_model.group(2)} | {human(measured_peak)} | {within} |")
EOF
  done
done
