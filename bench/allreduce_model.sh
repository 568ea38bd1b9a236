#!/usr/bin/env bash
# Measurements behind the allreduce cost model and its check (docs/cluster.md, "The communication
# model"), kept as JSON in OUT:
#   profile-<hosts>-<rate>.json   allreduce-bench, Open MPI's default algorithm, 4 B .. 4 MiB, over
#                                 shared memory (hosts "shm", 2 and 4 ranks) and 2 and 4 emulated
#                                 hosts uncapped, at 1gbit and at 100mbit
#   profile-nb-<hosts>-<rate>.json  the same with --nonblocking (MPI_Iallreduce in place, as the
#                                 cluster strategy calls it: libnbc's binomial schedule) over 2 and
#                                 4 emulated hosts: uncapped, 4 B .. 4 MiB, the link the simulation
#                                 runs on; at 1gbit 4 KiB .. 4 MiB and 100mbit 4 KiB .. 1 MiB, its check
#   forced-4-<rate>-<alg>.json    allreduce-bench at 4 hosts with ring, recursive_doubling and
#                                 rabenseifner forced, 64 KiB .. 1 MiB (.. 4 MiB at 1gbit, where
#                                 the tbf burst leaves out everything below 500 kB)
#   exchange-4-<rate>.json        allreduce-bench --exchange at 4 hosts (two pairs swapping at
#                                 once) at 1gbit and 100mbit over the same sizes from 4 KiB: the
#                                 exchange curve that prices recursive doubling's and
#                                 Rabenseifner's pairwise rounds
#   train-<model>-<hosts>-<rate>-<n>.json  cluster runs, 1 thread per rank, of LeNet-5 and FC-3 at
#                                 2 and 4 ranks over shared memory (the compute under the same
#                                 oversubscription of the 2 cores) and over hosts at 1gbit and
#                                 100mbit; 3 repetitions (n = 1, 2, 3), alternating; over the
#                                 hosts also with libnbc left to its own choice, the binomial trees
#                                 (train-libnbc-...; the strategy asks for the ring)
# and "tables" prints docs/cluster.md's tables from them: the forced algorithms at 4 hosts against
# cnnbench scaling-model's prediction from that link's default-algorithm profile (and from the
# joint eager/rendezvous fit, with and without the exchange curve), and each cluster
# run against its prediction (serial step = ranks x busy time per step of the same ranks in shared
# memory; the step simulated over the tbf-shaped links with the same hosts' uncapped nonblocking
# profile). Needs root (scripts/emulate-hosts.sh). Every emulated host set comes down on exit.
#
# "fabric" writes the measured profiles of DIR into FILE (--fabric, default plots/fabric_profiles.json):
# its "measured" entries are replaced, the published ones kept; a profile whose hosts and rate
# have an exchange-*.json carries its exchange curve.
#
# --force: measure over the files of an earlier run in DIR (without it each such measurement is
# refused by cnnbench, named, and the script goes on with the others).
#
# usage: bench/allreduce_model.sh [--cli PATH] --out DIR [--parts "profiles forced exchange train tables fabric"]
#                                 [--fabric FILE] [--force]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root=$(dirname "$here")
source "$root/scripts/check_args.sh"
answer_help "$@"
cli=$root/build/ci/apps/cnnbench
out=""
parts="profiles forced exchange train tables"
fabric=$root/plots/fabric_profiles.json
force=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --parts) parts="$2"; shift 2 ;;
    --fabric) fabric="$2"; shift 2 ;;
    --force) force=(--force); shift ;;
    *) echo "usage: $0 [--cli PATH] --out DIR [--parts \"profiles forced exchange train tables fabric\"] [--fabric FILE] [--force]" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || { echo "$0: --out DIR is required" >&2; exit 2; }
[[ -x $cli ]] || { echo "$0: no cnnbench at $cli (build it, or pass --cli)" >&2; exit 2; }
mkdir -p "$out"

