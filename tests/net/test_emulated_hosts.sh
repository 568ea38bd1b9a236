#!/usr/bin/env bash
# scripts/emulate-hosts.sh end to end: the cluster strategy 2 x 1, 2 x 2 and 4 x 1 over emulated
# hosts (real TCP between network namespaces), both models, uncapped and at 1gbit, trains what the
# serial strategy trains (with --shard-data: serial with --shards N): the loss curve of 50 steps,
# then one more step that both take from the cluster's checkpoint (tests/py/compare_runs.py); the
# 1gbit rerun gives the same bits; the report names the hosts, the transport and the rate; a
# sweep --emulate-hosts runs its cluster point over tcp and leaves no namespace; the root network
# namespace reads the same before `up` and after `down`, and neither a failed `up` nor `down`
# leaves anything behind.
# Usage: test_emulated_hosts.sh CNNBENCH_CLI SOURCE_DIR [PYTHON3]. Exit 77: cannot run here.
set -euo pipefail
cli=$1
source_dir=$2
python=${3:-python3}
script=$source_dir/scripts/emulate-hosts.sh
compare=$source_dir/tests/py/compare_runs.py

# shellcheck source=tests/net/common.sh
. "$(dirname "$0")/common.sh"
"$python" -c 'import numpy' 2>/dev/null || skip "$python has no numpy"

work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-net-XXXXXX")
dir=$work/hosts
cleanup() {
  local status=$?
  timeout 60 "$script" down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

root_namespace() { timeout 10 ip -br addr; timeout 10 ip -br link; timeout 10 ip route; timeout 10 tc qdisc; }
# The namespaces of the set in $dir (emulate-hosts.sh names them cnb-<sha1 of the path>-*).
prefix=cnb-$(printf '%s' "$(realpath -m "$dir")" | sha1sum | cut -c1-6)
ours() { timeout 10 ip netns list | awk '{print $1}' | grep "^$prefix-" || true; }

before=$(root_namespace)

# A machine that cannot make namespaces (a container without CAP_SYS_ADMIN) skips.
up_or_skip "$script" 1 "$dir"
timeout 60 "$script" down --dir "$dir"

# A failed `up` (tc rejects the rate once the namespaces exist) exits non-zero, leaves nothing.
status=0
timeout 60 "$script" up 2 --rate 12furlongs --dir "$dir" >/dev/null 2>&1 || status=$?
[[ $status -ne 0 ]] || fail "up with --rate 12furlongs succeeded"
[[ -z $(ours) ]] || fail "a failed up left namespaces: $(ours | tr '\n' ' ')"
[[ ! -e $dir ]] || fail "a failed up left $dir: $(ls -A "$dir")"
echo "ok   a failed up (exit $status) left nothing"

train=(train --synthetic 512 --batch 32 --seed 7 --quiet)
for model in lenet5 fc3; do
  timeout 120 "$cli" "${train[@]}" --steps 50 --model "$model" --strategy serial \
    --report "$work/$model-serial.json"
  # The per-node blocks' sample order, on one process.
  for shards in 2 4; do
    timeout 120 "$cli" "${train[@]}" --steps 50 --model "$model" --strategy serial --shards "$shards" \
      --report "$work/$model-serial-shards$shards.json"
  done
done

# cluster HOSTS x THREADS over the set in $dir: weights to $work/NAME.safetensors, report to
# $work/NAME.json. Further arguments go to train. With a REFERENCE (MODEL-serial or
# MODEL-serial-shardsN, the serial report), the cluster and serial then take one more step from
# NAME.safetensors, and compare_runs.py holds the two runs against each other.
cluster() {
  local name=$1 hosts=$2 threads=$3 model=$4 reference=$5
  shift 5
  timeout -k 5 120 "$dir/mpirun" -np "$hosts" --bind-to none "$cli" "${train[@]}" --steps 50 \
    --model "$model" --strategy cluster --threads "$threads" "$@" \
    --save "$work/$name.safetensors" --report "$work/$name.json" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "$name: mpirun exited $?"; }
  [[ -n $reference ]] || return 0
  local serial_flags=()
  [[ $reference != *-shards* ]] || serial_flags=(--shards "${reference##*-shards}")
  timeout -k 5 120 "$dir/mpirun" -np "$hosts" --bind-to none "$cli" "${train[@]}" --steps 51 \
    --model "$model" --strategy cluster --threads "$threads" "$@" \
    --resume "$work/$name.safetensors" --save "$work/$name-step.safetensors" \
    >"$work/$name-step.log" 2>&1 || { local status=$?; cat "$work/$name-step.log"; fail "$name: the step after: mpirun exited $status"; }
  timeout 120 "$cli" "${train[@]}" --steps 51 --model "$model" --strategy serial "${serial_flags[@]}" \
    --resume "$work/$name.safetensors" --save "$work/$name-serial-step.safetensors" ||
    fail "$name: serial's step after the cluster's checkpoint failed"
  timeout 60 "$python" "$compare" equivalent --reports "$work/$name.json" "$work/$reference.json" \
    --start "$work/$name.safetensors" \
    --steps "$work/$name-step.safetensors" "$work/$name-serial-step.safetensors" ||
    fail "$name: differs from $reference"
}
# The report of run NAME names the set's hosts, transport tcp and the rate RATE ('' = null).
check_network() {
  local name=$1 rate=$2
  # shellcheck disable=SC1091
  hosts=$(. "$dir/hosts.env" && echo "$HOSTS")
  timeout 60 "$python" - "$work/$name.json" "$hosts" "$rate" <<'EOF' || fail "$name: the report's network"
import json, sys
report, hosts, rate = json.load(open(sys.argv[1])), sys.argv[2].split(), sys.argv[3] or None
network = report["strategy_metrics"]["network"]
expected = {"transport": "tcp", "hosts": hosts, "rank_hosts": hosts, "link_rate": rate}
if network != expected:
    sys.exit(f"FAIL: strategy_metrics.network is {network}, expected {expected}")
per_rank = [r["host"] for r in report["strategy_metrics"]["per_rank"]]
if per_rank != hosts:
    sys.exit(f"FAIL: per_rank hosts {per_rank}, expected {hosts}")
print(f"ok   {sys.argv[1].rsplit('/', 1)[-1]}: tcp over {len(hosts)} hosts, link_rate {rate}")
EOF
}

