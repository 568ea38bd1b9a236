#!/usr/bin/env bash
# Nothing left behind, even after SIGKILL: a sweep over emulated hosts killed with SIGKILL in the
# middle of its cluster point (as an out-of-memory kill or a CI timeout does) cannot take its
# hosts down; the owner record scripts/emulate-hosts.sh keeps says its set is stale, so that
# `down --stale` removes it and says so, and the next `up` removes such a set by itself. `down
# --stale` leaves a set whose owner runs; `down --all` removes it (and any other set of ours: the
# net tests run one at a time).
# Usage: test_stale_hosts.sh CNNBENCH_CLI SOURCE_DIR. Exit 77: cannot run here.
set -euo pipefail
cli=$1
source_dir=$2
script=$source_dir/scripts/emulate-hosts.sh

# shellcheck source=tests/net/common.sh
. "$(dirname "$0")/common.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-stale-XXXXXX")
registry=/run/cnnbench-emulated-hosts
sweep_pid=""
owner_pid=""
orphans=()
scratch=()  # the killed sweeps' scratch folders (their logs stay when the sweep cannot remove them)
cleanup() {
  local status=$?
  [[ -z $sweep_pid ]] || kill -9 "$sweep_pid" 2>/dev/null || true
  [[ -z $owner_pid ]] || kill "$owner_pid" 2>/dev/null || true
  ((${#orphans[@]} == 0)) || kill -9 "${orphans[@]}" 2>/dev/null || true
  for set in "$work"/own-*; do
    [[ -d $set ]] && timeout 60 "$script" down --dir "$set" >/dev/null 2>&1
  done
  # The sets this test's sweeps made, should a check above have failed before removing them.
  for record in "$registry"/cnb-??????; do
    [[ -f $record ]] || continue
    set_dir=$(sed -n 's/^DIR=//p' "$record")
    [[ $set_dir == "${TMPDIR:-/tmp}"/cnnbench-hosts-* && ! -d /proc/$(sed -n 's/^OWNER_PID=//p' "$record") ]] &&
      timeout 60 "$script" down --dir "$set_dir" >/dev/null 2>&1
  done
  ((${#scratch[@]} == 0)) || rm -rf "${scratch[@]}"
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

up_or_skip "$script" 1 "$work/own-probe"
timeout 60 "$script" down --dir "$work/own-probe"

namespaces_of() { timeout 10 ip netns list | awk '{print $1}' | grep "^$1-" || true; }
# The set whose owner record names process $1 (empty until there is one).
set_of() {
  local record
  for record in "$registry"/cnb-??????; do
    [[ -f $record ]] && grep -qx "OWNER_PID=$1" "$record" && basename "$record"
  done
  return 0
}

# Every process below $1.
descendants() {
  local child
  for child in $(pgrep -P "$1" || true); do
    echo "$child"
    descendants "$child"
  done
}

# A sweep killed with SIGKILL while its cluster point runs (the point's mpirun is its child).
killed_sweep() {
  "$cli" sweep --model lenet5 --strategies cluster --cores 1 --nodes 2 --emulate-hosts 2 \
    --repeat 1 --warmup 0 --steps 4000 --synthetic 512 --batch 32 --quiet \
    --out "$work/sweep-$1.json" >"$work/sweep-$1.log" 2>&1 &
  sweep_pid=$!
  local waited=0 child=""
  while [[ -z $child ]]; do
    sleep 0.2
    ((++waited < 600)) || { cat "$work/sweep-$1.log"; fail "the sweep's cluster point did not start in 120 s"; }
    kill -0 "$sweep_pid" 2>/dev/null || { cat "$work/sweep-$1.log"; fail "the sweep ended before its cluster point"; }
    child=$(pgrep -P "$sweep_pid" -f mpirun || true)
  done
  killed_set=$(set_of "$sweep_pid")
  [[ -n $killed_set && -n $(namespaces_of "$killed_set") ]] ||
    fail "the sweep's hosts have no owner record naming it (records: $(ls "$registry" 2>/dev/null | tr '\n' ' '))"
  local set_dir
  set_dir=$(sed -n 's/^DIR=//p' "$registry/$killed_set")
  [[ $set_dir != "${TMPDIR:-/tmp}"/cnnbench-hosts-*/hosts ]] || scratch+=("$(dirname "$set_dir")")
  sleep 1
  # The point's processes outlive the sweep; they are not what this test is about, and go after it.
  mapfile -t orphans < <(descendants "$sweep_pid")
  scratch+=("${TMPDIR:-/tmp}/cnnbench-sweep-$sweep_pid")  # the next sweep would remove it; none runs here
  kill -9 "$sweep_pid"
  wait "$sweep_pid" 2>/dev/null || true
  sweep_pid=""
  kill -9 "${orphans[@]}" 2>/dev/null || true
  [[ -n $(namespaces_of "$killed_set") ]] || fail "the killed sweep's namespaces went away by themselves"
  echo "ok   a sweep killed with SIGKILL mid-point left its set $killed_set behind"
}

# A set of ours whose owner (a process of this test) runs: --stale leaves it.
sleep 600 &
owner_pid=$!
timeout 60 "$script" up 1 --dir "$work/own-live" --owner "$owner_pid" >/dev/null
live_set=$(set_of "$owner_pid")
[[ -n $live_set ]] || fail "up --owner $owner_pid wrote no owner record naming it"

killed_sweep 1
said=$(timeout 60 "$script" down --stale 2>&1) || fail "down --stale: exit $?: $said"
[[ $said == *"removed $killed_set ("*"is gone)"* ]] || fail "down --stale did not say it removed $killed_set: $said"
[[ -z $(namespaces_of "$killed_set") && ! -e $registry/$killed_set ]] ||
  fail "down --stale left $killed_set: $(namespaces_of "$killed_set" | tr '\n' ' ')"
[[ -n $(namespaces_of "$live_set") ]] || fail "down --stale removed $live_set, whose owner runs"
echo "ok   down --stale removed $killed_set and left $live_set (owner running): $said"

killed_sweep 2
said=$(timeout 60 "$script" up 1 --dir "$work/own-next" 2>&1 >/dev/null) || fail "up after a killed sweep: exit $?: $said"
[[ $said == *"removed $killed_set ("* ]] || fail "up did not say it removed the stale $killed_set: $said"
[[ -z $(namespaces_of "$killed_set") ]] || fail "up left the stale $killed_set"
echo "ok   the next up removed the stale $killed_set by itself: $said"
timeout 60 "$script" down --dir "$work/own-next"

said=$(timeout 60 "$script" down --all 2>&1) || fail "down --all: exit $?: $said"
[[ $said == *"removed $live_set ("*"still running)"* ]] || fail "down --all did not say it removed $live_set: $said"
[[ -z $(namespaces_of "$live_set") && ! -e $registry/$live_set ]] || fail "down --all left $live_set"
echo "ok   down --all removed $live_set, whose owner still ran"
echo "PASS"
