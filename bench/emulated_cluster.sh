#!/usr/bin/env bash
# Emulated-cluster benchmark (docs/emulation.md): PipeDream vs data parallelism (and GPipe,
# 1F1B-flush, 2BW) on the testbed, with the planner's configuration and the simulator's
# prediction of every row. Root; build/pipetrain built.
#
#   bench/emulated_cluster.sh [--model vgg16] [--cluster 4x4|1x4|flat4|flat8] [--gbps G[,G2]]
#                             [--steps N] [--time-scale S] [--byte-scale B]
#                             [--schedules "pipedream dp ..."] [--uplink per-worker|shared]
#                             [--shape both|send] [--plan FILE] [--bucket-mb M]
#                             [--allreduce ring|hierarchical] [--calibrate] [--repeat N]
#
# Clusters (bandwidths of the emulated cluster; the links are shaped to bandwidth x B / S):
#   4x4:   4 servers of 4 workers, 96 Gbit/s within a server, 10 Gbit/s between servers; each
#          worker has its own 10 Gbit/s to other servers (--uplink per-worker, the planner's and
#          the simulator's model) or the 4 share one (--uplink shared, a NIC per server).
#          --shape send shapes only what workers send (the simulator's per-pair links); both
#          (default) also what they receive (a full-duplex NIC per worker)
#   1x4:   4 workers in one server, 96 Gbit/s (PipeDream's Cluster A: PCIe inside a server)
#   flat4: 4 workers, 10 Gbit/s;   flat8: 8 workers, 10 Gbit/s
#   --gbps overrides the cluster's bandwidths (innermost first), e.g. for a bandwidth sweep.
# --plan FILE runs that plan instead of the planner's (e.g. the paper's, to put beside it).
# --bucket-mb M: the all-reduce bucket of train (which scales it by B) and of the simulator
# (0: one all-reduce after the backward).
# --allreduce hierarchical: the planner, the simulator and the workers all-reduce inside each
# server, then across servers a shard each (Cluster::allreduce_units); default ring.
# --repeat N: each row runs N times (default 3); the measured figures are the medians, and the
# steady state's spread (min-max) is printed and kept, flagged where it exceeds 10% (issue 33).
# --calibrate: `pipetrain calibrate` on the testbed first (issue 33); its levels, brought back to
# the emulated cluster (rate x S / B, latency per message / S), and its host terms (all-reduce
# per step / S, per MiB reduced x B / S; per action / S) replace the typed cluster for the planner and the
# simulator (the links stay shaped to the typed rates).
# Each run writes its rows to out/bench/emulated_cluster/<run>/rows.csv (read by bench/report.py).
# Every figure is emulated: compute is a timed wait of the profile's V100-class times x S
# (data/profiles), and times are converted back to the emulated cluster (/ S) before printing.
# Minibatch: the profile's batch (64 for VGG-16) per pipeline minibatch; data parallelism runs
# that many samples per worker (a minibatch of batch x workers), as PipeDream's baseline does.
set -euo pipefail
cd "$(dirname "$0")/.."

model=vgg16 cluster=4x4 steps=0 S=2 B=0.02 schedules="pipedream dp 1f1b gpipe 2bw" uplink=per-worker shape=both gbps_set=""
plan_in="" bucket=() allreduce=ring calibrate=0 repeat=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --gbps) gbps_set=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --time-scale) S=$2; shift 2 ;;
    --byte-scale) B=$2; shift 2 ;;
    --schedules) schedules=$2; shift 2 ;;
    --bucket-mb) bucket=(--bucket-mb "$2"); shift 2 ;;
    --uplink) uplink=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --plan) plan_in=$2; shift 2 ;;
    --allreduce) allreduce=$2; shift 2 ;;
    --calibrate) calibrate=1; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "emulated_cluster: unknown option '$1'" >&2; exit 2 ;;
  esac
done
bin=build/pipetrain
profile=data/profiles/$model.json
two_level=""; [[ $cluster != 4x4 ]] || two_level=", $uplink uplinks"
[[ -f $profile ]] || { echo "no profile $profile" >&2; exit 2; }

case "$cluster" in
  4x4) workers=16 plan_workers=4,4 gbps=96,10 testbed=(--workers 16 --servers 4 --uplink "$uplink" --shape "$shape") ;;
  1x4) workers=4 plan_workers=4 gbps=96 testbed=(--workers 4 --shape "$shape") ;;
  flat4) workers=4 plan_workers=4 gbps=10 testbed=(--workers 4 --shape "$shape") ;;
  flat8) workers=8 plan_workers=8 gbps=10 testbed=(--workers 8 --shape "$shape") ;;
  *) echo "unknown --cluster $cluster" >&2; exit 2 ;;
