#!/usr/bin/env bash
# The main job on the embedded default, PipeDream's whole flow on threads in one process:
# profile mnist-cnn, plan it for 4 workers (a cluster of four machines on 1 Gbit/s links),
# train the plan with PipeDream-Flush (1F1B, synchronous: the gradients one worker would compute,
# so one worker's accuracy) on Fashion-MNIST, print the test accuracy and the measured
# throughput beside the simulator's for this very run (--profile: the schedule it runs, this
# machine's cores, and --cluster: the hand-over between its threads as `calibrate` measured it
# first, in about 4 s). (The asynchronous pipedream schedule on this plan trains faster and
# ends about half a point lower after two epochs; `plan` notes the trade.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh pipetrain pipetrain-torch
mkdir -p out
./build/pipetrain profile --model mnist-cnn --batch-size 64 -o out/mnist-cnn.profile.json
./build/pipetrain plan --profile out/mnist-cnn.profile.json --workers 4 --bandwidth-gbps 1 -o out/mnist-cnn.plan.json
./build/pipetrain calibrate --workers 4 -o out/threads.cluster.json
./build/pipetrain train --model mnist-cnn --plan out/mnist-cnn.plan.json --schedule 1f1b --microbatches 4 --epochs 2 \
  --profile out/mnist-cnn.profile.json --cluster out/threads.cluster.json \
  --lr-schedule cosine --warmup-steps 200 \
  --metrics out/mnist-cnn.metrics.csv --trace out/mnist-cnn.trace.json
