#!/usr/bin/env bash
# The main job on the embedded default: profile mnist-cnn, then train it on Fashion-MNIST.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh pipetrain
mkdir -p out
./build/pipetrain profile --model mnist-cnn --batch-size 64 -o out/mnist-cnn.profile.json
./build/pipetrain train --model mnist-cnn --epochs 2 --metrics out/mnist-cnn.metrics.csv
