#!/usr/bin/env bash
# A link cut mid-run: LeNet-5 cluster 4 x 1 over 4 emulated hosts, checkpointing every 10 steps;
# host 2's link goes down once the first checkpoint is there. The job must end within
# --comm-timeout + 10 s with a non-zero exit, name rank 2 and its host, write no report, and
# leave a checkpoint that loads and resumes. Everything it starts is bounded and removed.
# Usage: test_lost_link.sh CNNBENCH_CLI SOURCE_DIR. Exit 77: cannot run here.
set -euo pipefail
cli=$1
source_dir=$2
script=$source_dir/scripts/emulate-hosts.sh
comm_timeout=5

# shellcheck source=tests/net/common.sh
. "$(dirname "$0")/common.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-cut-XXXXXX")
dir=$work/hosts
job=""
cleanup() {
  local status=$?
  # The job's processes, if it is still running (it should not be): by PID, then its group.
  if [[ -n $job ]] && kill -0 "$job" 2>/dev/null; then
    kill -KILL -- "-$job" 2>/dev/null || kill -KILL "$job" 2>/dev/null || true
  fi
  timeout 60 "$script" down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

up_or_skip "$script" 4 "$dir"
# shellcheck disable=SC1091
. "$dir/hosts.env"
read -r -a hosts <<<"$HOSTS"
read -r -a namespaces <<<"$NAMESPACES"

checkpoint=$work/last.safetensors
# Its own process group (setsid), so that the cleanup can end every process the job started.
setsid timeout -k 5 180 "$dir/mpirun" -np 4 --bind-to none "$cli" train --model lenet5 \
  --strategy cluster --threads 1 --synthetic 2048 --batch 64 --steps 100000 --progress none \
  --comm-timeout "$comm_timeout" --checkpoint-every 10 --save "$checkpoint" \
  --report "$work/report.json" >"$work/job.log" 2>&1 &
job=$!

# The first checkpoints, then the cut (about step 20).
for _ in $(seq 600); do
  [[ -s $checkpoint ]] && break
  kill -0 "$job" 2>/dev/null || { cat "$work/job.log"; fail "the job ended before its first checkpoint"; }
  sleep 0.1
done
[[ -s $checkpoint ]] || fail "no checkpoint after 60 s"
sleep 0.5
cut_at=$(date +%s%N)
timeout 10 ip -n "${namespaces[2]}" link set "$HOST_VETH" down
echo "cut host 2 (${hosts[2]}) at step ~20"

job_status=0
wait "$job" || job_status=$?
ended_after_ms=$((($(date +%s%N) - cut_at) / 1000000))
job=""
echo "the job ended ${ended_after_ms} ms after the cut, exit $job_status"
limit_ms=$(((comm_timeout + 10) * 1000))
((ended_after_ms <= limit_ms)) || { cat "$work/job.log"; fail "ended after ${ended_after_ms} ms, more than --comm-timeout + 10 s"; }
((job_status != 0 && job_status != 124 && job_status != 137)) ||
  { cat "$work/job.log"; fail "exit status $job_status (0, or killed by the test's own timeout)"; }
grep -q "lost contact with rank 2 (host ${hosts[2]})" "$work/job.log" ||
  { cat "$work/job.log"; fail "the error does not name rank 2 and host ${hosts[2]}"; }
echo "ok   $(grep -m1 'lost contact' "$work/job.log")"
[[ ! -e $work/report.json ]] || fail "a report was written for a failed job"

# The last checkpoint is whole: it loads, and the run resumes from it (5 more steps, serial).
step=$(timeout 60 python3 - "$checkpoint" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
size = struct.unpack("<Q", raw[:8])[0]
meta = json.loads(raw[8:8 + size]).get("__metadata__", {})
print(meta["global_step"])
PY
) || fail "the checkpoint's header cannot be read"
[[ $step =~ ^[0-9]+$ && $step -ge 10 && $((step % 10)) -eq 0 ]] || fail "checkpoint at step '$step'"
timeout 120 "$cli" train --model lenet5 --strategy serial --synthetic 2048 --batch 64 \
  --steps $((step + 5)) --resume "$checkpoint" --quiet --save "$work/resumed.safetensors" ||
  fail "resuming from the checkpoint at step $step failed"
echo "ok   the checkpoint at step $step loads and resumes"

# No namespace of ours is left, and no process of the job.
timeout 60 "$script" down --dir "$dir"
[[ -z $(timeout 10 ip netns list | grep "^$PREFIX-" || true) ]] || fail "down left namespaces"
echo "all lost-link checks passed"