# Every shape (hosts x threads) of both models, with and without per-host data blocks, uncapped
# and at 1gbit. The uncapped runs are held against serial; the 1gbit reruns must give their bits.
for rate in "" 1gbit; do
  label=${rate:-uncapped}
  for count in 2 4; do
    timeout 60 "$script" up "$count" ${rate:+--rate "$rate"} --dir "$dir" >/dev/null
    # Hosts that share cores make their ranks give a core away while they wait (and only then).
    yielding=$(timeout -k 5 60 "$dir/mpirun" -np "$count" --bind-to none \
      sh -c 'echo "${OMPI_MCA_mpi_yield_when_idle:-0}"' | sort -u)
    want=0
    ((count <= $(nproc))) || want=1
    [[ $yielding == "$want" ]] ||
      fail "$count hosts on $(nproc) CPUs: the ranks' mpi_yield_when_idle is '$yielding', want $want"
    shapes=("$count 1")
    ((count == 2)) && shapes+=("2 2")
    for shape in "${shapes[@]}"; do
      read -r h threads <<<"$shape"
      for model in lenet5 fc3; do
        serial="" shards=""
        [[ -n $rate ]] || { serial=$model-serial; shards=$model-serial-shards$h; }
        cluster "$model-${h}x$threads-$label" "$h" "$threads" "$model" "$serial"
        # Each host reads only its own block of the training set.
        cluster "$model-${h}x$threads-shard-$label" "$h" "$threads" "$model" "$shards" --shard-data
      done
    done
    check_network "lenet5-${count}x1-$label" "$rate"
    check_network "fc3-${count}x1-shard-$label" "$rate"
    if ((count == 2)); then check_network "fc3-2x2-$label" "$rate"; fi
    timeout 60 "$script" down --dir "$dir"
    [[ -z $(ours) ]] || fail "down left namespaces: $(ours | tr '\n' ' ')"
  done
done
# The same shape sums in the same order whatever the link: a rerun gives the same bits.
for shape in 2x1 2x2 4x1; do
  for model in lenet5 fc3; do
    for run in "$model-$shape" "$model-$shape-shard"; do
      timeout 60 "$python" "$compare" same-bits "$work/$run-1gbit.safetensors" \
        "$work/$run-uncapped.safetensors" || fail "$run: the 1gbit rerun differs from the uncapped run"
    done
  done
done

timeout 60 "$script" down --dir "$dir" || fail "a second down failed"
[[ -z $(ours) ]] || fail "down left namespaces: $(ours | tr '\n' ' ')"
[[ ! -e $dir ]] || fail "down left $dir"

