#!/usr/bin/env bash
# Remakes, on this machine, every committed result and figure the README shows, then the README's
# figures generated from them (scripts/readme_tables.py --write):
#   sweep     results/sweep-2core.json and plots/*.png|svg: the README's headline sweep
#   peers     results/sweep-2core-peers.json and plots/peers/: the sweep with PyTorch's own
#             parallelism beside ours (needs python3-torch)
#   peers5    results/sweep-2core-peers-5rep.json: the same comparison, 5 repetitions of both
#             models, with OPENBLAS_CORETYPE unset (the peers part runs as the machine is set)
#   limit     results/serial-limit.json: serial against the core's sgemm peak, OPENBLAS_CORETYPE
#             unset and Haswell, and against PyTorch (bench/serial_limit.py)
#   tune      results/tune-vs-exhaustive-2core*.json: `cnnbench tune` against every candidate
#             measured, both models on 2 cores (bench/tune_vs_exhaustive.py; docs/tune.md)
#   accuracy  results/accuracy-*.json: five epochs of MNIST per model and strategy
#   report    plots/report-screenshot.png: the headline sweep's page in headless Chromium
# Each report carries the machine it ran on (CPU family and model, cores, OPENBLAS_CORETYPE as it
# was set) and the commit. Run it on a quiet machine: the parts take about 50 minutes on 2 cores.
# Usage: scripts/refresh-results.sh --force [--cli PATH]
#                                   [--parts "sweep peers peers5 limit tune accuracy report"]
#   --force  required: the parts replace committed files (without it nothing runs)
#   --cli    the cnnbench to run (default: build/release/apps/cnnbench, built first); a
#            sanitizer build is refused
#   --parts  which to make again (default: all, in that order)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check_args_script=refresh-results
source "$root/scripts/check_args.sh"
answer_help "$@"
cd "$root"

cli=""
force=0
parts="sweep peers peers5 limit tune accuracy report"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) check_has_value "$1" "$#"; cli=$2; shift 2 ;;
    --parts) check_has_value "$1" "$#"; parts=$2; shift 2 ;;
    --force) force=1; shift ;;
    *) check_args_fail "unknown argument '$(check_args_shown "$1")' (-h: usage)" ;;
  esac
done
for part in $parts; do
  case "$part" in
    sweep | peers | peers5 | limit | tune | accuracy | report) ;;
    *) check_args_fail "--parts: unknown part '$(check_args_shown "$part")' (sweep, peers, peers5, limit, tune, accuracy, report)" ;;
  esac
done
((force == 1)) || check_args_fail "replaces the committed results, plots and README tables: pass --force to do so"
wants() { [[ " $parts " == *" $1 "* ]]; }

say() { echo "refresh-results: $*"; }
timings=()
stage_start=$SECONDS
stage_done() {
  timings+=("$(printf '%-10s %5ds' "$1" $((SECONDS - stage_start)))")
  stage_start=$SECONDS
}
trap '((${#timings[@]} == 0)) || printf "refresh-results: %s\n" "${timings[@]}"' EXIT

if [[ -z $cli ]]; then
  ./scripts/setup.sh
  source scripts/compiler-cache.sh
  cmake --preset release >/dev/null
  cmake --build --preset release -j"$(nproc)" --target cnnbench_cli
  cli=build/release/apps/cnnbench
  stage_done build
fi
[[ -x $cli ]] || check_args_fail "no cnnbench at $(check_args_shown "$cli")"
if "$cli" --version | grep -q sanitizers; then
  check_args_fail "$cli is a sanitizer build: its times would measure the sanitizer; pass a release build"
fi
./datasets/fetch_mnist.sh >/dev/null
python=/usr/bin/python3
[[ -x $python ]] || python=python3
say "$("$cli" --version | head -1); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"

