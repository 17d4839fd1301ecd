#!/usr/bin/env bash
# pipetrain's runtime against what a user would run instead, side by side on this machine:
# mnist-cnn on Fashion-MNIST, batch 64 (a minibatch of 64 per step for every run: data
# parallelism splits it over its 2 workers, as DDP's global batch of 64 does), one compute
# thread per worker; rounds interleaved, medians printed with the ratios issue 15 asks for.
#   one worker      `pipetrain train` on one worker vs a plain LibTorch C++ loop (bench_trainer_overhead)
#   data parallel   pipetrain dp on 2 workers (threads; gloo processes, with their shared memory on one
#                   host and without it, over TCP as DDP's) vs PyTorch DDP (gloo, 2 processes)
#   pipelines       pipetrain gpipe, 1f1b, pipedream on the conv | fc split, 4 microbatches (threads;
#                   gloo) vs a GPipe written in PyTorch (bench/python/peers.py, one process per stage)
# Each ratio is the median of the rounds' own ratios (the runs of one round sit side by side); a
# ratio of medians taken from different rounds read 1.247 where the rounds said 1.249, 0.963, 1.130.
# build/ built; Debian's python3-torch; about 5 minutes on a quiet machine.
#   bench/runtime_vs_peers.sh [STEPS [ROUNDS]]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
rounds=${2:-3}
dir=out/bench/peers
mkdir -p "$dir"
plan=$dir/conv-fc.json
cat >"$plan" <<'JSON'
{"format": "pipetrain.plan/1", "model": "mnist-cnn", "workers": 2,
 "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}]}
JSON
csv=$dir/runs.csv
echo "round,run,samples_per_s" >"$csv"
rate() {  # samples/s from pipetrain's "steps N, T s, X samples/s" line
  sed -n 's/^steps [0-9]*, [0-9.e+-]* s, \([0-9.]*\) samples\/s.*/\1/p'
}
# The peers get the host allocator pipetrain and the plain loop train with (tcmalloc,
# src/core/host_allocator.h): under glibc's defaults PyTorch here gives its activations back to
# the kernel every step and runs at a third of its speed, which would measure this VM, not a runtime.
# And one BLAS thread, as each pipetrain worker computes with (model/compute_threads.cpp):
# torch.set_num_threads(1) leaves OpenBLAS a thread per core, which fight the other process's.
peer() {
  OPENBLAS_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
    /usr/bin/python3 bench/python/peers.py "$@"
}
train() { build/pipetrain train --model mnist-cnn --batch-size 64 --steps "$steps" --quiet "$@" 2>&1 | rate; }
for ((r = 1; r <= rounds; r++)); do
  line=$(build/bench/bench_trainer_overhead "$steps" 1 | tail -1)
  plain=$(sed -n 's/.*plain \([0-9.]*\) steps\/s.*/\1/p' <<<"$line")
  echo "$r,plain-libtorch,$(awk -v s="$plain" 'BEGIN { print s * 64 }')" >>"$csv"
  echo "$r,pipetrain-one-worker,$(train)" >>"$csv"  # what `train` runs: a one-stage pipeline
  echo "$r,ddp-gloo-2,$(peer ddp --workers 2 --batch 32 --steps "$steps" | sed 's/samples\/s //')" >>"$csv"
  for t in threads gloo; do
    echo "$r,pipetrain-dp-2-$t,$(train --schedule dp --workers 2 --microbatches 2 --transport $t)" >>"$csv"
  done
  echo "$r,pipetrain-dp-2-gloo-tcp,$(PIPETRAIN_SHARED_MEMORY=0 train --schedule dp --workers 2 --microbatches 2 \
    --transport gloo)" >>"$csv"
  echo "$r,gpipe-python-2x4,$(peer gpipe --microbatches 4 --batch 64 --steps "$steps" | sed 's/samples\/s //')" >>"$csv"
  for s in gpipe 1f1b pipedream; do
    for t in threads gloo; do
      echo "$r,pipetrain-$s-2x4-$t,$(train --plan "$plan" --schedule $s --microbatches 4 --transport $t)" >>"$csv"
    done
  done
  echo "$r,pipetrain-gpipe-2x4-gloo-tcp,$(PIPETRAIN_SHARED_MEMORY=0 train --plan "$plan" --schedule gpipe \
    --microbatches 4 --transport gloo)" >>"$csv"
done
/usr/bin/python3 - "$csv" <<'PY' | tee out/bench/peers.txt
import csv, collections, statistics, sys
runs = collections.defaultdict(list)
by_round = collections.defaultdict(dict)
for row in csv.DictReader(open(sys.argv[1])):
    runs[row["run"]].append(float(row["samples_per_s"]))
    by_round[row["round"]][row["run"]] = float(row["samples_per_s"])
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"== pipetrain vs peers: mnist-cnn, Fashion-MNIST, batch 64, medians of {len(runs['plain-libtorch'])} rounds ==")
for k, v in runs.items():
    print(f"{k:32s} {med[k]:8.0f} samples/s   runs {' '.join(f'{x:.0f}' for x in v)}")
print("ratios, the median of each round's own (goal in brackets; the rounds' in parentheses):")
for label, a, b, goal in [("one worker / plain LibTorch loop", "pipetrain-one-worker", "plain-libtorch", ">= 0.98"),
                          ("dp gloo over TCP / PyTorch DDP (gloo, TCP)", "pipetrain-dp-2-gloo-tcp", "ddp-gloo-2", ">= 1.2"),
                          ("dp gloo, shared memory / PyTorch DDP", "pipetrain-dp-2-gloo", "ddp-gloo-2", ""),
                          ("dp threads / PyTorch DDP", "pipetrain-dp-2-threads", "ddp-gloo-2", ""),
                          ("gpipe gloo over TCP / GPipe in PyTorch", "pipetrain-gpipe-2x4-gloo-tcp", "gpipe-python-2x4", ""),
                          ("gpipe gloo, shared memory / GPipe in PyTorch", "pipetrain-gpipe-2x4-gloo", "gpipe-python-2x4", ""),
                          ("gpipe gloo / threads", "pipetrain-gpipe-2x4-gloo", "pipetrain-gpipe-2x4-threads", ">= 0.9"),
                          ("1f1b gloo / threads", "pipetrain-1f1b-2x4-gloo", "pipetrain-1f1b-2x4-threads", ">= 0.9"),
                          ("pipedream gloo / threads", "pipetrain-pipedream-2x4-gloo", "pipetrain-pipedream-2x4-threads", ">= 0.9")]:
    each = [r[a] / r[b] for r in by_round.values() if a in r and b in r and r[b] > 0]
    print(f"  {label:46s} {statistics.median(each):6.3f}  {('(' + goal + ')') if goal else '':10s}"
          f" ({', '.join(f'{x:.3f}' for x in each)})")
PY