# sweep --emulate-hosts brings its own set up before the cluster points and down after them.
namespaces_before=$(timeout 10 ip netns list | wc -l)
timeout -k 5 300 "$cli" sweep --model fc3 --strategies serial,cluster --cores 1 --nodes 2 \
  --emulate-hosts 2 --rate 1gbit --repeat 1 --warmup 0 --steps 5 --synthetic 512 --batch 32 \
  --quiet --out "$work/sweep.json" >"$work/sweep.log" 2>&1 ||
  { cat "$work/sweep.log"; fail "sweep --emulate-hosts exited $?"; }
timeout 60 "$python" - "$work/sweep.json" <<'EOF' || fail "sweep --emulate-hosts: the report"
import json, re, sys
report = json.load(open(sys.argv[1]))
network = report["config"].get("network")
if not network or network["emulated_hosts"] != 2 or network["rate"] != "1gbit" \
        or not re.fullmatch(r"10\.213\.\d+\.0/24", network["subnet"]):
    sys.exit(f"FAIL: config.network is {network}")
point = next((p for p in report["points"] if p["id"] == "fc3/cluster/n2c1"), None)
if point is None or point["status"] != "ok":
    sys.exit(f"FAIL: fc3/cluster/n2c1 is {point and point['status']}")
ran = point["strategy_metrics"]["network"]
if ran["transport"] != "tcp" or len(ran["hosts"]) != 2 or ran["link_rate"] != "1gbit":
    sys.exit(f"FAIL: the point ran over {ran}")
print(f"ok   sweep --emulate-hosts 2 --rate 1gbit: fc3/cluster/n2c1 over tcp, {ran['hosts']}")
EOF
[[ $(timeout 10 ip netns list | wc -l) -eq $namespaces_before ]] ||
  fail "the sweep left namespaces: $(timeout 10 ip netns list | tr '\n' ' ')"

# tune --emulate-hosts plans the cluster over the hosts from its link's profile, measures through
# their mpirun, and takes them down.
timeout -k 5 300 "$cli" tune --model lenet5 --cores 1 --emulate-hosts 2 --rate 1gbit --repeat 1 \
  --warmup 0 --min-time 0.02 --budget 20 --synthetic 512 --quiet --out "$work/tune.json" \
  >"$work/tune.log" 2>&1 || { cat "$work/tune.log"; fail "tune --emulate-hosts exited $?"; }
timeout 60 "$python" - "$work/tune.json" <<'EOF' || fail "tune --emulate-hosts: the report"
import json, sys
report = json.load(open(sys.argv[1]))
config, profile = report["config"], report["profile"]
if config["nodes"] != 2 or config["network"]["emulated_hosts"] != 2 or config["network"]["rate"] != "1gbit":
    sys.exit(f"FAIL: config is {config['nodes']} nodes over {config['network']}")
link = profile.get("link") or {}
if profile["nodes"] != 2 or not link.get("beta_s_per_byte", 0) > 0:
    sys.exit(f"FAIL: the profile has no link over the 2 hosts: {link}")
# overlap on/off x balance static/dynamic x rank update replicated/sharded, one thread a rank
if len(report["candidates"]) != 8 or any(c["nodes"] != 2 for c in report["candidates"]):
    sys.exit(f"FAIL: candidates {[c['label'] for c in report['candidates']]}")
ok = [m for m in report["measured"] if m["status"] == "ok"]
if not ok or any(not m["id"].startswith("lenet5/cluster/n2c1") for m in ok) \
        or ok[0]["command"][:3] != ["build/emulated-hosts/mpirun", "-np", "2"]:
    sys.exit(f"FAIL: measured {[(m['id'], m['status']) for m in report['measured']]}")
if report["winners"].get("cluster") is None:
    sys.exit("FAIL: no cluster winner")
print(f"ok   tune --emulate-hosts 2 --rate 1gbit: {len(ok)} candidates measured over the hosts, "
      f"winner {report['winners']['cluster']['label']}")
EOF
[[ $(timeout 10 ip netns list | wc -l) -eq $namespaces_before ]] ||
  fail "the tune left namespaces: $(timeout 10 ip netns list | tr '\n' ' ')"

after=$(root_namespace)
[[ $before == "$after" ]] ||
  fail "the root network namespace changed:"$'\n'"$(diff <(echo "$before") <(echo "$after"))"
echo "ok   the root namespace reads the same after down; no namespace of ours is left"
echo "all emulated-host checks passed"
