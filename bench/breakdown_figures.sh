#!/usr/bin/env bash
# The committed one-step Gantt charts of "where the time goes": a sweep of both models (serial,
# stream, cluster at 1-2 cores and 1-2 ranks) with a trace of every point, then `plot` draws one
# step of each of the four traces the README shows (LeNet-5 stream P=2, cluster 1x2 and 2x1, FC-3
# cluster 1x2) into OUT. The bars of plots/breakdown.png are the headline sweep's
# (scripts/refresh-results.sh --parts sweep), so that figure and the README's table come from one run.
#
# usage: bench/breakdown_figures.sh [--cli PATH] [--out DIR] [--work DIR] [--repeat N]
#                                   [--chrt PRIORITY]
# --chrt PRIORITY: the sweep under `chrt -f PRIORITY` (root), so that other programs on a shared
# machine do not take its cores mid-run (their share would show up as descheduled_s).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root=$(dirname "$here")
source "$root/scripts/check_args.sh"
answer_help "$@"
cli="$root/build/ci/apps/cnnbench"
out="$root/plots"
work=""
repeat=5
chrt_prefix=()
usage="usage: $0 [--cli PATH] [--out DIR] [--work DIR] [--repeat N] [--chrt PRIORITY]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --chrt) check_int --chrt "$2" 1 99; chrt_prefix=(chrt -f "$2"); shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
check_int --repeat "$repeat" 1 100
[[ -x "$cli" ]] || { echo "$0: no cnnbench at $cli (build first, or --cli PATH)" >&2; exit 1; }
if [[ -z "$work" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$out" "$work"

"${chrt_prefix[@]}" "$cli" sweep --model lenet5,fc3 --strategies serial,stream,cluster \
  --cores 1,2 --nodes 1,2 --repeat "$repeat" --out "$work/sweep.json" \
  --trace-dir "$work/traces" --force
# --force: the charts are remade over the committed ones.
for point in lenet5-stream-n1c2 lenet5-cluster-n1c2 lenet5-cluster-n2c1 fc3-cluster-n1c2; do
  "$cli" plot --trace "$work/traces/$point.json" --out "$out" --force
done
echo "sweep: $work/sweep.json; figures in $out"
