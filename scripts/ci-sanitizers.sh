#!/usr/bin/env bash
# CI sanitizer and fuzz jobs: the unit tests under ASan + UBSan (preset asan), the threaded runtime
# and stream tests under ThreadSanitizer (preset tsan), and a 30-second smoke run of every libFuzzer
# target (clang, build/fuzz). Usage: scripts/ci-sanitizers.sh [asan] [tsan] [fuzz]  (default: all)
# Environment: FUZZ_SECONDS (default 30) per target.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(asan tsan fuzz)

step() { printf '\n== ci-sanitizers: %s (%ds so far)\n' "$*" "$SECONDS"; }

# Unit test binaries: one per tests/test_*.cpp (the MPI and MNIST tests are not built here).
unit_targets=(cnnbench_cli)
for source in tests/test_*.cpp; do
  unit_targets+=("$(basename "$source" .cpp)")
done

run_asan() {
  step "ASan + UBSan: unit tests"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$jobs" --target "${unit_targets[@]}"
  # Leak checking stays on; OpenBLAS's thread pool lives until exit and is not a leak of ours.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    ctest --preset asan -L unit -E "^install_downstream$" -j"$jobs"
}

run_tsan() {
  step "TSan: worker pool, stream runtime, stream strategy"
  local targets=(test_worker_pool test_stream_runtime test_stream_strategy)
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j"$jobs" --target "${targets[@]}"
  local regex
  regex="^($(IFS='|'; echo "${targets[*]}"))$"
  TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
    ctest --test-dir build/tsan -R "$regex" -j"$jobs" --output-on-failure
}

run_fuzz() {
  step "libFuzzer: build"
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "ci-sanitizers: clang++ not found: install clang and libclang-rt-dev (or llvm) to fuzz" >&2
    return 1
  fi
  # Warnings are not errors here: this build exists to fuzz, and clang warns differently from GCC.
  cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCNNBENCH_BUILD_FUZZERS=ON \
    -DCNNBENCH_SANITIZE=address,undefined -DCNNBENCH_WITH_CUDA=OFF -DCNNBENCH_WITH_MPI=OFF \
    -DCNNBENCH_BUILD_TESTS=OFF -DCNNBENCH_BUILD_BENCHMARKS=OFF -DCNNBENCH_WERROR=OFF >/dev/null
  # The targets this checkout defines (fuzz/CMakeLists.txt says at configure time which it skips).
  local fuzzers
  mapfile -t fuzzers <build/fuzz/fuzz/fuzzers.txt
  cmake --build build/fuzz -j"$jobs" --target "${fuzzers[@]}"

  local failed=0
  for name in "${fuzzers[@]}"; do
    local target=${name#fuzz_}
    step "libFuzzer: $name for ${fuzz_seconds}s"
    # New inputs go to a scratch folder; the committed corpus is only read.
    local scratch
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/cnnbench-fuzz-$target.XXXXXX")
    if ! build/fuzz/fuzz/"$name" "$scratch" "fuzz/corpus/$target" -max_total_time="$fuzz_seconds" \
        -malloc_limit_mb=512 -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
        -artifact_prefix="$scratch/" -print_final_stats=1 >"$scratch/log" 2>&1; then
      failed=1
      tail -n 60 "$scratch/log" >&2
      echo "ci-sanitizers: $name failed; the input is in $scratch (crash-*, leak-*, oom-*)" >&2
    else
      grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$scratch/log" || true
      rm -rf "$scratch"
    fi
  done
  return "$failed"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    fuzz) run_fuzz ;;
    *) echo "ci-sanitizers: unknown stage '$stage' (asan, tsan or fuzz)" >&2; exit 2 ;;
  esac
done
step "done"
