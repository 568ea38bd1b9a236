#!/usr/bin/env bash
# cnnbench under Slurm, on a private one-node Slurm this test starts and stops itself: munged,
# slurmctld and slurmd with their key, sockets, ports, state and logs in a temp folder (nothing
# under /etc or /run changes). Checked:
#   1. scripts/slurm/cnnbench-sweep.sbatch submitted with 2 tasks: its sweep report has a cluster
#      point on 2 ranks started by `srun --mpi=pmix -n 2`, the allreduce benchmark ran under srun,
#      the report validates against the schema, and the 2-rank point's final loss equals the
#      serial point's within 1e-4;
#   2. `srun --mpi=pmix -n 2 cnnbench train --strategy cluster`: a report of 2 ranks whose loss
#      curve equals a serial run's, and one more step from its checkpoint (--resume) whose
#      weights and momentum equal a serial step's from there (tests/py/compare_runs.py);
#   3. `srun -n 2` without --mpi=pmix: the ranks fail with a message that names it;
#   4. `sweep --launcher srun` outside an allocation stops before its first point (exit 1).
# Exit 77 (skipped) only where Slurm's daemons are not installed or cannot run (not root).
#
#   tests/slurm/test_slurm.sh --cli build/ci/apps/cnnbench --source . [--python /usr/bin/python3]
set -euo pipefail

usage="usage: $0 --cli CNNBENCH --source SOURCE_DIR [--python PYTHON3 with numpy]"
cli="" source="" python=/usr/bin/python3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[[ -x "$cli" && -d "$source" && -x "$python" ]] || { echo "$usage" >&2; exit 2; }
cli=$(cd "$(dirname "$cli")" && pwd)/$(basename "$cli")
source=$(cd "$source" && pwd)

for program in munged slurmctld slurmd sbatch srun squeue scontrol sinfo; do
  command -v "$program" >/dev/null || {
    echo "SKIP: $program not found: install slurm-wlm and munge (CNNBENCH_SETUP_SLURM=1 scripts/setup.sh)"
    exit 77
  }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: slurmd must run as root to start jobs"; exit 77; }
"$cli" info --json | "$python" -c 'import json, sys; sys.exit(not json.load(sys.stdin)["features"]["cluster"]["available"])' ||
  { echo "SKIP: this cnnbench was built without MPI (no cluster strategy)"; exit 77; }

step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# The temp folder must be searchable by everyone: munged refuses a socket below a folder that
# is not.
dir=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-slurm.XXXXXX")
chmod 755 "$dir"
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" "$dir/work"
daemon_pids=()

