#!/usr/bin/env bash
# A model larger than one worker, trained (docs/results.md, "A worker holds only its stage"):
# GPipe's headline is a model 25x larger on 8 accelerators than one holds. Here: the zoo's mlp of
# 16 dense layers of 4096 x 4096 (268M parameters: 3.2 GB of weights, gradients and momentum)
# on WORKERS (default 6) workers of LIMIT (default 1 GiB) each, a memory cgroup per worker on the
# testbed.
#   1. profile it (--alone: one layer at a time, this process never holds it whole);
#   2. `plan --memory LIMIT`: one worker does not fit (the plan says with how much), a pipeline
#      on WORKERS does (on the cluster calibrate measures, whose process_bytes the cap includes);
#   3. train the pipeline (1f1b, synchronous) on the testbed, each worker under LIMIT;
#   4. the same run on one worker without a limit: its loss after the same steps must be the
#      pipeline's (the synchronous schedule computes one worker's gradients);
#   5. one worker under LIMIT: killed by the kernel, and named with its limit and peak.
# Root (namespaces, cgroups); build/pipetrain built. Prints a markdown table.
#   bench/larger_than_one_worker.sh [--limit 1G] [--depth 16] [--workers 6] [--steps 5]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=1G depth=16 steps=5 workers=6
while [[ $# -gt 0 ]]; do
  case "$1" in
    --limit) limit=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    *) echo "larger_than_one_worker: unknown option '$1'" >&2; exit 2 ;;
  esac
done
bin=build/pipetrain
out=out/bench/larger_than_one_worker
mkdir -p "$out"
model=(--model mlp --width 4 --depth "$depth" --data synthetic --synthetic-samples 256 --seed 3)
run=(--batch-size 8 --steps "$steps" --no-shuffle --lr 0.01)
limit_bytes=$(numfmt --from=iec "$limit")

"$bin" profile "${model[@]}" --alone --batch-size 8 -o "$out/profile.json" 2> "$out/profile.log"
echo "profiled: $(tail -1 "$out/profile.log")"
# One worker under the limit: plan says it does not fit.
if "$bin" plan --profile "$out/profile.json" --workers 1 --bandwidth-gbps 10 --memory "$limit" > "$out/plan1.txt" 2>&1; then
  echo "plan placed the model on one worker of $limit: $(tail -1 "$out/plan1.txt")" >&2; exit 1
fi
echo "one worker of $limit: $(tail -1 "$out/plan1.txt")"
# Calibrated as the job runs: one process per worker, each started afresh in its namespace.
scripts/testbed.sh --workers "$workers" --rate 10gbit --command calibrate --out "$out/calibrate" -- \
  --workers "$workers" -o "$PWD/$out/cluster.json" > "$out/calibrate.log" 2>&1 || { cat "$out/calibrate.log" >&2; exit 1; }
"$bin" plan --profile "$out/profile.json" --cluster "$out/cluster.json" --memory "$limit" --schedule 1f1b \
  -o "$out/plan.json" > "$out/plan.txt" 2>&1 || { cat "$out/plan.txt" >&2; exit 1; }
grep -E "stages|peak|memory" "$out/plan.txt" | head -6
scripts/testbed.sh --workers "$workers" --rate 10gbit --memory-limit "$limit_bytes" --out "$out/testbed" -- \
  "${model[@]}" "${run[@]}" --plan "$out/plan.json" --schedule 1f1b > "$out/pipeline.txt" 2>&1 || {
  cat "$out/pipeline.txt" >&2; exit 1; }
"$bin" train "${model[@]}" "${run[@]}" > "$out/one.txt" 2>&1
one_limited=failed
if scripts/testbed.sh --workers 1 --memory-limit "$limit_bytes" --out "$out/testbed1" -- \
     "${model[@]}" "${run[@]}" --profile "$out/profile.json" --stages 1 --schedule 1f1b > "$out/one-limited.txt" 2>&1; then
  one_limited=completed
fi

# A run that completed stays "completed" (it was relabelled "failed, but not for memory").
[ "$one_limited" = completed ] || grep -q "exceeded its memory limit" "$out/one-limited.txt" ||
  one_limited="failed, but not for memory"
python3 - "$out" "$limit" "$limit_bytes" "$one_limited" "$workers" <<'EOF'
import glob, re, sys
out, limit, limit_b, one_limited, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def text(p): return open(p).read()
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def loss(t): return float(re.search(r"final loss ([0-9.eE+-]+)", t).group(1))
pipe = text(f"{out}/pipeline.txt") + "".join(text(p) for p in glob.glob(f"{out}/testbed/worker*.log"))
one = text(f"{out}/one.txt")
peaks = [int(v) for v in re.findall(r"worker \d+ peak memory \(its cgroup's account\) (\d+) bytes", pipe)]
# Each process's figure, not the shared memory its transfers mapped that follows the ';'.
rss = re.search(r"peak RSS per worker process \(measured, as the OS counts it\): (.*)", pipe).group(1).split(";")[0]
one_rss = re.search(r"peak RSS \(measured, as the OS counts it\): ([0-9.]+) (\w+)", one)
one_b = float(one_rss.group(1)) * units[one_rss.group(2)]
import json
plan_text = text(f"{out}/plan.txt")
tensors = re.search(r"peak memory per worker ([0-9.]+) (\w+)", plan_text)
process_b = json.load(open(f"{out}/cluster.json")).get("process_bytes", 0)
modelled_rss = float(tensors.group(1)) * units[tensors.group(2)] + process_b
measured_rss = max(float(v) * units[u] for v, u in re.findall(r"w\d+ ([0-9.]+) (\w+)", rss))
lp, lo = loss(pipe), loss(one)
print()
print("| run | workers x limit | peak per worker | final loss (mean of the steps) |")
print("|---|---|---|---|")
print(f"| one worker, no limit | 1 x none | {one_b / 2**30:.2f} GiB (RSS) | {lo:.6f} |")
print(f"| 1f1b pipeline, testbed | {workers} x {limit} | cgroup peaks {', '.join(f'{p / 2**30:.2f}' for p in peaks)} GiB; RSS {rss} | {lp:.6f} |")
print(f"| one worker under the limit | 1 x {limit} | {one_limited} (see one-limited.txt) | - |")
print()
print(f"model state over one worker's limit: {one_b / limit_b:.2f}x; loss difference {abs(lp - lo):.2e}; "
      f"the plan's peak per worker with the calibrated process ({process_b / 2**20:.1f} MiB) {modelled_rss / 2**20:.1f} MiB, "
      f"the largest measured {measured_rss / 2**20:.1f} MiB ({100 * (modelled_rss / measured_rss - 1):+.1f}%)")
# The pipeline fitting is its completing (the testbed exits non-zero otherwise): a cgroup's peak cannot
# pass its limit, a worker over it is killed. Each worker's cgroup must have reported.
ok = abs(lp - lo) <= 1e-5 * max(1.0, abs(lo)) and len(peaks) == int(workers) and one_limited == "failed"
sys.exit(0 if ok else 1)
EOF
grep -h "exceeded its memory limit" "$out/one-limited.txt" || true
