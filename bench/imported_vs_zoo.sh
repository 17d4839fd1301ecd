#!/usr/bin/env bash
# An imported model against the same network built in the zoo: mnist-cnn written in PyTorch
# (bench/python/mnist_cnn.py), exported with `pipetrain export`, trained by pipetrain beside
# `--model mnist-cnn`, one worker, Fashion-MNIST, batch 64; runs interleaved, medians printed.
# build/pipetrain built; about a minute on a quiet machine.
#   bench/imported_vs_zoo.sh [STEPS [REPEATS]]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
repeats=${2:-3}
dir=out/bench/imported
mkdir -p "$dir"
PYTHONPATH=bench/python build/pipetrain export --model mnist_cnn:mnist_cnn --input-shape 64,1,28,28 \
  -o "$dir/mnist-cnn.pt" >/dev/null
rate() {  # samples/s from the result line "steps N, T s, X samples/s, ..."
  build/pipetrain train --model "$1" --data fashion-mnist --steps "$steps" --batch-size 64 --quiet 2>&1 |
    sed -n 's/^steps [0-9]*, [0-9.e+-]* s, \([0-9.]*\) samples\/s.*/\1/p'
}
zoo=() imported=()
for ((i = 0; i < repeats; i++)); do
  zoo+=("$(rate mnist-cnn)")
  imported+=("$(rate "$dir/mnist-cnn.pt")")
done
python3 - "${zoo[*]}" "${imported[*]}" "$steps" <<'PY' | tee out/bench/imported.txt
import statistics, sys
zoo = [float(v) for v in sys.argv[1].split()]
imp = [float(v) for v in sys.argv[2].split()]
z, i = statistics.median(zoo), statistics.median(imp)
print(f"== imported vs zoo: mnist-cnn, one worker, batch 64, {sys.argv[3]} steps, medians of {len(zoo)} ==")
print(f"zoo (--model mnist-cnn)           {z:8.0f} samples/s   runs {' '.join(f'{v:.0f}' for v in zoo)}")
print(f"imported (pipetrain export, .pt)  {i:8.0f} samples/s   runs {' '.join(f'{v:.0f}' for v in imp)}")
print(f"imported / zoo: {i / z:.3f}")
PY