# Stops exactly what this test started, by PID, on success and failure alike: the jobs of this
# private cluster first (their steps end with them), then slurmd, slurmctld and munged.
cleanup() {
  local status=$?
  set +e
  if [[ -f "$dir/slurm.conf" && -f "$dir/slurmctld.pid" ]]; then
    local queued
    queued=$(SLURM_CONF="$dir/slurm.conf" timeout 10 squeue -h -o %i 2>/dev/null)
    if [[ -n "$queued" ]]; then
      SLURM_CONF="$dir/slurm.conf" timeout 10 scancel $queued
      for _ in $(seq 50); do
        [[ -z "$(SLURM_CONF="$dir/slurm.conf" timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
        sleep 0.2
      done
    fi
  fi
  for pid_file in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [[ -s "$pid_file" ]] && daemon_pids+=("$(cat "$pid_file")")
  done
  for pid in "${daemon_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${daemon_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "daemon $pid did not stop on SIGTERM: killing it"; kill -9 "$pid"; }
  done
  if [[ $status -ne 0 ]]; then
    for log in "$dir"/log/*.log "$dir"/work/*.log "$dir"/munge/munged.log; do
      [[ -f "$log" ]] && { echo "---- $log (last 30 lines)"; tail -n 30 "$log"; }
    done
  fi
  rm -rf "$dir"
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two free TCP ports for slurmctld and slurmd (not Slurm's defaults 6817/6818).
read -r ctld_port slurmd_port < <("$python" -c '
import socket
sockets = [socket.socket() for _ in range(2)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])')
host=$(hostname -s)
cpus=$(nproc)

step "munged with its own key and socket"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
timeout 10 munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed" || fail "munged did not start"

cat > "$dir/slurm.conf" <<EOF
ClusterName=cnbtest
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$dir/slurm.conf
# The clients below talk to this cluster only; variables of an allocation this test may run in
# would point them at another one.
unset SLURM_JOB_ID SLURM_JOBID SLURM_STEP_ID SLURM_NTASKS SLURM_JOB_CPUS_PER_NODE

step "slurmctld and slurmd on ports $ctld_port and $slurmd_port"
timeout 20 slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
timeout 20 slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
state=""
for _ in $(seq 60); do
  state=$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || fail "the node is '$state' after 30 s, not idle"
timeout 10 srun --mpi=list 2>&1 | grep -q pmix || fail "srun has no pmix plugin (srun --mpi=list)"

step "sbatch -n 2 scripts/slurm/cnnbench-sweep.sbatch"
cd "$dir/work"
sweep_flags=(--model fc3 --synthetic 512 --batch 32 --steps 20 --repeat 1 --warmup 0 --seed 7)
job=$(timeout 20 sbatch --parsable -n 2 --time=5 -o "$dir/work/sweep-job.log" \
        --export=ALL,CNNBENCH="$cli" "$source/scripts/slurm/cnnbench-sweep.sbatch" \
        "$dir/work/sweep.json" "${sweep_flags[@]}")
job=${job%%;*}
job_state=""
for _ in $(seq 240); do
  job_state=$(timeout 5 scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' || true)
  case "$job_state" in
    JobState=COMPLETED|JobState=FAILED|JobState=CANCELLED|JobState=TIMEOUT|JobState=NODE_FAIL|JobState=OUT_OF_MEMORY) break ;;
  esac
  sleep 0.5
done
cat "$dir/work/sweep-job.log"
[[ $job_state == JobState=COMPLETED ]] || fail "sweep job $job ended as '${job_state:-unknown (not done in 120 s)}'"

"$python" - "$dir/work/sweep.json" "$source" <<'EOF'
import json, sys
path, source = sys.argv[1], sys.argv[2]
report = json.load(open(path))
points = {p["id"]: p for p in report["points"]}
problems = []
assert report["complete"], "the sweep report is not complete"
assert report["config"]["launcher"]["kind"] == "srun", report["config"]["launcher"]
serial = points["fc3/serial/n1c1"]
pair = points.get("fc3/cluster/n2c1")
assert pair is not None, f"no 2-rank cluster point: {sorted(points)}"
assert pair["status"] == "ok", pair
assert pair["strategy_metrics"]["ranks"] == 2, pair["strategy_metrics"]
command = pair["launch"]["command"]
assert pair["launch"]["launcher"] == "srun" and command[:4] == ["srun", "--mpi=pmix", "-n", "2"], command
assert "train" in command and "--strategy" in command, command
allreduce = report["allreduce"]
assert allreduce["ranks"] == 2 and "fit" in allreduce, allreduce
assert allreduce["launch"]["command"][:4] == ["srun", "--mpi=pmix", "-n", "2"], allreduce["launch"]
relative = abs(pair["final_loss"] - serial["final_loss"]) / abs(serial["final_loss"])
print(f"sweep: fc3/cluster/n2c1 final loss {pair['final_loss']:.7f}, serial {serial['final_loss']:.7f}, "
      f"relative difference {relative:.2e}")
assert relative <= 1e-4, "the 2-rank point's final loss differs from serial"
try:
    import jsonschema
except ImportError:
    print("sweep: python3-jsonschema missing: schema not checked")
else:
    schema = json.load(open(f"{source}/results/schema/sweep-report.schema.json"))
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(report))
    for e in errors:
        print(f"schema: {'/'.join(map(str, e.path))}: {e.message}")
    assert not errors, "the sweep report does not validate"
print("ok   sweep under sbatch: 2-rank srun point equals serial")
EOF

step "srun --mpi=pmix -n 2 cnnbench train --strategy cluster, against serial"
# Ranks sum the gradient in another order than serial, so the weights drift apart by rounding; a
# ReLU or max-pool decision that such a drift flips changes that step's gradient by ~1e-3 (seen
# after 8 steps of LeNet-5 on AVX2 kernels), and momentum keeps it. So the loss curves of 24 steps
# are compared, and the weights and momentum after one more step that both take from the
# cluster's checkpoint: from the same weights the two differ only by rounding (compare_runs.py).
train_flags=(train --model lenet5 --synthetic 512 --batch 32 --seed 3 --quiet)
srun_train() {  # srun_train LOG ARGS...: the 2-rank cluster run, failing the test with its log
  local log=$1; shift
  timeout 60 srun --mpi=pmix -n 2 --time=2 "$cli" "${train_flags[@]}" --strategy cluster "$@" \
    > "$log" 2>&1 || fail "srun train $* exited $?: $(tail -n 5 "$log")"
}
srun_train "$dir/work/srun-train.log" --steps 24 --save "$dir/work/cluster24.safetensors" \
  --report "$dir/work/cluster.json"
timeout 60 "$cli" "${train_flags[@]}" --steps 24 --report "$dir/work/serial.json" ||
  fail "serial train failed"
srun_train "$dir/work/srun-step.log" --steps 25 --resume "$dir/work/cluster24.safetensors" \
  --save "$dir/work/cluster.safetensors"
timeout 60 "$cli" "${train_flags[@]}" --steps 25 --resume "$dir/work/cluster24.safetensors" \
  --save "$dir/work/serial.safetensors" || fail "serial train from the cluster's checkpoint failed"
"$python" -c 'import json, sys; ranks = json.load(open(sys.argv[1]))["strategy_metrics"]["ranks"]
sys.exit(f"FAIL: the cluster report has {ranks} ranks, not 2" if ranks != 2 else 0)' "$dir/work/cluster.json"
"$python" "$source/tests/py/compare_runs.py" equivalent \
  --reports "$dir/work/cluster.json" "$dir/work/serial.json" --start "$dir/work/cluster24.safetensors" \
  --steps "$dir/work/cluster.safetensors" "$dir/work/serial.safetensors" ||
  fail "srun train: the 2-rank run differs from serial"
echo "ok   srun train: 2 ranks, the loss curve of 24 steps and one more step equal serial's"

step "srun without --mpi=pmix: the ranks say what is missing"
set +e
message=$(timeout 60 srun -n 2 --time=2 "$cli" "${train_flags[@]}" --steps 2 --strategy cluster 2>&1)
code=$?
set -e
[[ $code -ne 0 && $message == *"started by srun without an MPI plugin"* ]] ||
  fail "srun -n 2 without --mpi=pmix: exit $code, '$message'"
echo "ok   srun without its PMIx plugin: exit $code, '$(grep -m1 'srun without' <<<"$message")'"

step "sweep --launcher srun outside an allocation"
set +e
message=$(timeout 30 "$cli" sweep --launcher srun --model fc3 --strategies serial,cluster --nodes 1 \
            --steps 1 --repeat 1 --warmup 0 --synthetic 64 --out "$dir/work/outside.json" 2>&1)
code=$?
set -e
[[ $code -eq 1 && $message == *"not inside a Slurm allocation"* && ! -e "$dir/work/outside.json" ]] ||
  fail "outside an allocation: exit $code, '$message'"
echo "ok   outside an allocation: exit 1, '$message'"
echo "PASS"
