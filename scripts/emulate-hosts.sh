#!/usr/bin/env bash
# Emulated hosts: N network namespaces joined by a bridge, so that the cluster strategy's ranks
# talk over real TCP on one machine, optionally through a rate-capped link (docs/cluster.md,
# "Emulated hosts").
#
# Usage (as root):
#   scripts/emulate-hosts.sh up N [--rate R] [--slots S] [--dir DIR] [--owner PID]
#   scripts/emulate-hosts.sh down [--dir DIR | --stale | --all]
#
#   N        hosts, 1..250.
#   --rate   e.g. 1gbit, 100mbit, 500kbit (tc's units): every host link is shaped with tbf in
#            both directions, on the host's end and on the switch's end. Default: no cap.
#   --slots  ranks per host in the hostfile (default 1).
#   --dir    where the set's files go (default build/emulated-hosts); several sets, each with its
#            own DIR, may be up at once.
#   --owner  the process whose life the set lasts (default: the one that ran this script, past
#            `timeout` and `sudo`). `up` records it (/run/cnnbench-emulated-hosts/PREFIX) before it
#            makes anything, and first removes every set of ours whose owner is gone: a sweep or
#            test killed with SIGKILL cannot take its set down, and the next `up` does.
#   --stale  `down` removes every set of ours whose owner is gone (or that has no owner record);
#   --all    every set of ours. Both say on stderr what they removed.
#
# Exit status: 0 done; 1 failed (a failed `up` removes everything it made before it exits);
# 2 usage error, or this machine cannot run it (not root, no `ip`/`tc`/`timeout`, or network
# namespaces cannot be created): the message on stderr says which.
#
# What `up` makes, and the interface other tools use (all paths under DIR):
#   DIR/hosts.env   shell assignments, one per line, safe to `source` or to read as KEY=VALUE:
#                     PREFIX      namespace prefix, cnb-<6 hex digits of sha1(realpath DIR)>
#                     SUBNET      the hosts' /24, e.g. 10.213.57.0/24
#                     HOSTS       the host addresses, space-separated, host i = .(i+1)
#                     NAMESPACES  the host namespaces, PREFIX-h0 .. PREFIX-h(N-1), same order
#                     SWITCH      the switch namespace, PREFIX-sw (bridge br0)
#                     HOST_VETH   the link's name inside each host namespace (eth0)
#                     SWITCH_PORTS the bridge ports in the switch namespace, port0 .. port(N-1)
#                     RATE        the --rate given, empty when uncapped
#                     TBF         the tbf parameters used, empty when uncapped
#                     SLOTS       --slots
#                     TCP_RETRIES2 net.ipv4.tcp_retries2 inside each host (2: a dead peer
#                                 is given up after about 1.4 s)
#                     CPUS_H<i>   host i's CPUs (taskset -c list): its own slice of this
#                                 machine's, shared only when there are more hosts than CPUs
#   DIR/hostfile    one line per host: "<address> slots=S".
#   DIR/rsh-agent   Open MPI's plm_rsh_agent: `rsh-agent HOST COMMAND...` runs COMMAND in HOST's
#                   namespace, on HOST's CPUs, with CNNBENCH_HOST=<HOST> and
#                   CNNBENCH_LINK_RATE=<RATE> exported.
#   DIR/mpirun      `DIR/mpirun ARGS...` runs `mpirun --hostfile DIR/hostfile --mca plm_rsh_agent
#                   DIR/rsh-agent --mca btl tcp,self --mca btl_tcp_if_include SUBNET --mca
#                   oob_tcp_if_include SUBNET [--mca mpi_yield_when_idle 1: when hosts x slots
#                   exceed the CPUs] [--allow-run-as-root] ARGS...` inside host 0's
#                   namespace on host 0's CPUs, with CNNBENCH_HOST/CNNBENCH_LINK_RATE of host 0
#                   exported. Give it -np and the program, e.g. `DIR/mpirun -np 2 --bind-to none cnnbench train
#                   --strategy cluster ...`; ranks fill the hosts in hostfile order, S per host.
#   `up` prints DIR/hosts.env's contents on stdout when it is done.
#
# A tool that runs jobs over emulated hosts: `emulate-hosts.sh up N [--rate R] --dir DIR` (exit 0,
# else give up: 2 = this machine cannot, 1 = failed, nothing left behind); start each job as
# `DIR/mpirun -np K --bind-to none PROGRAM ARGS...` with K <= N x S; `emulate-hosts.sh down --dir
# DIR` afterwards, also from a trap on failure. `up` on a DIR that is already up exits 1 and
# leaves that set alone; to change N or the rate, `down` then `up`. Each rank of a cluster run
# records CNNBENCH_HOST and CNNBENCH_LINK_RATE in its report (strategy_metrics.network).
#
# What it never does: add or change an address, route, link, qdisc or firewall rule in the root
# network namespace. Both ends of every veth pair are created directly inside their namespaces,
# and the root namespace is only read (`ip route`, to pick a subnet it does not use).
#
# `down` deletes every namespace named PREFIX-* (which removes their links and qdiscs) and the
# files above; it is idempotent and also cleans up after an `up` that died half-way.
set -euo pipefail

