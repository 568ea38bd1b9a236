#!/usr/bin/env bash
# CI sanitizer and fuzz jobs: the unit tests under ASan + UBSan and the libFuzzer targets, all from
# one clang build (preset asan), a 30-second smoke run of each fuzzer, and the worker pool, stream
# runtime, stream strategy and cluster tests under ThreadSanitizer (preset tsan, with MPI).
# Usage: scripts/ci-sanitizers.sh [asan] [fuzz] [tsan]  (default: all three, in that order)
# Environment: FUZZ_SECONDS (default 30) per fuzzer; ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/check_args.sh"
answer_help "$@"
cd "$root"
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(asan fuzz tsan)

stage_start=$SECONDS
step() {
  printf '\n== ci-sanitizers: %s (%ds so far, previous step %ds)\n' "$*" "$SECONDS" \
    "$((SECONDS - stage_start))"
  stage_start=$SECONDS
}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "ci-sanitizers: clang++ not found: install clang and libclang-rt-14-dev (scripts/setup.sh)" >&2
  exit 1
fi

# The asan build holds the unit tests and the fuzzers: one library build serves both.
asan_configured=0
configure_asan() {
  [[ $asan_configured == 1 ]] && return
  # A build/asan left by the former GCC preset cannot switch compilers in place.
  if [[ -f build/asan/CMakeCache.txt ]] && ! grep -q "^CMAKE_CXX_COMPILER:.*clang" build/asan/CMakeCache.txt; then
    cmake --preset asan --fresh >/dev/null
  else
    cmake --preset asan >/dev/null
  fi
  asan_configured=1
}

# The fuzz targets this checkout defines (fuzz/CMakeLists.txt lists them at configure time).
fuzzers() { cat build/asan/fuzz/fuzzers.txt; }

run_asan() {
  step "ASan + UBSan: build the unit tests and the fuzzers"
  configure_asan
  # Everything this build defines (the library, the CLI, the tests, the fuzzers): one make goal
  # builds the one-file test binaries in parallel, where a list of targets builds them one by one.
  # Clang warns where GCC does not; the ci preset is the build that keeps warnings errors.
  cmake --build --preset asan -j"$jobs"

  step "ASan + UBSan: unit tests"
  # The Python checks and the docs' commands only drive the CLI through cases the unit tests
  # already cover, and the install check builds a downstream project: they stay in the regular
  # build.
  # Leak checking stays on; OpenBLAS's thread pool lives until exit and is not a leak of ours.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    ctest --preset asan -L unit -E "^(install_downstream|docs_commands|py_.*)$" -j"$jobs"
}

# One fuzzer for fuzz_seconds on the committed corpus; new inputs go to a scratch folder.
fuzz_one() {
  local name=$1 target=${1#fuzz_} scratch=$2
  build/asan/fuzz/"$name" "$scratch" "fuzz/corpus/$target" -max_total_time="$fuzz_seconds" \
    -malloc_limit_mb=512 -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -artifact_prefix="$scratch/" -print_final_stats=1 >"$scratch/log" 2>&1
}

run_fuzz() {
  step "libFuzzer: build"
  configure_asan
  local names
  mapfile -t names < <(fuzzers)
  cmake --build --preset asan -j"$jobs" --target "${names[@]}"

  step "libFuzzer: ${#names[@]} targets for ${fuzz_seconds}s each, $jobs at a time"
  local failed=0 i
  for ((i = 0; i < ${#names[@]}; i += jobs)); do
    local batch=("${names[@]:i:jobs}") pids=() scratches=() name
    for name in "${batch[@]}"; do
      local scratch
      scratch=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-$name.XXXXXX")
      scratches+=("$scratch")
      fuzz_one "$name" "$scratch" &
      pids+=($!)
    done
    local k
    for k in "${!batch[@]}"; do
      name=${batch[k]}
      if wait "${pids[k]}"; then
        printf '%s: ' "$name"
        grep -E "Done [0-9]+ runs" "${scratches[k]}/log" || echo "finished"
        rm -rf "${scratches[k]}"
      else
        failed=1
        tail -n 60 "${scratches[k]}/log" >&2
        echo "ci-sanitizers: $name failed; the input is in ${scratches[k]} (crash-*, leak-*, oom-*)" >&2
      fi
    done
  done
  return "$failed"
}

run_tsan() {
  step "TSan: build"
  cmake --preset tsan >/dev/null
  local targets=(test_worker_pool test_balance test_cluster_strategy test_stream_runtime
                 test_stream_strategy test_stream_many_cores)
  # With MPI the cluster tests join: their ranks are this build's binaries under mpirun.
  if grep -q "^CNNBENCH_WITH_MPI:BOOL=ON" build/tsan/CMakeCache.txt; then
    targets+=(test_cluster_shares test_cluster)
  fi
  cmake --build --preset tsan -j"$jobs" --target "${targets[@]}"

  step "TSan: ${targets[*]}"
  # OpenBLAS hands work to its own threads through uninstrumented spin flags, which TSan reports
  # as races on the matrices; cnnbench runs it on one thread anyway (set_blas_threads(1)), and so
  # do the tests' serial oracles with OPENBLAS_NUM_THREADS=1.
  # Open MPI's own libraries are not instrumented; scripts/tsan.supp names their frames only.
  export OPENBLAS_NUM_THREADS=1
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}
  # The cluster tests oversubscribe the cores with mpirun, so they run after the rest.
  ctest --test-dir build/tsan -R "^($(IFS='|'; echo "${targets[*]}"))$" -LE mpi -j"$jobs" \
    --output-on-failure
  if [[ " ${targets[*]} " == *" test_cluster "* ]]; then
    ctest --test-dir build/tsan -R "^(test_cluster_shares|test_cluster)$" --output-on-failure
  fi
}

for stage in "${stages[@]}"; do
  case "$stage" in
    asan) run_asan ;;
    fuzz) run_fuzz ;;
    tsan) run_tsan ;;
    *) echo "ci-sanitizers: unknown stage '$stage' (asan, fuzz or tsan)" >&2; exit 2 ;;
  esac
done
step "done"
