#!/usr/bin/env bash
# The GPU check: on an offline machine with an NVIDIA GPU, build cnnbench for sm_90 against the
# Debian packages carried in .gpu-deps/ (scripts/gpu-deps.sh), run the GPU tests, benchmark the
# GPU strategy (and PyTorch, when importable) on FC-3 and LeNet-5, check runs' time breakdown and
# trace (scripts/gpu_trace_check.py), then 2 MPI ranks sharing the GPU, all within a deadline. OUTDIR receives gpu-report.json and gpu-check-logs.tar.gz only.
#   usage: scripts/gpu-check.sh OUTDIR
# Environment: GPU_CHECK_DEADLINE (seconds, default 480), GPU_CHECK_DRY_RUN=1 (no GPU: build for
# real, stub the device steps), GPU_CHECK_ISOLATE (1: find nothing outside the carried packages;
# default 1 in a dry run, else 0), GPU_CHECK_DEPS (the .deb folder), DEPS_PREFIX (/tmp/deps),
# WORK_DIR, BUILD_DIR, JOBS, CUDA_ARCHS, PYTHON, GPU_CHECK_BUILD_LIMIT (the build's own cap, 480 s).
set -uo pipefail
check_args_script=gpu-check
source "$(dirname "${BASH_SOURCE[0]}")/check_args.sh"
answer_help "$@"
if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR (-h: what it does)" >&2
  exit 2
fi
[[ $1 != -* ]] || check_args_fail "unknown option '$(check_args_shown "$1")' (usage: $0 OUTDIR)"
START=$(date +%s)
OUTDIR=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "gpu-check: error: cannot create OUTDIR $1" >&2; exit 2; }
SOURCE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEADLINE_S=${GPU_CHECK_DEADLINE:-480}
DRY_RUN=${GPU_CHECK_DRY_RUN:-0}
ISOLATE=${GPU_CHECK_ISOLATE:-$DRY_RUN}
DEPS_DEBS=${GPU_CHECK_DEPS:-$SOURCE/.gpu-deps}
DEPS=${DEPS_PREFIX:-/tmp/deps}
WORK=${WORK_DIR:-/tmp/cnnbench-gpu-check}
BUILD_DIR=${BUILD_DIR:-$WORK/build}
JOBS=${JOBS:-$(nproc)}
CUDA_ARCHS=${CUDA_ARCHS:-90}
PYTHON=${PYTHON:-python3}
check_int GPU_CHECK_DEADLINE "$DEADLINE_S" 1 86400
check_int JOBS "$JOBS" 1 1024
DEADLINE_AT=$(( START + DEADLINE_S ))

# Everything but the report and the log tarball stays in WORK.
rm -rf "$WORK/logs" "$WORK/tests" "$WORK/runs" "$WORK/state"
mkdir -p "$WORK/logs" "$WORK/tests" "$WORK/runs" "$WORK/state"
LOGS=$WORK/logs
STAGES=$WORK/state/stages.tsv   # name, status, seconds, note
FACTS=$WORK/state/facts.tsv     # key, value: what the report states besides the stages
: > "$STAGES"
: > "$FACTS"
rm -f "$OUTDIR/gpu-report.json" "$OUTDIR/gpu-check-logs.tar.gz"