readonly step_timeout=20  # seconds any one command may take
check_args_script=emulate-hosts
source "$(dirname "${BASH_SOURCE[0]}")/check_args.sh"
answer_help "$@"

usage() {
  sed -n '5,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
cannot() {
  echo "emulate-hosts: cannot run here: $*" >&2
  exit 2
}
die() {
  echo "emulate-hosts: error: $*" >&2
  exit 1
}
run() { timeout "$step_timeout" "$@"; }

[[ $# -ge 1 ]] || usage
action=$1
shift
hosts=""
if [[ $action == up ]]; then
  [[ $# -ge 1 ]] || usage
  hosts=$1
  shift
  check_int "up N" "$hosts" 1 250
  hosts=$((10#$hosts))
elif [[ $action != down ]]; then
  usage
fi
dir=build/emulated-hosts
rate=""
slots=1
owner=""
scope=dir  # down: this DIR's set, the stale sets, or all of ours
while [[ $# -gt 0 ]]; do
  case $1 in
    --dir) [[ $# -ge 2 ]] || usage; dir=$2; shift 2
      [[ $dir != *$'\n'* ]] || check_args_fail "--dir: a folder name with a line break is not supported" ;;
    --owner) [[ $# -ge 2 && $action == up ]] || usage; owner=$2; shift 2
      check_int --owner "$owner" 1 4194304
      owner=$((10#$owner)) ;;
    --stale | --all) [[ $action == down && $scope == dir ]] || usage; scope=${1#--}; shift ;;
    --rate) [[ $# -ge 2 && $action == up ]] || usage; rate=$2; shift 2
      [[ -n $rate ]] || { echo "emulate-hosts: --rate is empty" >&2; exit 2; } ;;
    --slots) [[ $# -ge 2 && $action == up ]] || usage; slots=$2; shift 2
      check_int --slots "$slots" 1 4096
      slots=$((10#$slots)) ;;
    *) echo "emulate-hosts: unknown argument '$1'" >&2; usage ;;
  esac
done

[[ $(id -u) -eq 0 ]] || cannot "needs root (network namespaces, veth pairs, tc)"
for tool in ip tc timeout sha1sum realpath taskset sysctl; do
  command -v "$tool" >/dev/null 2>&1 || cannot "'$tool' is not installed (iproute2/coreutils)"
done

dir=$(realpath -m -- "$dir")
hash=$(printf '%s' "$dir" | sha1sum | cut -c1-6)
prefix=cnb-$hash

# Every namespace of set PREFIX (default this one), whatever state an earlier run left it in.
namespaces_of() {
  run ip netns list | awk '{print $1}' | grep -E "^${1}-(sw|h[0-9]+)\$" || true
}
our_namespaces() { namespaces_of "$prefix"; }

# Owner records: one file per set, PREFIX, with OWNER_PID, OWNER_START (the process's start time,
# field 22 of /proc/PID/stat, so that a reused PID is not taken for the owner) and DIR. Under
# /run, which a reboot clears along with the namespaces.
readonly registry=/run/cnnbench-emulated-hosts

# Field $2 of /proc/$1/stat (1-based, as proc(5) counts), empty when there is no such process.
stat_field() {
  local stat field=$(($2 - 2))  # fields 1 and 2 (PID, command name) are cut off below
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }  # what follows the command name, which may hold spaces and parentheses
  # shellcheck disable=SC2086
  set -- $stat
  echo "${!field}"
}
process_start() { stat_field "$1" 22; }  # the start time, clock ticks since boot
process_parent() { stat_field "$1" 4; }
process_name() { cat "/proc/$1/comm" 2>/dev/null || true; }
record_field() { sed -n "s/^$2=//p" "$registry/$1" 2>/dev/null | head -n 1; }
# Whether set PREFIX's owner still runs (a set being made has its record before its namespaces).
owner_alive() {
  local pid start
  pid=$(record_field "$1" OWNER_PID)
  start=$(record_field "$1" OWNER_START)
  [[ -n $pid && -n $start && $(process_start "$pid") == "$start" ]]
}
# Every set of ours: namespaces named cnb-<6 hex>-*, and owner records.
all_prefixes() {
  {
    run ip netns list | awk '{print $1}' | sed -nE 's/^(cnb-[0-9a-f]{6})-(sw|h[0-9]+)$/\1/p'
    [[ ! -d $registry ]] || find "$registry" -maxdepth 1 -name 'cnb-??????' -printf '%f\n'
  } | sort -u
}

# Removes set PREFIX (its namespaces, its owner record, and the files `up` wrote in DIR).
remove_set() {
  local set_prefix=$1 set_dir=$2 ns
  for ns in $(namespaces_of "$set_prefix"); do
    run ip netns del "$ns" || echo "emulate-hosts: warning: could not delete namespace $ns" >&2
  done
  if [[ -n $set_dir ]]; then
    rm -f "$set_dir/hosts.env" "$set_dir/hostfile" "$set_dir/rsh-agent" "$set_dir/mpirun"
    rm -rf "$set_dir/tmp"
    [[ ! -d $set_dir ]] || rmdir --ignore-fail-on-non-empty "$set_dir"
  fi
  [[ -z $(namespaces_of "$set_prefix") ]] || return 1
  rm -f "$registry/$set_prefix"
}

down() { remove_set "$prefix" "$dir"; }

# Removes the sets of ours that `which` picks (stale: owner gone or unrecorded; all), saying so.
remove_sets() {
  local which=$1 set_prefix set_dir owner_pid why failed=0
  for set_prefix in $(all_prefixes); do
    if [[ $which == stale ]] && owner_alive "$set_prefix"; then continue; fi
    set_dir=$(record_field "$set_prefix" DIR)
    owner_pid=$(record_field "$set_prefix" OWNER_PID)
    if owner_alive "$set_prefix"; then
      why="owner $owner_pid still running"
    elif [[ -n $owner_pid ]]; then
      why="owner $owner_pid is gone"
    else
      why="no owner record"
    fi
    if remove_set "$set_prefix" "$set_dir"; then
      echo "emulate-hosts: removed $set_prefix (${set_dir:-folder unknown}; $why)" >&2
    else
      echo "emulate-hosts: warning: could not remove every namespace of $set_prefix" >&2
      failed=1
    fi
  done
  return "$failed"
}

if [[ $action == down ]]; then
  if [[ $scope != dir ]]; then
    remove_sets "$scope" || die "some namespaces are still there: $(all_prefixes | tr '\n' ' ')"
    exit 0
  fi
  down || die "namespaces of $prefix are still there: $(our_namespaces | tr '\n' ' ')"
  exit 0
fi

# ---- up ---------------------------------------------------------------------------------------

# The owner: the given process, else the one that ran this script, past the wrappers that only
# wait for it (`timeout`, `sudo`).
if [[ -z $owner ]]; then
  owner=$PPID
  while [[ $(process_name "$owner") == timeout || $(process_name "$owner") == sudo ]]; do
    owner=$(process_parent "$owner")
  done
fi
owner_start=$(process_start "$owner")
[[ -n $owner_start ]] || check_args_fail "--owner $owner: no such process"

# Sets whose owner died without taking them down (SIGKILL, an out-of-memory kill, a timeout).
remove_sets stale || true

[[ -z $(our_namespaces) && ! -e $dir/hosts.env ]] ||
  die "$dir is already up (namespaces $prefix-*): run '$0 down --dir $dir' first"
mpirun_path=$(command -v mpirun || true)
[[ -n $mpirun_path ]] || cannot "Open MPI's mpirun is not installed"

# A /24 in 10.213.0.0/16 that no route of the root namespace touches: the third byte comes from
# the hash, moving on while it clashes.
root_routes=$(run ip -4 route show table all 2>/dev/null || run ip -4 route)
clashes() {  # the root namespace routes to (or from) 10.213.$1.x, or to all of 10.213.0.0/16
  grep -Eq "(^|[ /])10\.213\.$1\.[0-9]+|^10\.213\.0\.0/16|^10\.0\.0\.0/8|^10\.213\.0\.0/1[0-5]" <<<"$root_routes"
}
third=$((16#${hash:0:4} % 250 + 1))
for ((tries = 0; tries < 250; tries++)); do
  clashes "$third" || break
  third=$((third % 250 + 1))
done
((tries < 250)) || die "every 10.213.x.0/24 is used by the root namespace's routes"
subnet=10.213.$third.0/24
address() { echo "10.213.$third.$(($1 + 1))"; }

# Each host gets its own slice of the CPUs this script may run on, as a real machine has its own
# cores: the ranks of one host see only its slice (the cluster strategy pins its threads inside
# what a rank may run on) and so do not pin onto the cores of another host's ranks. N hosts over
# C CPUs: C / N each (the first C mod N hosts one more) when N <= C, else CPU i mod C for host i.
mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
  awk -F- '{ if (NF == 2) for (c = $1; c <= $2; c++) print c; else print $1 }')
((${#cpus[@]} > 0)) || cannot "cannot read this process's CPUs (taskset -p)"
host_cpus() {  # the CPU list of host $1, as taskset -c takes it
  local count=${#cpus[@]} first size list="" c
  if ((hosts > count)); then
    echo "${cpus[$(($1 % count))]}"
    return
  fi
  size=$((count / hosts))
  first=$(($1 * size + ($1 < count % hosts ? $1 : count % hosts)))
  ((size += $1 < count % hosts ? 1 : 0))
  for ((c = first; c < first + size; c++)); do list+="${list:+,}${cpus[$c]}"; done
  echo "$list"
}

readonly tcp_retries=2

# A failed `up` leaves nothing behind.
failed_at=""
on_exit() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    echo "emulate-hosts: up failed${failed_at:+ at: $failed_at}; removing what it made" >&2
    down || echo "emulate-hosts: warning: cleanup left: $(our_namespaces | tr '\n' ' ')" >&2
  fi
  exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
step() {
  failed_at="$*"
  run "$@"
}

# A step this machine may lack the means for (namespaces, bridges, veth pairs): on failure, undo
# and exit 2 with the reason, as for a missing tool.
capability_step() {
  local reason=$1
  shift
  if ! run "$@"; then
    trap - EXIT
    down || true
    cannot "$reason ($*)"
  fi
}

# The owner record comes first: a set whose namespaces exist is never without one, so another
# `up` running at the same moment never takes this one for stale. (A failed `up` removes it with
# the rest.)
failed_at="writing the owner record in $registry"
mkdir -p "$registry"
printf 'OWNER_PID=%s\nOWNER_START=%s\nDIR=%s\n' "$owner" "$owner_start" "$dir" >"$registry/$prefix.tmp"
mv -f "$registry/$prefix.tmp" "$registry/$prefix"
mkdir -p "$dir"
sw=$prefix-sw
capability_step "could not create a network namespace: needs CAP_SYS_ADMIN and CAP_NET_ADMIN" \
  ip netns add "$sw"
step ip -n "$sw" link set lo up
capability_step "could not create a bridge: the kernel lacks bridge support" \
  ip -n "$sw" link add br0 type bridge
step ip -n "$sw" link set br0 up

# The rate in bytes per second, for tc's units (tc itself rejects anything else later): empty
# when this does not know the unit.
rate_bytes_per_s() {
  local number unit
  [[ $1 =~ ^([0-9]+)([a-zA-Z]*)$ ]] || return 0
  number=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2],,}
  case $unit in
    bit) echo $((number / 8)) ;;
    kbit) echo $((number * 1000 / 8)) ;;
    mbit) echo $((number * 1000000 / 8)) ;;
    gbit) echo $((number * 1000000000 / 8)) ;;
    bps) echo "$number" ;;
    kbps) echo $((number * 1000)) ;;
    mbps) echo $((number * 1000000)) ;;
    gbps) echo $((number * 1000000000)) ;;
  esac
}

# tbf: the bucket holds at least one 64 KiB GSO super-packet plus a frame, and at least 4 ms at
# the rate, so that a late timer on a busy machine does not leave the link idle (with a 64 KiB
# bucket, 1gbit measured at 30-70% of the rate under load); the queue holds 50 ms at the rate
# beyond the bucket: with 20 ms, a 100mbit iperf3 run retransmitted 55,000 segments in 5 s, with
# 50 ms none, at the same throughput.
tbf=()
if [[ -n $rate ]]; then
  burst=67000
  per_s=$(rate_bytes_per_s "$rate")
  if [[ -n $per_s ]] && ((per_s * 4 / 1000 > burst)); then burst=$((per_s * 4 / 1000)); fi
  tbf=(tbf rate "$rate" burst "$burst" latency 50ms)
fi
for ((i = 0; i < hosts; i++)); do
  ns=$prefix-h$i
  step ip netns add "$ns"
  step ip -n "$ns" link set lo up
  # A host gives up on a TCP peer that stopped answering after about 1.4 s of retransmissions
  # (0.2 + 0.4 + 0.8 s), not Linux's default 15 (about 15 minutes): once a rank has ended
  # the job over a cut link, mpirun's last words to the lost host's daemon then fail in seconds
  # instead of holding the job (docs/cluster.md, "A lost link or a hung rank"). Only this
  # namespace's setting changes.
  step ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2=$tcp_retries
  veth=(ip link add eth0 netns "$ns" type veth peer name "port$i" netns "$sw")
  if ((i == 0)); then
    capability_step "could not create a veth pair: the kernel lacks veth support" "${veth[@]}"
  else
    step "${veth[@]}"
  fi
  step ip -n "$sw" link set "port$i" master br0
  step ip -n "$sw" link set "port$i" up
  step ip -n "$ns" addr add "$(address "$i")/24" dev eth0
  step ip -n "$ns" link set eth0 up
  if [[ -n $rate ]]; then
    step ip netns exec "$ns" tc qdisc add dev eth0 root "${tbf[@]}"
    step ip netns exec "$sw" tc qdisc add dev "port$i" root "${tbf[@]}"
  fi
done
failed_at=""

# The files that use the set.
host_list=""
namespace_list=""
port_list=""
: >"$dir/hostfile"
for ((i = 0; i < hosts; i++)); do
  echo "$(address "$i") slots=$slots" >>"$dir/hostfile"
  host_list+="${host_list:+ }$(address "$i")"
  namespace_list+="${namespace_list:+ }$prefix-h$i"
  port_list+="${port_list:+ }port$i"
done
cat >"$dir/hosts.env" <<EOF
PREFIX=$prefix
SUBNET=$subnet
HOSTS="$host_list"
NAMESPACES="$namespace_list"
SWITCH=$sw
HOST_VETH=eth0
SWITCH_PORTS="$port_list"
RATE=$rate
TBF="${tbf[*]}"
SLOTS=$slots
TCP_RETRIES2=$tcp_retries
EOF
for ((i = 0; i < hosts; i++)); do echo "CPUS_H$i=$(host_cpus "$i")" >>"$dir/hosts.env"; done

# Each host has its own /tmp (TMPDIR), as a real machine does: Open MPI keeps a session folder
# per job under /tmp/ompi.<hostname>.<uid>, and every emulated host has the same hostname, so
# daemons of several hosts (or of two jobs) would create and remove one folder at once.
q_dir=$(printf '%q' "$dir")
for ((i = 0; i < hosts; i++)); do mkdir -p "$dir/tmp/$(address "$i")"; done
{
  echo '#!/bin/sh'
  echo "# Open MPI's rsh agent for the emulated hosts of $dir: AGENT HOST COMMAND..."
  echo '# runs COMMAND in the namespace of HOST (made by scripts/emulate-hosts.sh).'
  echo 'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # options an agent may get'
  echo 'host=$1; shift'
  echo 'case $host in'
  for ((i = 0; i < hosts; i++)); do echo "  $(address "$i")) ns=$prefix-h$i cpus=$(host_cpus "$i") ;;"; done
  echo '  *) echo "rsh-agent: unknown host $host" >&2; exit 1 ;;'
  echo 'esac'
  echo "CNNBENCH_HOST=\$host CNNBENCH_LINK_RATE='$rate' TMPDIR=$q_dir/tmp/\$host"
  echo 'export CNNBENCH_HOST CNNBENCH_LINK_RATE TMPDIR'
  echo 'exec ip netns exec "$ns" taskset -c "$cpus" sh -c "$*"'
} >"$dir/rsh-agent"

root_flag=""
[[ $(id -u) -ne 0 ]] || root_flag=" --allow-run-as-root"
# Hosts that share cores: Open MPI sees one slot per rank on each host and polls for messages
# without ever giving its core away, so a rank waits for its receiver's next time slice (4 hosts
# on 2 cores: a 4-byte allreduce took 25-32 ms; yielding, 0.05-0.2 ms). It yields when it knows
# a node is oversubscribed; here only this script knows.
yield_flag=""
((hosts * slots <= ${#cpus[@]})) || yield_flag=" --mca mpi_yield_when_idle 1"
{
  echo '#!/bin/sh'
  echo "# Open MPI's mpirun over the emulated hosts of $dir, started in host 0's namespace."
  echo "CNNBENCH_HOST=$(address 0) CNNBENCH_LINK_RATE='$rate' TMPDIR=$q_dir/tmp/$(address 0)"
  echo 'export CNNBENCH_HOST CNNBENCH_LINK_RATE TMPDIR'
  echo "exec ip netns exec $prefix-h0 taskset -c $(host_cpus 0) $mpirun_path$root_flag --hostfile $q_dir/hostfile \\"
  echo "  --mca plm_rsh_agent $q_dir/rsh-agent --mca btl tcp,self \\"
  echo "  --mca btl_tcp_if_include $subnet --mca oob_tcp_if_include $subnet$yield_flag \"\$@\""
} >"$dir/mpirun"
chmod +x "$dir/rsh-agent" "$dir/mpirun"
cat "$dir/hosts.env"
