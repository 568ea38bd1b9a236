#!/usr/bin/env bash
# The cluster strategy over emulated hosts against shared memory, measured side by side: for each
# model, ROUNDS rounds in which every configuration runs once in turn (shared-memory 2 x 1, then
# 2 and 4 hosts x 1 thread, uncapped, at 1gbit and at 100mbit), then per configuration the median
# images/s, the median share of the wall time spent in exposed communication
# (metrics.time_breakdown.communication_exposed_s / metrics.train_seconds) and that median in
# seconds. Prints a Markdown table. Needs root (scripts/emulate-hosts.sh).
#
# usage: bench/cluster_over_hosts.sh [--cli PATH] [--rounds N] [--models "lenet5 fc3"]
#                                    [--seconds S]
# --seconds: about how long a shared-memory run takes (default 2): the steps of each model are
# chosen once from a shared-memory probe; the uncapped hosts run as many, the capped links a
# tenth (1gbit) or a hundredth (100mbit), at least 20.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root=$(dirname "$here")
source "$root/scripts/check_args.sh"
answer_help "$@"
cli=""
rounds=3
models="lenet5 fc3"
seconds=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    *) echo "usage: $0 [--cli PATH] [--rounds N] [--models \"lenet5 fc3\"] [--seconds S]" >&2; exit 2 ;;
  esac
done
[[ -n $cli ]] || cli=$root/build/release/apps/cnnbench
[[ -x $cli ]] || { echo "$0: no cnnbench at $cli (build it, or pass --cli)" >&2; exit 2; }
check_int --rounds "$rounds" 1 100
check_decimal --seconds "$seconds" 0.1 3600

work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-hosts-bench-XXXXXX")
cleanup() {
  for set in "$work"/set-*; do
    [[ -d $set ]] && timeout 60 "$root/scripts/emulate-hosts.sh" down --dir "$set" >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Every set up once for the whole measurement: set-<hosts>-<rate>.
configs=("shm 2" "2 none" "2 1gbit" "2 100mbit" "4 none" "4 1gbit" "4 100mbit")
for config in "${configs[@]}"; do
  read -r hosts rate <<<"$config"
  [[ $hosts == shm ]] && continue
  args=(up "$hosts" --dir "$work/set-$hosts-$rate")
  [[ $rate == none ]] || args+=(--rate "$rate")
  timeout 60 "$root/scripts/emulate-hosts.sh" "${args[@]}" >/dev/null
done

mpirun_flags=(--bind-to none)
[[ $(id -u) -ne 0 ]] || mpirun_flags+=(--allow-run-as-root)
# run MODEL CONFIG STEPS REPORT: one cluster run of CONFIG ("shm 2", or "HOSTS RATE").
run() {
  local model=$1 config=$2 steps=$3 report=$4 hosts rate launcher
  read -r hosts rate <<<"$config"
  if [[ $hosts == shm ]]; then
    launcher=(mpirun "${mpirun_flags[@]}" -np "$rate")
  else
    launcher=("$work/set-$hosts-$rate/mpirun" --bind-to none -np "$hosts")
  fi
  timeout -k 5 600 "${launcher[@]}" "$cli" train --model "$model" --strategy cluster --threads 1 \
    --synthetic 8192 --steps "$steps" --quiet --report "$report" >/dev/null
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; $rounds rounds" >&2
for model in $models; do
  # Steps for about --seconds of shared memory 2 x 1.
  run "$model" "shm 2" 50 "$work/probe-$model.json"
  steps=$(python3 -c "
import json, math, sys
m = json.load(open('$work/probe-$model.json'))['metrics']
print(max(50, math.ceil(50 * $seconds / m['train_seconds'])))")
  for ((r = 0; r < rounds; r++)); do
    for config in "${configs[@]}"; do
      read -r hosts rate <<<"$config"
      # Capped links are far slower: a tenth (1gbit) or a hundredth (100mbit) of the steps, at
      # least 20, keeps a round in minutes; images/s do not depend on the run's length.
      s=$steps
      [[ $rate == 1gbit ]] && s=$((steps / 10 > 20 ? steps / 10 : 20))
      [[ $rate == 100mbit ]] && s=$((steps / 100 > 20 ? steps / 100 : 20))
      run "$model" "$config" "$s" "$work/$model-$hosts-$rate-$r.json"
    done
  done
  python3 - "$work" "$model" "$rounds" "${configs[@]}" <<'EOF'
import json, statistics, sys
work, model, rounds, configs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
print(f"\n{model}\n\n| run | images/s (median of {rounds}) | exposed communication / wall | exposed s per step |")
print("|---|---|---|---|")
for config in configs:
    hosts, rate = config.split()
    rows = []
    for r in range(rounds):
        report = json.load(open(f"{work}/{model}-{hosts}-{rate}-{r}.json"))
        m = report["metrics"]
        exposed = m["time_breakdown"]["communication_exposed_s"]
        rows.append((m["images_per_s"], exposed / m["train_seconds"], exposed / m["steps"]))
    name = f"shared memory {rate} x 1" if hosts == "shm" else \
        f"{hosts} hosts x 1, {'uncapped' if rate == 'none' else rate}"
    ips = statistics.median(x[0] for x in rows)
    share = statistics.median(x[1] for x in rows)
    per_step = statistics.median(x[2] for x in rows)
    print(f"| {name} | {ips:,.0f} | {share:.0%} | {per_step * 1e3:.2f} ms |")
EOF
done
