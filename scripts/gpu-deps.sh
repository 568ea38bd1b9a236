#!/usr/bin/env bash
# Downloads the Debian packages that scripts/gpu-check.sh builds against on a GPU machine that is
# offline and bare: headers, CMake configs and the libraries they need at run time. They go to an
# ignored folder (default .gpu-deps/) that travels with the working tree; gpu-check.sh unpacks
# them with dpkg -x into a private prefix, never into /. Needs apt-get and a Debian/Ubuntu mirror.
#   usage: scripts/gpu-deps.sh [DIR]
# A DIR that exists must be one this script made (it holds its .gpu-deps-folder mark): it is
# emptied and filled again; any other folder is refused, never deleted.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
check_args_script=gpu-deps
source "$root/scripts/check_args.sh"
answer_help "$@"
(($# <= 1)) || check_args_fail "takes one folder at most (usage: scripts/gpu-deps.sh [DIR])"
[[ ${1:-} != -* ]] || check_args_fail "unknown option '$(check_args_shown "$1")' (usage: scripts/gpu-deps.sh [DIR])"
dir=${1:-$root/.gpu-deps}
mark=.gpu-deps-folder
if [[ -e $dir || -L $dir ]]; then
  [[ -d $dir && ! -L $dir ]] || check_args_fail "$(check_args_shown "$dir") exists and is not a folder; give a new folder"
  # The default folder is this script's by its name, mark or not (older copies have none).
  if [[ -n $(ls -A "$dir") && ! -f $dir/$mark && $dir != "$root/.gpu-deps" ]]; then
    check_args_fail "$(check_args_shown "$dir") is a folder this script did not make (no $mark in it), so it is not emptied; give a new or empty folder"
  fi
fi

# What the configure needs (nlohmann_json, CLI11, Highway, OpenBLAS through pkg-config, GTest),
# with the run-time libraries behind them, and pkg-config itself. CMake, g++ and the CUDA toolkit
# are the GPU machine's own; MPI and hwloc are optional there and not carried.
packages=(
  nlohmann-json3-dev libcli11-dev
  libhwy1 libhwy-dev
  libopenblas0 libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 libquadmath0
  libgtest-dev
  pkgconf pkgconf-bin libpkgconf3
)

command -v apt-get >/dev/null || { echo "gpu-deps: error: apt-get not found (needs Debian or Ubuntu)" >&2; exit 1; }
[[ $(dpkg --print-architecture) == amd64 ]] \
  || { echo "gpu-deps: error: this machine is $(dpkg --print-architecture); the GPU machine is amd64" >&2; exit 1; }

# Keep the folder out of git: it travels as an ignored path.
exclude=$(git -C "$root" rev-parse --git-path info/exclude)
[[ $exclude = /* ]] || exclude=$root/$exclude
mkdir -p "$(dirname "$exclude")"
rel=${dir#"$root"/}
if [[ $rel != "$dir" ]] && ! grep -qxF "/$rel/" "$exclude" 2>/dev/null; then
  echo "/$rel/" >> "$exclude"
  echo "gpu-deps: added /$rel/ to $exclude"
fi

mkdir -p "$dir"
find "$dir" -mindepth 1 -maxdepth 1 -name '*.deb' -delete
rm -f "$dir/SHA256SUMS"
touch "$dir/$mark"
(cd "$dir" && apt-get download "${packages[@]}") \
  || { echo "gpu-deps: error: apt-get download failed in $dir (run apt-get update?)" >&2; exit 1; }
count=$(find "$dir" -maxdepth 1 -name '*.deb' | wc -l)
[[ $count -eq ${#packages[@]} ]] \
  || { echo "gpu-deps: error: expected ${#packages[@]} .deb files in $dir, got $count" >&2; exit 1; }
(cd "$dir" && sha256sum ./*.deb > SHA256SUMS)
ls -l "$dir"
bytes=$(du -cb "$dir"/*.deb | tail -1 | cut -f1)
tree_bytes=$(git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && xargs -0 du -cb 2>/dev/null) | awk '$2 == "total" {s += $1} END {print s + 0}')
echo "gpu-deps: $count packages, $(( bytes / 1024 )) KiB; with the working tree ($(( tree_bytes / 1024 )) KiB): $(( (bytes + tree_bytes) / 1024 / 1024 )) MiB of the 64 MiB that may travel"
(( bytes + tree_bytes < 64 * 1024 * 1024 )) \
  || { echo "gpu-deps: error: the packages and the working tree exceed 64 MiB" >&2; exit 1; }
