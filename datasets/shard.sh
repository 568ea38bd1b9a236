#!/usr/bin/env bash
# Cuts the MNIST training set into N contiguous blocks, one folder per block, for
# `cnnbench train --strategy cluster --shard-data --data DIR` (docs/cluster.md, "Per-node data"):
# DIR/shard-R holds block R's samples as valid IDX files, the test files, and block.txt naming
# the block, its first index and count and the whole set's count. Block R is the one the training
# order gives rank R (the first total % N blocks hold one sample more).
# Usage: shard.sh [--from MNIST_DIR] N DIR
set -euo pipefail

usage() {
  cat <<EOF
usage: $(basename "$0") [--from MNIST_DIR] N DIR
  N              number of blocks (the MPI job's ranks), >= 1
  DIR            where shard-0 .. shard-(N-1) go (created; existing shard folders are replaced)
  --from FOLDER  the MNIST raw IDX files (default: datasets/mnist in the repository)
EOF
}

die() {
  echo "shard: error: $*" >&2
  exit 1
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check_args_script=shard
source "$repo_root/scripts/check_args.sh"
source_dir="$repo_root/datasets/mnist"
positional=()
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
    -*) check_args_fail "unknown option '$(check_args_shown "$1")' (see --help)" ;;
    *)
      positional+=("$1")
      shift
      ;;
  esac
done
[[ ${#positional[@]} -eq 2 ]] || { usage >&2; exit 2; }
blocks="${positional[0]}"
target_dir="${positional[1]}"
check_int N "$blocks" 1 999999999
blocks=$((10#$blocks))

images="$source_dir/train-images-idx3-ubyte"
labels="$source_dir/train-labels-idx1-ubyte"
for file in "$images" "$labels" "$source_dir/t10k-images-idx3-ubyte" "$source_dir/t10k-labels-idx1-ubyte"; do
  [[ -f "$file" ]] || die "$file is missing: run datasets/fetch_mnist.sh (raw files are needed)"
done

# The big-endian 32-bit word at byte offset $2 of file $1.
be32_at() { od -An -tu1 -j "$2" -N 4 "$1" | awk '{ print (($1 * 256 + $2) * 256 + $3) * 256 + $4 }'; }
# Four bytes of the big-endian $1, as escapes for printf %b.
be32_bytes() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
# Bytes [$2, $2 + $3) of file $1.
byte_range() { dd if="$1" bs=1M iflag=skip_bytes,count_bytes skip="$2" count="$3" status=none; }

[[ "$(od -An -tx1 -N 4 "$images" | tr -d ' \n')" == "00000803" ]] || die "$images: not an IDX file of rank 3 (magic 0x00000803)"
[[ "$(od -An -tx1 -N 4 "$labels" | tr -d ' \n')" == "00000801" ]] || die "$labels: not an IDX file of rank 1 (magic 0x00000801)"
total="$(be32_at "$images" 4)"
rows="$(be32_at "$images" 8)"
cols="$(be32_at "$images" 12)"
[[ "$(be32_at "$labels" 4)" == "$total" ]] || die "$labels: its count differs from $images's $total"
image_bytes=$((rows * cols))
[[ "$(stat -c %s "$images")" == $((16 + total * image_bytes)) ]] || die "$images: size differs from its header"
[[ "$(stat -c %s "$labels")" == $((8 + total)) ]] || die "$labels: size differs from its header"
((blocks <= total)) || die "N = $blocks is more than the $total samples"

mkdir -p "$target_dir"
staging="$(mktemp -d "$target_dir/.tmp-XXXXXX")"
trap 'rm -rf "$staging"' EXIT
first=0
for ((block = 0; block < blocks; ++block)); do
  count=$((total / blocks + (block < total % blocks ? 1 : 0)))
  folder="$staging/shard-$block"
  mkdir "$folder"
  {
    printf '\x00\x00\x08\x03'
    printf %b "$(be32_bytes "$count")$(be32_bytes "$rows")$(be32_bytes "$cols")"
    byte_range "$images" $((16 + first * image_bytes)) $((count * image_bytes))
  } >"$folder/train-images-idx3-ubyte"
  {
    printf '\x00\x00\x08\x01'
    printf %b "$(be32_bytes "$count")"
    byte_range "$labels" $((8 + first)) "$count"
  } >"$folder/train-labels-idx1-ubyte"
  cp "$source_dir/t10k-images-idx3-ubyte" "$source_dir/t10k-labels-idx1-ubyte" "$folder/"
  cat >"$folder/block.txt" <<EOF
# cnnbench data block, written by datasets/shard.sh from $source_dir
blocks $blocks
block $block
first $first
count $count
total $total
EOF
  first=$((first + count))
done
# Whole folders into place, so a reader never sees half a block; blocks of an earlier, larger N go.
for old in "$target_dir"/shard-*; do
  [[ -d "$old" && "${old##*/shard-}" =~ ^[0-9]+$ ]] || continue
  ((${old##*/shard-} < blocks)) || rm -rf "$old"
done
for ((block = 0; block < blocks; ++block)); do
  rm -rf "$target_dir/shard-$block"
  mv "$staging/shard-$block" "$target_dir/shard-$block"
done
echo "shard: wrote $blocks blocks of the $total training samples into $target_dir/shard-0 .. shard-$((blocks - 1))"