esac
[[ -z $gbps_set ]] || gbps=$gbps_set
[[ $allreduce == ring || $allreduce == hierarchical ]] || { echo "--allreduce: ring or hierarchical, got '$allreduce'" >&2; exit 2; }
out=out/bench/emulated_cluster/$model-$cluster-${gbps//,/-}g$([[ $cluster != 4x4 ]] || echo "-$uplink")-shape-$shape$([[ -z $plan_in ]] || echo "-plan-$(basename "$plan_in" .json)")$([[ $allreduce == ring ]] || echo "-$allreduce")$([[ $S == 2 ]] || echo "-s$S")$([[ $calibrate == 0 ]] || echo "-calibrated")
mkdir -p "$out"
# The cluster as the workers read it (which share a server, how they all-reduce).
python3 - "$plan_workers" "$gbps" "$allreduce" "$out/cluster.json" <<'EOF'
import json, sys
fans, gbps = sys.argv[1].split(","), sys.argv[2].split(",")
doc = {"format": "pipetrain.cluster/1", "allreduce": sys.argv[3],
       "levels": [{"fan_out": int(f), "bandwidth_gbps": float(g)} for f, g in zip(fans, gbps)]}
json.dump(doc, open(sys.argv[4], "w"))
EOF
# Emulated link rates in Mbit/s: bandwidth x B / S.
rate_of() { awk -v g="$1" -v b="$B" -v s="$S" 'BEGIN { printf "%dmbit", g * 1000 * b / s }'; }
IFS=, read -r -a bw <<<"$gbps"
if [[ ${#bw[@]} -eq 2 ]]; then testbed+=(--rate "$(rate_of "${bw[0]}")" --uplink-rate "$(rate_of "${bw[1]}")")
else testbed+=(--rate "$(rate_of "${bw[0]}")"); fi
batch=$(python3 -c "import json; print(json.load(open('$profile'))['batch_size'])")
if [[ $calibrate == 1 ]]; then
  scripts/testbed.sh "${testbed[@]}" --timeout 1200 --command calibrate --out "$out/calibrate" -- --workers "$plan_workers" --max-mb 16 --timeout 900 \
    -o "$PWD/$out/testbed_cluster.json" >"$out/calibrate.log" 2>&1 || { cat "$out/calibrate.log"; exit 1; }
  grep -E '^level|^all-reduce' "$out/calibrate.log"
  python3 - "$out/testbed_cluster.json" "$S" "$B" "$allreduce" "$out/cluster.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1])); S, B = float(sys.argv[2]), float(sys.argv[3])
for l in doc["levels"]:  # what the emulated cluster's bytes and times see
    l["bandwidth_gbps"] *= S / B
    l["latency_us"] = l.get("latency_us", 0) / S
# the host's all-reduce terms likewise: per step / S; per MiB reduced x B / S
doc["allreduce_step_us"] = doc.get("allreduce_step_us", 0) / S
doc["reduce_us_per_mib"] = doc.get("reduce_us_per_mib", 0) * B / S
# the host's time per action, real time as the steps are: / S
doc["action_us"] = doc.get("action_us", 0) / S
doc["allreduce"] = sys.argv[4]
# a host process's own memory is not the emulated device's (whose bytes are the profile's x B)
doc.pop("process_bytes", None)
doc["calibration"]["emulated"] = {"time_scale": S, "byte_scale": B}
json.dump(doc, open(sys.argv[5], "w"))
EOF
fi

if [[ -n $plan_in ]]; then
  cp "$plan_in" "$out/plan.json"
  : >"$out/plan.txt"
else
  "$bin" plan --profile "$profile" --cluster "$out/cluster.json" "${bucket[@]}" -o "$out/plan.json" >"$out/plan.txt"
fi
config=$(python3 -c "import json; print('-'.join(str(s['replicas']) for s in json.load(open('$out/plan.json'))['stages']))")
# Asynchronous schedules run whole rounds of every stage's replicas (lcm of the counts): run at
# least six rounds (a steady state between warm-up and drain) and 30 minibatches.
unit=$(python3 -c "import math; print(math.lcm(*[int(r) for r in '$config'.split('-')]))")
plan_workers_n=$(python3 -c "print(sum(int(r) for r in '$config'.split('-')))")
# Data parallelism's profile: batch x workers per minibatch (times and activations x workers).
python3 - "$profile" "$workers" "$out/dp_profile.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1])); k = int(sys.argv[2])
p["batch_size"] *= k
for l in p["layers"]:
    l["forward_ms"] *= k; l["backward_ms"] *= k; l["activation_bytes"] *= k
json.dump(p, open(sys.argv[3], "w"))
EOF

echo "== emulated cluster: $model on $cluster ($gbps Gbit/s$two_level, links shaped: $shape), time x $S, bytes x $B, links $(rate_of "${bw[0]}")$([[ ${#bw[@]} -ne 2 ]] || echo ", uplinks $(rate_of "${bw[1]}")") =="
predicted=$(sed -n 's/^speed-up: .*, \([0-9.]*\)x over data parallelism.*/\1/p' "$out/plan.txt" | head -1)
if [[ -n $plan_in ]]; then echo "plan: $config from $plan_in"
else echo "planner: $config (pipetrain cost model), predicts ${predicted}x over data parallelism"; fi
printf "%-10s %-8s %6s %14s %14s %9s %12s %13s %13s  %s\n" schedule config steps "measured ms/mb" "sim ms/mb" "error %" "samples/s" \
  "steady meas." "steady sim" "(medians of --repeat runs)"
dp_rate=""
: >"$out/rows.txt"
echo "model,cluster,gbps,uplink,shape,link_rate,schedule,config,steps,measured_ms,sim_ms,error_pct,samples_per_s,planner_speedup,steady_measured_ms,steady_sim_ms,predicted_ms,runs,steady_spread" >"$out/rows.csv"
for kind in $schedules; do
  args=(--compute emulated --time-scale "$S" --byte-scale "$B" --schedule "$kind" --quiet --timeout 600 "${bucket[@]}"
        --cluster "$PWD/$out/cluster.json")
  sim_args=(--cluster "$out/cluster.json" --schedule "$kind" "${bucket[@]}")
  n=$steps
  case "$kind" in
    dp)
      prof=$out/dp_profile.json
      args+=(--profile "$prof" --workers "$workers" --microbatches "$workers")
      sim_args+=(--profile "$prof" --microbatches "$workers")  # dp: every worker holds every layer
      [[ $n -gt 0 ]] || n=9  # a steady third of 3 steps
      cfg=$workers ;;
    *)
      prof=$profile
      args+=(--profile "$prof" --plan "$out/plan.json" --microbatches "$workers")
      sim_args+=(--profile "$prof" --plan "$out/plan.json" --microbatches "$workers")
      # Six rounds, and three times the plan's workers plus a round (warm-up and drain each span
      # about as many minibatches as workers): a steady state between them, as the simulator's
      # default_minibatches.
      if [[ $n -eq 0 ]]; then
        n=$(( 30 > 6 * unit ? 30 : 6 * unit ))
        (( n >= 3 * (plan_workers_n + unit) )) || n=$(( 3 * (plan_workers_n + unit) ))
      fi
      [[ $kind != pipedream && $kind != 2bw ]] || n=$(( (n + unit - 1) / unit * unit ))
      cfg=$config ;;
  esac
  args+=(--steps "$n" --trace "$PWD/$out/$kind.trace.json")
  # The row --repeat times: each run's whole time per minibatch and steady state (the workers'
  # merged trace: the middle third of the minibatches, whole periods of the replica rounds); the
  # last run's trace and log stay.
  totals=() steadies=() ran=0
  for (( run = 1; run <= repeat; run++ )); do
    rm -f "$out/$kind.trace.json"*
    if ! scripts/testbed.sh "${testbed[@]}" --out "$out/$kind" -- "${args[@]}" >"$out/$kind.log" 2>&1; then
      echo "$kind: run $run failed (see $out/$kind.log)"; continue
    fi
    # The steps that ran: asynchronous schedules run whole rounds of every stage's replicas.
    ran=$(sed -n 's/.*steps \([0-9]*\), [0-9.e+-]* s,.*/\1/p' "$out/$kind.log" | head -1)
    secs=$(sed -n 's/.*steps [0-9]*, \([0-9.e+-]*\) s,.*/\1/p' "$out/$kind.log" | head -1)
    [[ -n $ran && $ran -gt 0 ]] || { echo "$kind: run $run ran no minibatch (see $out/$kind.log)"; ran=0; continue; }
    totals+=("$(awk -v s="$secs" -v n="$ran" -v S="$S" 'BEGIN { printf "%.3f", s * 1000 / n / S }')")
    "$bin" trace "$out/$kind.trace.json" --merge "$workers" --svg "$out/$kind.svg" \
      --title "$kind $cfg on emulated $cluster ($gbps Gbit/s), measured (emulated compute)" >"$out/$kind.trace.txt" 2>&1 ||
      echo "$kind: no measured timeline (see $out/$kind.trace.txt)"
    t=$(sed -n 's/^time per minibatch *\([0-9.]*\) ms.*/\1/p' "$out/$kind.trace.txt" | head -1)
    [[ -z $t ]] || steadies+=("$(awk -v t="$t" -v S="$S" 'BEGIN { printf "%.3f", t / S }')")
  done
  [[ ${#totals[@]} -gt 0 ]] || continue
  n=$ran
  med() { printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  measured=$(awk -v m="$(med "${totals[@]}")" 'BEGIN { printf "%.1f", m }')
  # The simulator over the same minibatches: one repeated minibatch for flush schedules, all n for
  # the asynchronous ones; its total time / n.
  minis=1; [[ $kind == pipedream || $kind == 2bw ]] && minis=$n
  "$bin" simulate "${sim_args[@]}" --minibatches "$minis" --save-trace "$out/$kind.sim.json" \
    --svg "$out/$kind.sim.svg" >/dev/null
  sim=$(python3 - "$out/$kind.sim.json" "$minis" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1])); ev = [e for w in t["workers"] for e in w]
print("%.1f" % ((max(e["end_ms"] for e in ev) - min(e["start_ms"] for e in ev)) / int(sys.argv[2])))
EOF
)
  mb=$batch; [[ $kind == dp ]] && mb=$(( batch * workers ))
  rate=$(awk -v m="$measured" -v b="$mb" 'BEGIN { printf "%.0f", b * 1000 / m }')
  err=$(awk -v m="$measured" -v s="$sim" 'BEGIN { printf "%+.1f", (m - s) / s * 100 }')
  [[ $kind == dp ]] && dp_rate=$rate
  # Steady state (metrics.h: the middle third of the minibatches, whole periods of the replica
  # rounds): the median of the runs' merged traces, and their spread; simulated over the same
  # minibatches.
  steady="" spread=""
  if [[ ${#steadies[@]} -gt 0 ]]; then
    steady=$(awk -v m="$(med "${steadies[@]}")" 'BEGIN { printf "%.2f", m }')
    lo=$(printf "%s\n" "${steadies[@]}" | sort -g | head -1) hi=$(printf "%s\n" "${steadies[@]}" | sort -g | tail -1)
    spread=$(awk -v l="$lo" -v h="$hi" -v m="$steady" 'BEGIN { printf "%.2f-%.2f (%.1f%%%s)", l, h, (h - l) / m * 100, ((h - l) / m > 0.10) ? "; over 10%" : "" }')
  fi
  steady_sim=$("$bin" simulate "${sim_args[@]}" --minibatches "$minis" | sed -n 's/^time per minibatch *\([0-9.]*\) ms.*/\1/p')
  # The planner's prediction for its own schedule (pipedream) and for data parallelism (per
  # minibatch of batch x workers); the other schedules it does not predict.
  predicted_ms=$(python3 - "$out/plan.json" "$kind" "$workers" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1])).get("predicted", {})
kind, w = sys.argv[2], int(sys.argv[3])
v = p.get("pipeline_ms_per_minibatch") if kind == "pipedream" else (p.get("data_parallel_ms_per_minibatch", 0) * w if kind == "dp" else 0)
print("%.1f" % v if v else "")
EOF
)
  printf "%-10s %-8s %6s %14s %14s %9s %12s %13s %13s  %s\n" "$kind" "$cfg" "$n" "$measured" "$sim" "$err" "$rate" \
    "${steady:-n/a}" "${steady_sim:-n/a}" "${#steadies[@]} runs, spread ${spread:-n/a}"
  echo "$kind $cfg $n $measured $sim $err $rate" >>"$out/rows.txt"
  echo "$model,$cluster,${gbps//,/ },$([[ $cluster == 4x4 ]] && echo "$uplink"),$shape,$(rate_of "${bw[-1]}"),$kind,$cfg$([[ $allreduce == ring ]] || echo " $allreduce"),$n,$measured,$sim,$err,$rate,$predicted,$steady,$steady_sim,$predicted_ms,${#steadies[@]},${spread:-}" >>"$out/rows.csv"
done
if [[ -n $dp_rate ]]; then
  awk -v d="$dp_rate" '$1 != "dp" { printf "speed-up of %s over dp: %.2fx\n", $1, $7 / d }' "$out/rows.txt"
fi
echo "(emulated; logs and simulator traces in $out)"
