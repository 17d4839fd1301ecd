#!/usr/bin/env bash
# The one benchmark command (issue 6): every figure of docs/results.md, then the report itself.
# Root (the testbed makes network namespaces); over an hour on 2 cores (emulated_all.sh takes about one). Run it on a quiet
# machine: the emulated figures are timings.
#   bench/all.sh            # build (installing what is missing), real CPU, emulated clusters, report
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
mkdir -p out/bench
build/bench/bench_plan_speed > out/bench/plan_speed.txt
build/bench/bench_optimizer_step 15 > out/bench/optimizer_step.txt
bench/real_cpu.sh
bench/runtime_vs_peers.sh
bench/imported_vs_zoo.sh
# Eager PyTorch on the allocator pipetrain computes with (runtime_vs_peers.sh): under glibc's
# malloc eager ran 1.19-1.63x slower here, which measured the allocator, not pipetrain.
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
  /usr/bin/python3 bench/python/families_throughput.py --pipetrain build/pipetrain | tee out/bench/families.txt
bench/bf16.sh
bench/async_accuracy.sh
bench/replica_gradients.sh
bench/staleness.sh
/usr/bin/python3 bench/python/real_compute.py --pipetrain build/pipetrain | tee out/bench/real_compute.txt
/usr/bin/python3 bench/python/planner_choice.py --pipetrain build/pipetrain | tee out/bench/planner_choice.txt
bench/memory_per_process.sh | tee out/bench/memory_per_process.txt
bench/larger_than_one_worker.sh | tee out/bench/larger_than_one_worker.txt
bench/emulated_all.sh
# --update: the sections written from real_compute.txt, planner_choice.txt and staleness.txt (no
# generator of report.py's) are kept, which a whole rewrite dropped.
python3 bench/report.py --update
