#!/usr/bin/env bash
# ARM check: cross-builds the layers, models, test_layers and test_models for aarch64 and runs them
# under qemu-user, testing the NEON kernels on x86-64. Usage: scripts/check-aarch64.sh [gtest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/check_args.sh"
answer_help "$@"
cd "$root"
build=build/aarch64
jobs=2
# The CPU qemu emulates (qemu-aarch64 -cpu help lists them) and the test binaries to run.
qemu_cpu=${CNNBENCH_QEMU_CPU:-max}
read -r -a tests <<<"${CNNBENCH_AARCH64_TESTS:-test_layers test_models}"

say() { echo "check-aarch64: $*"; }
die() { echo "check-aarch64: error: $*" >&2; exit 1; }
mkdir -p build
timings=()
stage_start=0
start() { stage_start=$SECONDS; say "== $1"; }
done_stage() { timings+=("$(printf '%-12s %4ds' "$1" $((SECONDS - stage_start)))"); }

# --- 1. packages (Debian bookworm): only what is missing, like scripts/setup.sh ----------------
start install
packages=(
  cmake make pkg-config g++-aarch64-linux-gnu nlohmann-json3-dev
  libhwy-dev:arm64 libgtest-dev:arm64 libopenblas-dev:arm64
)
# qemu-user-static serves as well as qemu-user.
command -v qemu-aarch64 >/dev/null 2>&1 || command -v qemu-aarch64-static >/dev/null 2>&1 \
  || packages+=(qemu-user)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get (Debian bookworm expected)"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "need root or sudo to install: ${missing[*]}"
    sudo="sudo"
  fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    say "adding the arm64 dpkg architecture"
    $sudo dpkg --add-architecture arm64
  fi
  say "installing ${missing[*]} (log: $build.install.log)"
  export DEBIAN_FRONTEND=noninteractive
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$build.install.log" 2>&1 \
    || { tail -20 "$build.install.log" >&2; die "apt-get failed installing: ${missing[*]}"; }
else
  say "all ${#packages[@]} packages present"
fi
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static) \
  || die "no qemu-aarch64 on PATH (install qemu-user)"
done_stage install

# --- 2. cross-build: scripts/aarch64/CMakeLists.txt builds only core, layers, models, data ------
start configure
cmake -S scripts/aarch64 -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DCNNBENCH_WERROR=ON >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log" >&2; die "cmake configure failed (log: $build.configure.log)"; }
grep -E '^-- cnnbench-aarch64' "$build.configure.log" || true
done_stage configure

start build
cmake --build "$build" -j"$jobs" || die "cross-build failed"
done_stage build

# --- 3. run under qemu-user ----------------------------------------------------------------------
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu QEMU_CPU=$qemu_cpu
# OpenBLAS 0.3.21 hangs at load time under qemu-user while starting its thread pool; with one
# thread it starts none (the layer and model tests need no more).
export OPENBLAS_NUM_THREADS=1
run_arm() { "$qemu" -L "$QEMU_LD_PREFIX" -cpu "$qemu_cpu" "$@"; }

start probe
say "emulator: $("$qemu" --version | head -1), CPU model '$qemu_cpu'"
probe=$(run_arm "$build/isa_probe") || die "isa_probe failed under qemu (the cross-built binaries do not run)"
echo "$probe"
targets=$(sed -n 's/^isa_probe: SIMD targets the tests run (supported): \(.*\) (highest.*/\1/p' <<<"$probe")
done_stage probe

failed=()
for t in "${tests[@]}"; do
  [[ -x "$build/$t" ]] || die "no test binary $build/$t (CNNBENCH_AARCH64_TESTS takes test_layers, test_models)"
  start "$t"
  if run_arm "$build/$t" --gtest_brief=1 "$@"; then
    say "$t passed"
  else
    say "$t FAILED"
    failed+=("$t")
  fi
  done_stage "$t"
done

say "times:"
printf '  %s\n' "${timings[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  die "failed under qemu-aarch64 (SIMD targets: $targets): ${failed[*]}"
fi
say "all passed on aarch64 (${tests[*]}; SIMD targets: $targets)"