if wants sweep; then
  say "the headline sweep (results/sweep-2core.json, plots/)"
  "$cli" sweep --target-accuracy 0.9 --repeat 5 --steps 200 --out results/sweep-2core.json --force
  "$cli" plot results/sweep-2core.json --out plots --force
  stage_done sweep
fi

if wants peers; then
  "$python" -c 'import torch' 2>/dev/null ||
    check_args_fail "the peers part needs python3-torch for $python (apt-get install python3-torch), or leave it out with --parts"
  say "the sweep with the PyTorch peers (results/sweep-2core-peers.json, plots/peers/)"
  strategies=$("$cli" info --json | "$python" -c 'import json, sys; print(",".join(json.load(sys.stdin)["features"]))')
  "$cli" sweep --target-accuracy 0.9 --strategies "$strategies,pytorch,pytorch-ddp" \
    --out results/sweep-2core-peers.json --force
  "$cli" plot results/sweep-2core-peers.json --out plots/peers --force
  stage_done peers
fi

if wants peers5; then
  "$python" -c 'import torch' 2>/dev/null ||
    check_args_fail "the peers5 part needs python3-torch for $python (apt-get install python3-torch), or leave it out with --parts"
  say "the peers sweep with 5 repetitions, OPENBLAS_CORETYPE unset (results/sweep-2core-peers-5rep.json)"
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$cli" sweep --model fc3,lenet5 \
    --strategies serial,stream,cluster,blas,pytorch,pytorch-ddp --cores 1,2 --repeat 5 \
    --out results/sweep-2core-peers-5rep.json --force
  stage_done peers5
fi

if wants limit; then
  say "serial against the core's limit and PyTorch (results/serial-limit.json)"
  "$python" bench/serial_limit.py --cli "$cli" --out results/serial-limit.json --force
  stage_done limit
fi

if wants tune; then
  say "the tuner against every candidate measured (results/tune-vs-exhaustive-2core.json)"
  "$python" bench/tune_vs_exhaustive.py --cli "$cli" --cores 2 --repeat 5 --budget 120 \
    --out results/tune-vs-exhaustive-2core.json --force
  "$python" bench/tune_vs_exhaustive.py --cli "$cli" --models fc3 --cores 2 --repeat 5 --budget 45 \
    --out results/tune-vs-exhaustive-2core-fc3-45s.json --force
  stage_done tune
fi

if wants accuracy; then
  say "five epochs of MNIST per model and strategy (results/accuracy-*.json)"
  train() { "$cli" train --epochs 5 --eval --quiet --force "$@"; }
  train --model fc3 --report results/accuracy-fc3-5epochs.json
  train --model lenet5 --report results/accuracy-lenet5-5epochs.json
  for mode in strict group-async async; do
    train --model lenet5 --strategy stream --cores 2 --consistency "$mode" \
      --report "results/accuracy-lenet5-stream-$mode-5epochs.json"
  done
  stage_done accuracy
fi

if wants report; then
  chromium=$(command -v chromium || command -v chromium-browser || true)
  [[ -n $chromium ]] || check_args_fail "the report part needs chromium (apt-get install chromium), or leave it out with --parts"
  say "the headline sweep's page in a browser (plots/report-screenshot.png)"
  work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-refresh-XXXXXX")
  trap 'rm -rf "$work"; ((${#timings[@]} == 0)) || printf "refresh-results: %s\n" "${timings[@]}"' EXIT
  "$cli" report results/sweep-2core.json --out "$work/report.html" >/dev/null
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1280,1300 --screenshot="$work/report.png" "file://$work/report.html" 2>/dev/null
  [[ -s $work/report.png ]] || check_args_fail "chromium wrote no screenshot of $work/report.html"
  cp "$work/report.png" plots/.report-screenshot.png.tmp
  mv plots/.report-screenshot.png.tmp plots/report-screenshot.png
  stage_done report
fi

"$python" scripts/readme_tables.py --write
say "done; git diff --stat shows what changed"
