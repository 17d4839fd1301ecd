#!/usr/bin/env bash
# Writes what plan, simulate and compare print on the project's own cases into DIR, one file
# per case (stdout then stderr), to diff before and after a change that must not change them:
#   bash scripts/outputs.sh /tmp/before; (change); bash scripts/outputs.sh /tmp/after; diff -r /tmp/before /tmp/after
# Planning runs without its time limit, so that what it prints does not depend on the machine's speed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/outputs.sh DIR}
bin=${PIPETRAIN:-build/pipetrain}
mkdir -p "$out"
p=data/profiles
case_() {  # NAME ARGS...
  local name=$1; shift
  { "$bin" "$@" 2>&1 || echo "exit $?"; } | sed -E 's/[0-9]+(\.[0-9]+)? s so far//' >"$out/$name.txt"
}
case_ plan-vgg16-4 plan --profile $p/vgg16.json --workers 4 --bandwidth-gbps 10 --time-limit 0 --top 6 --explain
case_ plan-vgg16-4x4 plan --profile $p/vgg16.json --workers 4,4 --bandwidth-gbps 80,10 --time-limit 0 --json
case_ plan-gnmt16-8 plan --profile $p/gnmt16.json --workers 8 --bandwidth-gbps 10 --time-limit 0
case_ plan-resnet50-auto plan --profile $p/resnet50.json --workers 4 --bandwidth-gbps 10 --schedule auto --time-limit 0 --top 6
case_ plan-gpt-memory plan --profile $p/gpt-2048.json --workers 4 --bandwidth-gbps 100 --memory 16GB --schedule auto --time-limit 0
case_ plan-awd-tta plan --profile $p/awd-lm.json --workers 4 --bandwidth-gbps 10 --schedule auto --objective time-to-accuracy --time-limit 0
for kind in gpipe 1f1b pipedream 2bw interleaved zb-h1 zb-v dp; do
  case_ simulate-vgg16-$kind simulate --profile $p/vgg16.json --workers 4 --bandwidth-gbps 10 --schedule $kind
done
case_ simulate-gnmt-json simulate --profile $p/gnmt16.json --workers 4 --bandwidth-gbps 10 --schedule 1f1b --json
case_ compare-vgg16-4 compare --profile $p/vgg16.json --workers 4 --bandwidth-gbps 10
case_ compare-gpt-4 compare --profile $p/gpt-2048.json --workers 4 --bandwidth-gbps 100
