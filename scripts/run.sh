#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build (release), fetch MNIST and run
# the default benchmark sweep (both models, every compiled strategy, cores 1..nproc, nodes
# 1..min(4, nproc)) with time to 90% accuracy, writing results/sweep.json, its plots and
# results/report.html, the whole sweep on one page.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

./scripts/setup.sh
source scripts/compiler-cache.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)"
./datasets/fetch_mnist.sh
cli=build/release/apps/cnnbench
mkdir -p results
"$cli" sweep --target-accuracy 0.9 --out results/sweep.json --force
"$cli" plot results/sweep.json --out results/plots
"$cli" report results/sweep.json --out results/report.html >/dev/null
echo "report: results/sweep.json  plots: results/plots/speedup.png (and .svg, efficiency, throughput, time_to_accuracy, scaling_prediction, breakdown)"
echo "the whole sweep on one page (open it in a browser, offline): $root/results/report.html"
echo "compare with the committed reference: $cli compare results/sweep-2core.json results/sweep.json"
