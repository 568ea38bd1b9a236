#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build (release), fetch MNIST and run
# the default benchmark, writing its JSON report under results/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)"
./datasets/fetch_mnist.sh
cli=build/release/apps/cnnbench
mkdir -p results
for model in lenet5 fc3; do
  "$cli" train --model "$model" --epochs 5 --eval --report "results/train-$model.json"
done
echo "reports: results/train-lenet5.json results/train-fc3.json"