work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-model-XXXXXX")
cleanup() {
  for set in "$work"/set-*; do
    [[ -d $set ]] && timeout 60 "$root/scripts/emulate-hosts.sh" down --dir "$set" >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mpirun_flags=(--bind-to none --oversubscribe)
[[ $(id -u) -ne 0 ]] || mpirun_flags+=(--allow-run-as-root)
# launcher HOSTS RATE: the command line prefix that starts ranks on HOSTS ("shm": one host).
launcher() {
  local hosts=$1 rate=$2 set="$work/set-$1-$2"
  if [[ $hosts == shm* ]]; then
    echo mpirun "${mpirun_flags[@]}" -np "${hosts#shm}"
    return
  fi
  if [[ ! -d $set ]]; then
    local args=(up "$hosts" --dir "$set")
    [[ $rate == none ]] || args+=(--rate "$rate")
    timeout 60 "$root/scripts/emulate-hosts.sh" "${args[@]}" >/dev/null
  fi
  echo "$set/mpirun" --bind-to none -np "$hosts"
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2

if [[ " $parts " == *" profiles "* ]]; then
  for config in "shm2 none" "shm4 none" "2 none" "2 1gbit" "2 100mbit" "4 none" "4 1gbit" "4 100mbit"; do
    read -r hosts rate <<<"$config"
    echo "profile $hosts $rate" >&2
    # shellcheck disable=SC2046
    timeout -k 5 900 $(launcher "$hosts" "$rate") "$cli" allreduce-bench --samples 5 "${force[@]}" \
      --report "$out/profile-$hosts-$rate.json" || echo "profile $hosts $rate failed" >&2
  done
  for config in "2 none 4" "4 none 4" "2 1gbit 4096" "2 100mbit 4096" "4 1gbit 4096" "4 100mbit 4096"; do
    read -r hosts rate min <<<"$config"
    # Over 100mbit 4 KiB .. 1 MiB; over 1gbit up to 4 MiB, since its 500 kB burst leaves only
    # 1 and 2 MiB (..4 MiB: 3 sizes) for the fit.
    max=4194304
    [[ $rate == 100mbit ]] && max=1048576
    echo "profile nonblocking $hosts $rate" >&2
    # shellcheck disable=SC2046
    timeout -k 5 900 $(launcher "$hosts" "$rate") "$cli" allreduce-bench --nonblocking --samples 5 "${force[@]}" \
      --min-bytes "$min" --max-bytes "$max" --report "$out/profile-nb-$hosts-$rate.json" ||
      echo "profile nonblocking $hosts $rate failed" >&2
  done
fi

if [[ " $parts " == *" forced "* ]]; then
  for rate in none 1gbit 100mbit; do
    max=1048576
    [[ $rate == 1gbit ]] && max=4194304
    for algorithm in ring recursive_doubling rabenseifner; do
      echo "forced 4 $rate $algorithm" >&2
      # shellcheck disable=SC2046
      timeout -k 5 900 $(launcher 4 "$rate") "$cli" allreduce-bench --algorithm "$algorithm" \
        --min-bytes 65536 --max-bytes "$max" --samples 5 "${force[@]}" \
        --report "$out/forced-4-$rate-$algorithm.json" || echo "forced $rate $algorithm failed" >&2
    done
  done
fi

if [[ " $parts " == *" exchange "* ]]; then
  for rate in 1gbit 100mbit; do
    max=1048576
    [[ $rate == 1gbit ]] && max=4194304
    echo "exchange 4 $rate" >&2
    # shellcheck disable=SC2046
    # From 4 KiB, since Rabenseifner's rounds at 64 KiB exchange 32 and 16 KiB. A warm-up of 10
    # calls empties the tbf bucket (500 kB at 1gbit) from 64 KiB up, whatever the smaller sizes
    # left in it, as the forced runs' calls do.
    timeout -k 5 900 $(launcher 4 "$rate") "$cli" allreduce-bench --exchange --min-bytes 4096 \
      --max-bytes "$max" --samples 5 --warmup 10 "${force[@]}" --report "$out/exchange-4-$rate.json" ||
      echo "exchange $rate failed" >&2
  done
fi

if [[ " $parts " == *" train "* ]]; then
  for repetition in 1 2 3; do
    for model in lenet5 fc3; do
      for config in "shm2 none 200" "shm4 none 200" "2 1gbit 100" "4 1gbit 60" "2 100mbit 30" "4 100mbit 20"; do
        read -r hosts rate steps <<<"$config"
        echo "train $model $hosts $rate ($repetition)" >&2
        # 4 ranks on one 2-core host oversubscribe it on purpose: the compute under the same load
        # as 4 emulated hosts on these cores.
        extra=()
        [[ $hosts == shm4 ]] && extra=(--oversubscribe)
        # shellcheck disable=SC2046
        timeout -k 5 900 $(launcher "$hosts" "$rate") "$cli" train --model "$model" --strategy cluster \
          --threads 1 --synthetic 8192 --steps "$steps" --quiet "${extra[@]}" "${force[@]}" \
          --report "$out/train-$model-$hosts-$rate-$repetition.json" >/dev/null ||
          echo "train $model $hosts $rate ($repetition) failed" >&2
        [[ $hosts == shm* ]] && continue
        # shellcheck disable=SC2046
        timeout -k 5 900 $(launcher "$hosts" "$rate") --mca coll_libnbc_iallreduce_algorithm 0 "$cli" train \
          --model "$model" --strategy cluster --threads 1 --synthetic 8192 --steps "$steps" --quiet "${force[@]}" \
          --report "$out/train-libnbc-$model-$hosts-$rate-$repetition.json" >/dev/null ||
          echo "train libnbc $model $hosts $rate ($repetition) failed" >&2
      done
    done
  done
fi
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

if [[ " $parts " == *" tables "* ]]; then
  python3 - "$cli" "$out" <<'EOF'
import json, subprocess, sys
cli, out = sys.argv[1], sys.argv[2]

def scaling_model(*args):
    result = subprocess.run([cli, "scaling-model", *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(result.stdout + result.stderr)
    return json.loads(result.stdout)

def seconds_at(ranks, size, *profiles, protocol=False, exchange=None):
    args = [a for p in profiles for a in ("--allreduce", p)] + (["--protocol-fit"] if protocol else [])
    args += ["--exchange", exchange] if exchange else []
    rows = scaling_model(*args, "--model", "lenet5", "--serial-step", "0.01",
                         "--max-nodes", "8")["profiles"][-1]["allreduce_seconds"]
    return next(r for r in rows if r["ranks"] == ranks and r["bytes"] == size)

# Each forced algorithm predicted four ways, each by its own formula: at the link of the default
# algorithm's profile; at its own fit (its own alpha and beta, from the forced run's sizes); at
# one link with eager and rendezvous messages apart, fitted to the three forced runs at once; and
# at that link with recursive doubling's and Rabenseifner's pairwise rounds priced by the
# measured exchange curve of the same hosts (the ring sends one way: unchanged).
algorithms = ["ring", "recursive_doubling", "rabenseifner"]
print("| link (4 hosts) | size | algorithm | measured median [q1, q3] | default's link | error | own fit | error | "
      "eager/rendezvous | error | exchange curve | error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for rate in ["1gbit", "100mbit"]:
    for size_bytes in [65536, 1048576]:
        shared = seconds_at(4, size_bytes, f"{out}/profile-4-{rate}.json")
        forced = [f"{out}/forced-4-{rate}-{a}.json" for a in algorithms]
        joint = seconds_at(4, size_bytes, *forced, protocol=True)
        exchanged = seconds_at(4, size_bytes, *forced, protocol=True, exchange=f"{out}/exchange-4-{rate}.json")
        for algorithm in algorithms:
            path = f"{out}/forced-4-{rate}-{algorithm}.json"
            own = seconds_at(4, size_bytes, path)[algorithm]
            bench = json.load(open(path))
            size = next(s for s in bench["sizes"] if s["bytes"] == size_bytes)
            ran = algorithm if size["algorithm_run"] == algorithm else f"{algorithm} (ran {size['algorithm_run']})"
            measured = size["seconds"]
            print(f"| {rate} | {'64 KiB' if size_bytes == 65536 else '1 MiB'} | {ran} | "
                  f"{measured * 1e3:.1f} ms [{size['seconds_q1'] * 1e3:.1f}, {size['seconds_q3'] * 1e3:.1f}] | "
                  f"{shared[algorithm] * 1e3:.1f} ms | {100 * (shared[algorithm] / measured - 1):+.0f}% | "
                  f"{own * 1e3:.1f} ms | {100 * (own / measured - 1):+.0f}% | "
                  f"{joint[algorithm] * 1e3:.1f} ms | {100 * (joint[algorithm] / measured - 1):+.0f}% | "
                  f"{exchanged[algorithm] * 1e3:.1f} ms | {100 * (exchanged[algorithm] / measured - 1):+.0f}% |")

print()
# libnbc's binomial allreduce, called back to back over the shaped links, against its simulation
# on the same hosts' uncapped nonblocking link.
print("| hosts | link | size | measured median [q1, q3] | simulated | error |")
print("|---|---|---|---|---|---|")
for ranks in [2, 4]:
    link = json.load(open(f"{out}/profile-nb-{ranks}-none.json"))["fit"]["link"]
    uncapped_fabric = f"{out}/uncapped-nb-{ranks}.json"
    with open(uncapped_fabric, "w") as f:
        json.dump({"profiles": [{"name": "uncapped", "network": {
            k: link[k] for k in ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte")}}]}, f)
    for rate in ["1gbit", "100mbit"]:
        path = f"{out}/profile-nb-{ranks}-{rate}.json"
        check = scaling_model("--fabric", uncapped_fabric, "--uncapped", "uncapped", "--model", "lenet5",
                              "--serial-step", "0.01", "--max-nodes", "4", "--check-allreduce", path)
        bench = {s["bytes"]: s for s in json.load(open(path))["sizes"]}
        for size in check["allreduce_checks"][0]["sizes"]:
            if size["bytes"] not in (16384, 65536, 262144, 1048576):
                continue
            b = bench[size["bytes"]]
            print(f"| {ranks} | {rate} | {int(size['bytes']) // 1024} KiB | {size['measured_s'] * 1e3:.2f} ms "
                  f"[{b['seconds_q1'] * 1e3:.2f}, {b['seconds_q3'] * 1e3:.2f}] | {size['predicted_s'] * 1e3:.2f} ms | "
                  f"{100 * size['relative_error']:+.0f}% |")
print()

# Each cluster run against the step simulated over its shaped links: the same number of
# uncapped hosts' nonblocking profile is the link (a --protocol-fit takes every --allreduce report
# as one fabric, so it goes in a fabric file), the bucket is emulate-hosts.sh's, the compute that
# of the same ranks in shared memory; the median of 3 repetitions each.
import statistics
print("| model | ranks | link | compute per step | measured step (median [min, max] of 3) | predicted | error | algorithm (largest bucket) | hidden share |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ["lenet5", "fc3"]:
    for ranks in [2, 4]:
        uncapped_fabric = f"{out}/uncapped-nb-{ranks}.json"
        computes = []
        for repetition in [1, 2, 3]:
            breakdown = json.load(open(f"{out}/train-{name}-shm{ranks}-none-{repetition}.json"))["metrics"]["time_breakdown"]
            computes.append(breakdown["busy_s"] / breakdown["steps"])
        compute = statistics.median(computes)
        for rate, kind in [(r, k) for r in ["1gbit", "100mbit"] for k in ["", "libnbc-"]]:
            checks = []
            for repetition in [1, 2, 3]:
                model = scaling_model("--fabric", uncapped_fabric, "--uncapped", "uncapped", "--profile", "uncapped",
                                      "--model", name, "--serial-step", repr(ranks * compute), "--max-nodes", "4",
                                      "--check-run", f"{out}/train-{kind}{name}-{ranks}-{rate}-{repetition}.json")
                checks.append(model["checks"][0]["prediction"])
            checks.sort(key=lambda c: c["measured_step_s"])
            mid = checks[1]
            print(f"| {name} | {ranks} x 1 | {rate} | {compute * 1e3:.2f} ms | {mid['measured_step_s'] * 1e3:.1f} ms "
                  f"[{checks[0]['measured_step_s'] * 1e3:.1f}, {checks[-1]['measured_step_s'] * 1e3:.1f}] | "
                  f"{mid['predicted_step_s'] * 1e3:.1f} ms | {100 * mid['relative_error']:+.0f}% | "
                  f"{mid['algorithm']} | {mid['hidden_fraction']:.2f} |")
EOF
fi

if [[ " $parts " == *" fabric "* ]]; then
  python3 - "$out" "$fabric" "$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" <<'EOF'
import datetime, json, os, sys
out, path, family, model, cores = sys.argv[1:]
fabric = json.load(open(path))
log = open(f"{out}/log.txt").read() if os.path.exists(f"{out}/log.txt") else ""
load = [line.split("load ")[1].split(" at")[0] for line in log.splitlines() if "load " in line]
when = datetime.date.fromtimestamp(os.path.getmtime(f"{out}/profile-2-none.json")).isoformat()
machine = (f"AMD EPYC, cpu family {family} model {model}, {cores} cores"
           + (f" (load {load[0]} at start, {load[-1]} at end)" if load else "") + f"; {when}")
shm = None
measured = []
for hosts, rate, label in [("shm2", "none", "shm-2-ranks"), ("2", "none", "emulated-tcp-uncapped-2"),
                           ("4", "none", "emulated-tcp-uncapped-4"), ("2", "1gbit", "emulated-tcp-1gbit-2"),
                           ("2", "100mbit", "emulated-tcp-100mbit-2"), ("4", "1gbit", "emulated-tcp-1gbit-4"),
                           ("4", "100mbit", "emulated-tcp-100mbit-4")]:
    bench = json.load(open(f"{out}/profile-{hosts}-{rate}.json"))
    fit, link = bench["fit"], bench["fit"]["link"]
    # The machine and day the report itself records (allreduce-bench writes its context); older
    # reports without one get this machine and the file's date.
    context = bench.get("context") or {}
    cpu = context.get("cpu") or {}
    measured_on = (f"{cpu.get('name', '?')}, cpu family {cpu.get('family')} model {cpu.get('model')}, "
                   f"host {context.get('host', '?')}; {context['date'][:10]}") if "date" in context else machine
    if link["beta_s_per_byte"] <= 0:
        print(f"{label}: left out, its fitted beta is not positive", file=sys.stderr)
        continue
    where = ("shared memory, 2 ranks on one host" if hosts.startswith("shm") else
             f"{hosts} emulated hosts{' on ' + cores + ' cores' if int(hosts) > int(cores) else ''}, TCP, "
             + ("uncapped" if rate == "none" else f"tbf {rate}"))
    entry = {"name": label, "kind": "measured",
             "source": "bench/allreduce_model.sh (cnnbench allreduce-bench --samples 5, 4 B .. 4 MiB, "
                       f"Open MPI's default algorithm), {where}; {measured_on}",
             "network": {k: link[k] for k in ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte")},
             "fit": {"ranks": bench["ranks"], "alpha_s": fit["alpha_s"], "beta_s_per_byte": fit["beta_s_per_byte"],
                     "kept": fit["kept"], "rms_relative_residual": round(fit["rms_relative_residual"], 3),
                     "excluded_bytes_up_to": max(fit["excluded_bytes"]) if fit["excluded_bytes"] else None}}
    # The pairwise exchange measured on the same hosts: what prices recursive doubling's and
    # Rabenseifner's rounds (scaling-model reads "exchange").
    exchange_path = f"{out}/exchange-{hosts}-{rate}.json"
    if os.path.exists(exchange_path):
        exchange = json.load(open(exchange_path))
        entry["exchange"] = {"ranks": exchange["ranks"],
                             "sizes": [{"bytes": s["bytes"], "seconds": s["seconds"]} for s in exchange["sizes"]]}
        entry["source"] += (f"; exchange: allreduce-bench --exchange --samples 5 --warmup 10, "
                            f"{exchange['sizes'][0]['bytes']} B .. {exchange['sizes'][-1]['bytes']} B")
    if shm is None:
        shm = entry["network"]
    else:
        entry["shared_memory"] = shm
    measured.append(entry)
fabric["profiles"] = measured + [p for p in fabric["profiles"] if p["kind"] != "measured"]
for p in fabric["profiles"]:
    if p["kind"] == "published" and "shared_memory" in p:
        p["shared_memory"] = shm
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(fabric, f, indent=1)
    f.write("\n")
os.replace(tmp, path)
print(f"{path}: {len(measured)} measured profiles from {out}", file=sys.stderr)
EOF
fi
