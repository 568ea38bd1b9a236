#!/usr/bin/env bash
# A link cut mid-run, read the same whichever layer notices it first. LeNet-5 cluster over
# emulated hosts, checkpointing every 10 steps; one host's link goes down once the first
# checkpoint is there.
#   1. 4 hosts, host 2 cut, --comm-timeout 5: our deadline notices first.
#   2. 2 hosts, host 1 cut, --comm-timeout 60: Open MPI's launcher loses the host's daemon first
#      (in about 7 s here), prints a page that blames the daemons' start, and stops the ranks.
# Each job must end within the deadline + 10 s with a non-zero exit, print one cnnbench line
# naming the lost rank, its host and the last checkpoint (after the launcher's page, where there
# is one), write no report, and leave a checkpoint that loads and resumes. Everything it starts
# is bounded and removed.
# Usage: test_lost_link.sh CNNBENCH_CLI SOURCE_DIR. Exit 77: cannot run here.
set -euo pipefail
cli=$1
source_dir=$2
script=$source_dir/scripts/emulate-hosts.sh

# shellcheck source=tests/net/common.sh
. "$(dirname "$0")/common.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-cut-XXXXXX")
dir=""
job=""
cleanup() {
  local status=$?
  # The job's processes, if it is still running (it should not be): by PID, then its group.
  if [[ -n $job ]] && kill -0 "$job" 2>/dev/null; then
    kill -KILL -- "-$job" 2>/dev/null || kill -KILL "$job" 2>/dev/null || true
  fi
  [[ -z $dir ]] || timeout 60 "$script" down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# cut_run HOSTS CUT COMM_TIMEOUT: the job over HOSTS emulated hosts, host CUT's link cut.
cut_run() {
  local count=$1 cut=$2 comm_timeout=$3
  local run=$work/run-$count
  mkdir -p "$run"
  dir=$run/hosts
  up_or_skip "$script" "$count" "$dir"
  local HOSTS NAMESPACES HOST_VETH PREFIX
  # shellcheck disable=SC1091
  . "$dir/hosts.env"
  read -r -a hosts <<<"$HOSTS"
  read -r -a namespaces <<<"$NAMESPACES"
  local host=${hosts[$cut]} checkpoint=$run/last.safetensors log=$run/job.log

  # Its own process group (setsid), so that the cleanup can end every process the job started.
  setsid timeout -k 5 180 "$dir/mpirun" -np "$count" --bind-to none "$cli" train --model lenet5 \
    --strategy cluster --threads 1 --synthetic 2048 --batch 64 --steps 100000 --progress none \
    --comm-timeout "$comm_timeout" --checkpoint-every 10 --save "$checkpoint" \
    --report "$run/report.json" >"$log" 2>&1 &
  job=$!

  # The first checkpoints, then the cut.
  for _ in $(seq 600); do
    [[ -s $checkpoint ]] && break
    kill -0 "$job" 2>/dev/null || { cat "$log"; fail "the job ended before its first checkpoint"; }
    sleep 0.1
  done
  [[ -s $checkpoint ]] || fail "no checkpoint after 60 s"
  sleep 0.5
  local cut_at
  cut_at=$(date +%s%N)
  timeout 10 ip -n "${namespaces[$cut]}" link set "$HOST_VETH" down
  echo "$count hosts: cut host $cut ($host), --comm-timeout $comm_timeout"

  local job_status=0
  wait "$job" || job_status=$?
  local ended_after_ms=$((($(date +%s%N) - cut_at) / 1000000))
  job=""
  echo "the job ended ${ended_after_ms} ms after the cut, exit $job_status"
  local limit_ms=$(((comm_timeout + 10) * 1000))
  ((ended_after_ms <= limit_ms)) || { cat "$log"; fail "ended after ${ended_after_ms} ms, more than --comm-timeout + 10 s"; }
  ((job_status != 0 && job_status != 124 && job_status != 137)) ||
    { cat "$log"; fail "exit status $job_status (0, or killed by the test's own timeout)"; }
  local line lines
  lines=$(grep -c "^cnnbench: error: lost contact" "$log" || true)
  ((lines == 1)) || { cat "$log"; fail "$lines lines say the contact was lost, not one"; }
  line=$(grep -m1 "^cnnbench: error: lost contact with rank $cut (host $host)" "$log") ||
    { cat "$log"; fail "no line names rank $cut and host $host"; }
  [[ $line == *"; the last checkpoint is $checkpoint (step "*"); ending the job" ]] ||
    { cat "$log"; fail "the line does not name the last checkpoint: $line"; }
  echo "ok   $line"
  # Before our deadline, only the launcher can have noticed, and the line says so.
  if ((ended_after_ms < comm_timeout * 1000)); then
    [[ $line == *"when the launcher stopped the job"* ]] ||
      { cat "$log"; fail "the job ended before --comm-timeout, and the line does not say the launcher stopped it"; }
  fi
  # Open MPI's page, where it printed one, is not the last word.
  local page
  page=$(grep -n -m1 "ORTE was unable\|ORTE has lost" "$log" | cut -d: -f1 || true)
  if [[ -n $page ]]; then
    (($(grep -n -m1 "lost contact" "$log" | cut -d: -f1) > page)) ||
      { cat "$log"; fail "the launcher's page comes after the line"; }
    echo "ok   the line comes after the launcher's page"
  fi
  [[ ! -e $run/report.json ]] || fail "a report was written for a failed job"

  # The last checkpoint is whole and the one the line names: it loads, and the run resumes from
  # it (5 more steps, serial).
  local step
  step=$(timeout 60 python3 - "$checkpoint" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
size = struct.unpack("<Q", raw[:8])[0]
meta = json.loads(raw[8:8 + size]).get("__metadata__", {})
print(meta["global_step"])
PY
  ) || fail "the checkpoint's header cannot be read"
  [[ $step =~ ^[0-9]+$ && $step -ge 10 && $((step % 10)) -eq 0 ]] || fail "checkpoint at step '$step'"
  [[ $line == *"(step $step); ending the job" ]] || fail "the line names another step than the checkpoint's $step"
  timeout 120 "$cli" train --model lenet5 --strategy serial --synthetic 2048 --batch 64 \
    --steps $((step + 5)) --resume "$checkpoint" --quiet --save "$run/resumed.safetensors" ||
    fail "resuming from the checkpoint at step $step failed"
  echo "ok   the checkpoint at step $step loads and resumes"

  # No namespace of ours is left, and no process of the job.
  timeout 60 "$script" down --dir "$dir"
  [[ -z $(timeout 10 ip netns list | grep "^$PREFIX-" || true) ]] || fail "down left namespaces"
  dir=""
}

cut_run 4 2 5
cut_run 2 1 60
echo "all lost-link checks passed"