say() { echo "== gpu-check [$(( $(date +%s) - START ))s] $*"; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\t'/ }" >> "$STAGES"; }
fact() { printf '%s\t%s\n' "$1" "${2//$'\t'/ }" >> "$FACTS"; }
remaining() { echo $(( DEADLINE_AT - $(date +%s) )); }
OUTCOME=""   # set when the script stops on purpose: no-device, error
stop() { OUTCOME=$1; fact stop_reason "$2"; echo "gpu-check: $2" >&2; exit 1; }
# After a stage that must succeed failed: the deadline, when that is what stopped it.
stage_failed() {
  (( $(remaining) < 5 )) && stop deadline "the ${DEADLINE_S}s deadline passed during $1: later stages skipped"
  if [[ $(tail -1 "$STAGES" | cut -f2) == timed-out ]]; then
    stop error "$1 timed out: $(tail -1 "$STAGES" | cut -f4) (see logs/$1.log)"
  fi
  stop error "$2"
}

# stage NAME CAP CMD...: runs CMD with a timeout of CAP seconds or what is left before the
# deadline, whichever is less, output to logs/NAME.log; records ok, failed (exit N), timed-out or
# skipped-for-deadline. Returns CMD's status (3 when skipped).
stage() {
  local name=$1 cap=$2 left limit t0 rc=0
  shift 2
  left=$(remaining)
  if (( left < 5 )); then
    record "$name" skipped-for-deadline 0 "deadline of ${DEADLINE_S}s passed"
    say "$name: skipped, the deadline has passed"
    return 3
  fi
  limit=$(( cap < left ? cap : left ))
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
  local seconds=$(( $(date +%s) - t0 ))
  if (( rc == 0 )); then
    record "$name" ok "$seconds" ""
  elif (( rc == 124 || rc == 137 )); then
    record "$name" timed-out "$seconds" "stopped after ${limit}s ($( (( limit < cap )) && echo deadline || echo "the stage's own limit"))"
  else
    record "$name" failed "$seconds" "exit $rc: $(tail -3 "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  say "$name: $(tail -1 "$STAGES" | cut -f2) in ${seconds}s"
  return "$rc"
}
# A device-only step in a dry run: recorded, not run.
stub() { record "$1" dry-run 0 "device step, not run (GPU_CHECK_DRY_RUN=1)"; say "$1: dry-run stub"; }
past_deadline() { (( $(remaining) < 5 )); }

# The report, whatever happens: from the EXIT trap, valid JSON even when the script ends early.
write_report() {
  local status=$?
  trap - EXIT
  set +e
  fact exit_status "$status"
  fact seconds "$(( $(date +%s) - START ))"
  if ! "$PYTHON" "$SOURCE/scripts/gpu_check_report.py" --work "$WORK" --source "$SOURCE" \
        --out "$WORK/gpu-report.json" --outcome "$OUTCOME" --dry-run "$DRY_RUN" \
        --deadline "$DEADLINE_S" > "$LOGS/report.log" 2>&1; then
    # No usable Python: a minimal report that still parses.
    printf '{"kind": "gpu-check", "outcome": "error", "error": "the report script failed: see logs/report.log", "dry_run": %s}\n' \
      "$([[ $DRY_RUN == 1 ]] && echo true || echo false)" > "$WORK/gpu-report.json"
  fi
  cat "$LOGS/report.log" 2>/dev/null
  cp "$WORK/gpu-report.json" "$OUTDIR/gpu-report.json"
  tar -czf "$OUTDIR/gpu-check-logs.tar.gz" -C "$WORK" logs tests runs state gpu-report.json 2>/dev/null
  say "done: $OUTDIR/gpu-report.json and gpu-check-logs.tar.gz"
  exit "$status"
}
trap write_report EXIT
trap 'fact signal TERM; exit 143' TERM
trap 'fact signal INT; exit 130' INT
fact deadline_s "$DEADLINE_S"
# The stages in order; those not reached when the deadline passes are reported as skipped.
printf '%s\n' nvidia-smi unpack-deps configure build cnnbench-info test_gpu_runtime test_gpu_kernels \
  test_gpu_timing test_gpu_module test_gpu_strategy cnnbench-lenet5-b1024 cnnbench-lenet5-b256 \
  cnnbench-lenet5-b64 cnnbench-lenet5-b1024-stream cnnbench-fc3-b1024 cnnbench-fc3-b256 \
  cnnbench-fc3-b64 cnnbench-fc3-b1024-stream gpu-trace-lenet5 gpu-trace-fc3-stream \
  torch-baseline two-ranks gpu-trace-2ranks > "$WORK/state/planned.txt"
fact dry_run "$DRY_RUN"
fact isolate "$ISOLATE"

# --- the machine -------------------------------------------------------------------------------
say "machine (deadline ${DEADLINE_S}s, dry run $DRY_RUN)"
if [[ $DRY_RUN == 1 ]]; then
  stub nvidia-smi
else
  command -v nvidia-smi >/dev/null || stop error "nvidia-smi not found: this machine has no NVIDIA driver"
  stage nvidia-smi 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    || stop no-device "nvidia-smi failed: no usable GPU (see logs/nvidia-smi.log)"
  fact device "$(head -1 "$LOGS/nvidia-smi.log")"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $NVCC ]] || stop error "nvcc not found on PATH nor at /usr/local/cuda/bin/nvcc (CUDA toolkit)"
for tool in cmake gcc g++ tar timeout; do
  command -v "$tool" >/dev/null || stop error "$tool not found on this machine (needed to build)"
done
fact nvcc "$("$NVCC" --version | tail -1)"
fact cmake "$(cmake --version | head -1)"
fact cxx "$(g++ --version | head -1)"

# --- the carried packages ----------------------------------------------------------------------
say "unpack the packages of $DEPS_DEBS into $DEPS"
[[ -f $DEPS_DEBS/SHA256SUMS ]] \
  || stop error "no packages at $DEPS_DEBS: run scripts/gpu-deps.sh on a Debian/Ubuntu machine with network first, and carry that folder"
