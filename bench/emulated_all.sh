#!/usr/bin/env bash
# Every emulated-cluster figure of docs/results.md (root; build/pipetrain built; about an hour:
# each row runs 3 times). Each block first calibrates the testbed (`pipetrain calibrate`, issue
# 33) and plans and simulates on what it measured; --typed plans on the typed bandwidths instead.
# Each block prints its own table; outputs under out/bench/ for bench/report.py.
set -euo pipefail
cd "$(dirname "$0")/.."
b="bench/emulated_cluster.sh --calibrate"
[[ ${1:-} != --typed ]] || b=bench/emulated_cluster.sh
rm -rf out/bench/emulated_cluster

# PipeDream's Table 1 settings: Cluster A is 4 V100s a server over PCIe (96 Gbit/s here), 10 Gbit/s
# between servers; a NIC per worker (--shape both, --uplink per-worker). The 16-worker blocks run
# at time x 8: at x 2 their 16 worker processes' host work (all-reduce steps, weight stashing and
# prediction, steps on the scaled parameters) needs more than this machine's 2 cores, and
# ResNet-50's and GNMT-16's pipelines measured 62-68% over their simulation (2.0% and 9.9-11.8% at
# x 8), VGG-16's 2BW 14% (issue 33). GNMT-16's pipeline runs at x 16: its excess is about 20 ms of
# testbed time a minibatch at any S (11.9% at x 8, 5.2% at x 16); its data parallelism stays at x 8
# (0.1%), where one run already takes minutes.
$b --model vgg16 --cluster 4x4 --schedules "pipedream dp 1f1b gpipe 2bw" --time-scale 8
$b --model resnet50 --cluster 4x4 --schedules "pipedream dp" --time-scale 8
$b --model gnmt16 --cluster 1x4 --schedules "pipedream dp"
$b --model gnmt16 --cluster 4x4 --schedules pipedream --time-scale 16
$b --model gnmt16 --cluster 4x4 --schedules dp --time-scale 8
# AWD LM's 3-1 is balanced within 3%: at x 2 the last stage waited for a core the three stage-0
# replicas' host work held, and the row measured 10.8% over its simulation (1.1% at x 8).
$b --model awd-lm --cluster 1x4 --schedules "pipedream dp" --time-scale 8
$b --model vgg16 --cluster flat8 --schedules "pipedream dp 1f1b"

# Hierarchical all-reduce (docs/planner.md): data parallelism all-reduces inside each server,
# then across servers a shard each, beside the ring. At time x 8: at x 2 the 16 workers' traffic
# inside the servers (960 Mbit/s each on the testbed) is more than 2 cores move through the
# kernel, and data parallelism measured 88% over its simulation (25% at x 4, 5% at x 8).
$b --model vgg16 --cluster 4x4 --schedules "pipedream dp" --time-scale 8 --allreduce hierarchical

# Bandwidth sweep: VGG-16 on 4 workers as the links drop from 2 Gbit/s to 100 Mbit/s on the
# testbed (x S / B = 200 down to 10 Gbit/s on the emulated cluster); the planner re-plans each.
for g in 200 100 50 20 10; do $b --model vgg16 --cluster flat4 --gbps $g --schedules "pipedream dp"; done

bench/efficiency.sh
