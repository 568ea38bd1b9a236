#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build (release), fetch MNIST and run
# the default benchmark sweep (both models, every compiled strategy, cores 1..nproc, nodes
# 1..min(4, nproc); the PyTorch peers too when python3-torch is installed) with time to 90%
# accuracy, writing results/sweep.json, its plots and results/report.html, the whole sweep on one
# page.
# Usage: scripts/run.sh (no arguments)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/check_args.sh"
answer_help "$@"
(($# == 0)) || check_args_fail "takes no arguments, not '$(check_args_shown "$1")' (-h: what it does)"
cd "$root"

./scripts/setup.sh
source scripts/compiler-cache.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)"
./datasets/fetch_mnist.sh
cli=build/release/apps/cnnbench
mkdir -p results
# The PyTorch peers (pytorch: 1..nproc threads; pytorch-ddp: 1..min(4, nproc) gloo ranks) join the
# sweep when /usr/bin/python3 imports torch; this script does not install it.
python=/usr/bin/python3
[[ -x "$python" ]] || python=python3
peers=()
if "$python" -c 'import torch' 2>/dev/null; then
  strategies=$("$cli" info --json | "$python" -c 'import json, sys; print(",".join(json.load(sys.stdin)["features"]))')
  peers=(--strategies "$strategies,pytorch,pytorch-ddp")
  echo "run.sh: the sweep includes the PyTorch peers (pytorch, pytorch-ddp)"
else
  echo "run.sh: the PyTorch peers are left out: $python cannot import torch; apt-get install python3-torch adds them"
fi
# --force: each run of this script replaces the last one's sweep, and with it its plots and page.
"$cli" sweep --target-accuracy 0.9 --out results/sweep.json --force "${peers[@]}"
"$cli" plot results/sweep.json --out results/plots --force
"$cli" report results/sweep.json --out results/report.html --force >/dev/null
echo "report: results/sweep.json  plots: results/plots/speedup.png (and .svg, efficiency, throughput, time_to_accuracy, scaling_prediction, breakdown)"
echo "the whole sweep on one page (open it in a browser, offline): $root/results/report.html"
echo "compare with the committed reference: $cli compare results/sweep-2core.json results/sweep.json"