unpack() {
  set -e
  cd "$DEPS_DEBS"
  sha256sum --quiet -c SHA256SUMS
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  for deb in ./*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$deb" "$DEPS"
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      local tmp
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$OLDPWD/$deb" && tar -xf data.tar.* -C "$DEPS")
      rm -rf "$tmp"
    fi
    echo "unpacked $deb"
  done
  # pkg-config files name /usr: point them at the prefix.
  find "$DEPS" -name '*.pc' -print0 | xargs -0 sed -i "s#\\(=\\|-I\\|-L\\)/usr/#\\1$DEPS/usr/#g"
  # Debian points libopenblas.so at the chosen flavour through alternatives, which dpkg -x skips.
  ls "$DEPS"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so
}
export DEPS_DEBS DEPS
export -f unpack
stage unpack-deps 60 bash -c unpack || stage_failed unpack-deps "unpacking the packages failed (see logs/unpack-deps.log)"
fact deps_packages "$(cd "$DEPS_DEBS" && ls ./*.deb | sed 's#^\./##' | tr '\n' ' ')"
fact deps_bytes "$(du -cb "$DEPS_DEBS"/*.deb | tail -1 | cut -f1)"

LIBDIR=$DEPS/usr/lib/x86_64-linux-gnu
export PATH=$DEPS/usr/bin:$(dirname "$NVCC"):$PATH
export LD_LIBRARY_PATH=$LIBDIR/openblas-pthread:$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$DEPS/usr
DEPS_PC=$LIBDIR/openblas-pthread/pkgconfig:$LIBDIR/pkgconfig:$DEPS/usr/share/pkgconfig
CONFIGURE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$(command -v gcc)"
                 -DCMAKE_CXX_COMPILER="$(command -v g++)" -DCNNBENCH_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC"
                 -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCNNBENCH_BUILD_BENCHMARKS=OFF
                 -DPKG_CONFIG_EXECUTABLE="$DEPS/usr/bin/pkgconf")
if command -v ninja >/dev/null; then
  CONFIGURE_FLAGS+=(-G Ninja -DCMAKE_MAKE_PROGRAM="$(command -v ninja)")
elif command -v make >/dev/null; then
  CONFIGURE_FLAGS+=(-G "Unix Makefiles" -DCMAKE_MAKE_PROGRAM="$(command -v make)")
else
  stop error "neither ninja nor make found on this machine (needed to build)"
fi
if [[ $ISOLATE == 1 ]]; then
  # Nothing from the system's prefixes: only the carried packages (and the CUDA toolkit, found
  # from nvcc). MPI and hwloc, which are not carried, are then off.
  export PKG_CONFIG_LIBDIR=$DEPS_PC
  unset PKG_CONFIG_PATH
  CONFIGURE_FLAGS+=(-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF
                    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
                    -DCNNBENCH_WITH_MPI=OFF -DCNNBENCH_WITH_HWLOC=OFF)
else
  export PKG_CONFIG_PATH=$DEPS_PC${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
fi

# --- MPI: optional; Open MPI needs its rsh agent to exist even on one machine -----------------
MPIRUN=()
mpi_probe() {
  if ! command -v mpirun >/dev/null; then
    fact mpi "no mpirun on this machine: one rank only"
    return
  fi
  local version
  version=$(mpirun --version 2>&1 | head -1)
  fact mpi_version "$version"
  local launch=()
  if [[ $version == *"Open MPI"* || $version == *"OpenRTE"* ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
    local agent
    for agent in default "" false; do
      [[ $agent != default ]] && export OMPI_MCA_plm_rsh_agent=$agent
      if timeout -k 2 20 "${launch[@]}" true > "$LOGS/mpi-probe.log" 2>&1; then
        MPIRUN=("${launch[@]}")
        fact mpi "Open MPI, 2 ranks start$([[ $agent != default ]] && echo " with OMPI_MCA_plm_rsh_agent='$agent' (no usable ssh/rsh)")"
        return
      fi
    done
    unset OMPI_MCA_plm_rsh_agent
  else
    launch=(mpirun -np 2)  # MPICH's hydra: fork on this machine, no ssh
    [[ $version == *HYDRA* || $version == *MPICH* ]] && launch=(mpirun -launcher fork -np 2)
    if timeout -k 2 20 "${launch[@]}" true > "$LOGS/mpi-probe.log" 2>&1; then
      MPIRUN=("${launch[@]}")
      fact mpi "not Open MPI ($version): 2 ranks start with ${launch[*]}"
      return
    fi
  fi
  fact mpi "mpirun cannot start 2 ranks here (see logs/mpi-probe.log): one rank only"
}
mpi_probe

# --- build -------------------------------------------------------------------------------------
say "configure + build in $BUILD_DIR (Release, CUDA archs $CUDA_ARCHS, -j$JOBS, isolate $ISOLATE)"
rm -rf "$BUILD_DIR"
stage configure 180 cmake -S "$SOURCE" -B "$BUILD_DIR" "${CONFIGURE_FLAGS[@]}" \
  || stage_failed configure "configure failed (see logs/configure.log)"
grep "cnnbench:" "$LOGS/configure.log"
TARGETS=(cnnbench_cli cnnbench_gpu test_gpu_runtime test_gpu_kernels test_gpu_timing test_gpu_module
         test_gpu_strategy)
if grep -q "cnnbench: MPI on" "$LOGS/configure.log" && [[ ${#MPIRUN[@]} -gt 0 ]]; then
  TARGETS+=(test_gpu_ranks)
else
  [[ ${#MPIRUN[@]} -gt 0 ]] && fact mpi "mpirun works but this build has no MPI (not carried; see logs/configure.log): one rank only"
  MPIRUN=()
fi
stage build "${GPU_CHECK_BUILD_LIMIT:-480}" cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}" \
  || stage_failed build "build failed (see logs/build.log)"
CLI=$BUILD_DIR/apps/cnnbench
[[ -x $CLI ]] || CLI=$(find "$BUILD_DIR/apps" -maxdepth 2 -type f -name cnnbench -perm -u+x | head -1)
[[ -n $CLI && -x $CLI ]] || stop error "the cnnbench binary was not built under $BUILD_DIR/apps"

# Where each dependency came from: the compilers' dependency files and the link lines.
# Ninja keeps the headers each object read in .ninja_deps (ninja -t deps), not in .d files.
audit() {
  { find "$BUILD_DIR" \( -name '*.d' -o -name 'link.txt' -o -name 'CMakeCache.txt' \) -print0 \
      | xargs -0 cat
    [[ -f $BUILD_DIR/.ninja_deps ]] && ninja -C "$BUILD_DIR" -t deps
  } | tr ' \\' '\n\n' \
    | grep -E '(nlohmann/json\.hpp|CLI/CLI\.hpp|hwy/highway\.h|gtest/gtest\.h|cblas\.h|libhwy\.so|libopenblas\.so|libgtest\.a|libgtest_main\.a)$' \
    | grep -v '^-' | sed -e 's#^[A-Za-z0-9_]*:[A-Z]*=##' -e 's#/\./#/#g' | sort -u
}
audit > "$WORK/state/deps-found.txt" 2>/dev/null
OUTSIDE=$(grep -v "^$DEPS/" "$WORK/state/deps-found.txt" | tr '\n' ' ')
fact deps_found "$(tr '\n' ' ' < "$WORK/state/deps-found.txt")"
fact deps_outside_prefix "$OUTSIDE"
if [[ $ISOLATE == 1 && -n $OUTSIDE ]]; then
  stop error "isolated build used files outside $DEPS: $OUTSIDE"
fi

# --- is there a device? --------------------------------------------------------------------------
if [[ $DRY_RUN == 1 ]]; then
  stub cnnbench-info
else
  stage cnnbench-info 60 "$CLI" info --json || stop no-device "cnnbench info failed (see logs/cnnbench-info.log)"
  devices=$("$PYTHON" -c 'import json,sys; g=json.load(open(sys.argv[1])).get("gpu",{}); d=g.get("devices",[]); print(len(d)); print(g.get("unavailable_reason") or g.get("reason") or "", file=sys.stderr)' "$LOGS/cnnbench-info.log" 2> "$WORK/state/no-device-reason.txt" || echo 0)
  fact cuda_devices "$devices"
  [[ $devices -gt 0 ]] || stop no-device "cnnbench info lists no CUDA device: $(cat "$WORK/state/no-device-reason.txt"); the GPU tests would only skip"
fi

# --- tests: gtest binaries run directly, a skipped test counts as a failure -----------------------
gtest() {  # gtest NAME CAP DEVICE_ONLY
  local name=$1 cap=$2 device_only=$3
  if [[ $DRY_RUN == 1 && $device_only == 1 ]]; then stub "$name"; return; fi
  stage "$name" "$cap" "$BUILD_DIR/tests/$name" --gtest_output="json:$WORK/tests/$name.json" || true
}
say "GPU tests"
gtest test_gpu_runtime 60 0
gtest test_gpu_kernels 120 0
gtest test_gpu_timing 60 0
gtest test_gpu_module 60 0
gtest test_gpu_strategy 240 1
[[ " ${TARGETS[*]} " == *" test_gpu_ranks "* ]] && gtest test_gpu_ranks 240 1

# --- benchmarks ----------------------------------------------------------------------------------
steps_for() { echo $(( 2000000 / $1 )); }  # about 2 million images per run
bench() {  # bench NAME CMD...
  local name=$1
  shift
  if [[ $DRY_RUN == 1 ]]; then stub "$name"; return; fi
  stage "$name" 60 "$@" || true
}
not_run() {  # not_run NAME REASON: a stub on a dry run, else recorded as skipped for REASON
  if [[ $DRY_RUN == 1 ]]; then stub "$1"; else record "$1" skipped 0 "$2"; fi
}
say "cnnbench --strategy gpu benchmarks"
for model in lenet5 fc3; do
  for batch in 1024 256 64; do
    bench "cnnbench-$model-b$batch" "$CLI" train --strategy gpu --model "$model" --batch "$batch" \
      --synthetic 60000 --steps "$(steps_for "$batch")" --report "$WORK/runs/cnnbench-$model-b$batch.json" --quiet
  done
  bench "cnnbench-$model-b1024-stream" "$CLI" train --strategy gpu --gpu-data stream --model "$model" \
    --batch 1024 --synthetic 60000 --steps "$(steps_for 1024)" \
    --report "$WORK/runs/cnnbench-$model-b1024-stream.json" --quiet
done
# Where the time goes: the breakdown adds up to train_seconds and the trace has the device track
# (scripts/gpu_trace_check.py). trace_check NAME RANKS CMD...: runs CMD with --report and --trace.
trace_check() {
  local name=$1 ranks=$2
  shift 2
  if [[ $DRY_RUN == 1 ]]; then stub "$name"; return; fi
  local report=$WORK/runs/$name.json trace=$WORK/runs/$name-trace.json
  stage "$name" 60 bash -c '"${@:3}" --report "$1" --trace "$2" --quiet &&
    "$PYTHON" "$SOURCE/scripts/gpu_trace_check.py" "$1" "$2" --ranks '"$ranks" \
    _ "$report" "$trace" "$@" || true
}
export PYTHON SOURCE
say "GPU time breakdown and trace"
trace_check gpu-trace-lenet5 1 "$CLI" train --strategy gpu --model lenet5 --batch 256 \
  --synthetic 60000 --steps 2000
trace_check gpu-trace-fc3-stream 1 "$CLI" train --strategy gpu --gpu-data stream --model fc3 \
  --batch 256 --synthetic 60000 --steps 2000
if [[ $DRY_RUN != 1 ]] && "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  say "PyTorch baseline"
  for model in lenet5 fc3; do
    for batch in 1024 256 64; do
      bench "torch-$model-b$batch" "$PYTHON" "$SOURCE/bench/gpu_torch.py" --model "$model" --batch "$batch" \
        --steps "$(( $(steps_for "$batch") / 2 ))" --json "$WORK/runs/torch-$model-b$batch.json"
    done
  done
else
  not_run torch-baseline "PyTorch with CUDA not importable"
fi
if [[ ${#MPIRUN[@]} -gt 0 ]]; then
  say "2 MPI ranks sharing the GPU"
  for model in lenet5 fc3; do
    for batch in 1024 256; do
      bench "cnnbench-$model-b$batch-2ranks" "${MPIRUN[@]}" "$CLI" train --strategy gpu --model "$model" \
        --batch "$batch" --synthetic 60000 --steps "$(( $(steps_for "$batch") / 2 ))" \
        --report "$WORK/runs/cnnbench-$model-b$batch-2ranks.json" --quiet
    done
  done
  trace_check gpu-trace-2ranks 2 "${MPIRUN[@]}" "$CLI" train --strategy gpu --model lenet5 \
    --batch 256 --synthetic 60000 --steps 1000
else
  not_run two-ranks "no MPI in this build or mpirun cannot start 2 ranks"
  not_run gpu-trace-2ranks "no MPI in this build or mpirun cannot start 2 ranks"
fi
past_deadline && fact deadline_reached 1
# The exit status: 0 only when every step that ran succeeded and no test was skipped.
grep -qE $'\t(failed|timed-out|skipped-for-deadline)\t' "$STAGES" && exit 1
grep -qF '[  SKIPPED ]' "$LOGS"/test_*.log 2>/dev/null && exit 1
exit 0
