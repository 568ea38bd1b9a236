#!/usr/bin/env bash
# The stream strategy's pipeline bubble against GPipe's: for each model and micro-batch count M,
# REPS runs of the paper's graph (--widths s=1) on CORES pinned cores, interleaved (each round runs
# every M once, so slow phases of a shared machine hit every M alike). Per run, from the report's
# metrics.time_breakdown: the fill/drain share of each stage's wall time (fill_drain_s / wall_s,
# averaged over the stages), the starvation share, the whole idle share (1 - busy_s / wall_s,
# averaged), and the schedule's stage count (the largest actor stage + 1). Prints a Markdown table
# of medians beside GPipe's bubble fraction (K-1)/(M+K-1), K = the cores.
#
# usage: bench/gpipe_bubble.sh [--cli PATH] [--reps N] [--models "lenet5 fc3"] [--ms "1 2 4 8"]
#                              [--cores K] [--steps N] [--consistency MODE] [--keep DIR]
#                              [--analyze DIR] [--chrt PRIORITY]
# --keep DIR: the reports stay in DIR; --analyze DIR: no runs, the table of the reports in DIR.
# --chrt PRIORITY: each run under `chrt -f PRIORITY` (root), so that other programs on a shared
# machine do not take the cores mid-run: a descheduled core thread shows up as idle time.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root=$(dirname "$here")
source "$root/scripts/check_args.sh"
answer_help "$@"
cli="$root/build/ci/apps/cnnbench"
reps=5
models="lenet5 fc3"
ms="1 2 4 8"
cores=2
steps=200
consistency=strict
keep=""
analyze=""
chrt_prefix=()
usage="usage: $0 [--cli PATH] [--reps N] [--models \"lenet5 fc3\"] [--ms \"1 2 4 8\"] [--cores K] [--steps N] [--consistency MODE] [--keep DIR] [--analyze DIR] [--chrt PRIORITY]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --ms) ms="$2"; shift 2 ;;
    --cores) cores="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --consistency) consistency="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --analyze) analyze="$2"; keep="$2"; shift 2 ;;
    --chrt) check_int --chrt "$2" 1 99; chrt_prefix=(chrt -f "$2"); shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
check_int --reps "$reps" 1 100
check_int --cores "$cores" 1 4096
check_int --steps "$steps" 1 1000000
for m in $ms; do check_int --ms "$m" 1 1024; done
[[ -x "$cli" ]] || { echo "gpipe_bubble: error: no cnnbench binary at $cli (pass --cli PATH)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -n "$keep" ]]; then mkdir -p "$keep"; fi

# One run's figures as a TSV row: fill_drain share, starvation share, idle share, stages,
# images/s, final loss.
figures() {
  jq -r '
    [.metrics.time_breakdown.workers[] | select(.kind == "stage")] as $w
    | ($w | length) as $n
    | [ ([$w[] | .pipeline_bubble.fill_drain_s / .wall_s] | add / $n),
        ([$w[] | .pipeline_bubble.starvation_s / .wall_s] | add / $n),
        ([$w[] | 1 - .busy_s / .wall_s] | add / $n),
        ([.strategy_metrics.actors[].stage] | max + 1),
        .metrics.images_per_s,
        .metrics.final_loss ]
    | @tsv' "$1"
}

reports=${keep:-$work}
if [[ -z "$analyze" ]]; then
  for rep in $(seq 1 "$reps"); do
    for model in $models; do
      for m in $ms; do
        timeout 300 "${chrt_prefix[@]}" "$cli" train --model "$model" --strategy stream --cores "$cores" --widths s=1 \
          --consistency "$consistency" --microbatches "$m" --steps "$steps" --synthetic 8192 \
          --progress none --report "$reports/$model-m$m-r$rep.json" > /dev/null
        cut -d' ' -f1 /proc/loadavg >> "$reports/loadavg.txt"
      done
    done
  done
fi
for model in $models; do
  for m in $ms; do
    for report in "$reports/$model-m$m-r"*.json; do
      printf '%s\t%s\t%s\n' "$model" "$m" "$(figures "$report")" >> "$work/rows.tsv"
    done
  done
done

python3 - "$work/rows.tsv" "$cores" <<'EOF'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
K = int(sys.argv[2])
print(f"| model | M | GPipe (K-1)/(M+K-1), K={K} | fill/drain share | starvation share | "
      "idle share (1 - busy/wall) | schedule stages | images/s | runs |")
print("|---|---|---|---|---|---|---|---|---|")
seen = []
for r in rows:
    if (r[0], r[1]) not in seen:
        seen.append((r[0], r[1]))
for model, m in seen:
    runs = [r for r in rows if r[0] == model and r[1] == m]
    med = lambda i: statistics.median(float(r[i]) for r in runs)
    lo_hi = lambda i: f"{min(float(r[i]) for r in runs):.3f}-{max(float(r[i]) for r in runs):.3f}"
    gpipe = (K - 1) / (int(m) + K - 1)
    stages = sorted({r[5] for r in runs})
    print(f"| {model} | {m} | {gpipe:.3f} | {med(2):.3f} ({lo_hi(2)}) | {med(3):.3f} | "
          f"{med(4):.3f} | {','.join(stages)} | {med(6):,.0f} | {len(runs)} |")
EOF
if [[ -s "$reports/loadavg.txt" ]]; then
  echo
  echo "1-minute load average after each run: $(sort -n "$reports/loadavg.txt" | head -1)-$(sort -n "$reports/loadavg.txt" | tail -1)"
fi
