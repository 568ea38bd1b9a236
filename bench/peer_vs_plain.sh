#!/usr/bin/env bash
# The sweep's `pytorch` peer on one thread against a plain PyTorch training loop on the same core
# (docs/design.md, "Peer strategies"): for each model, PAIRS turns of first the peer point
# (`cnnbench sweep --strategies pytorch --cores 1`, its median images/s over --repeat
# repetitions) and then bench/plain_torch_loop.py (median of as many blocks of --steps batches),
# pinned to the core the peer ran on; prints each pair's images/s and ratio peer/plain and the
# median ratio. The plain loop shares no code with the peer, so the ratio says what the peer's
# harness costs beyond what PyTorch itself does. Both inherit this shell's environment
# (OPENBLAS_CORETYPE included; run under `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` for
# OpenBLAS's own choice).
#
# usage: bench/peer_vs_plain.sh [--cli PATH] [--pairs N] [--models "lenet5 fc3"] [--steps N]
#                               [--repeat N] [--batch N] [--data DIR] [--python PATH]
#                               [--chrt PRIORITY] [--out FILE [--force]]
# --cli: the cnnbench to run (default build/release/apps/cnnbench; not a sanitizer build).
# --data: MNIST's folder (default datasets/mnist; datasets/fetch_mnist.sh fetches it).
# --chrt PRIORITY: both sides under `chrt -f PRIORITY` (root), so that other programs on a shared
# machine do not take the core mid-run.
# --out: also write the pairs as JSON (refused if FILE exists, unless --force).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root=$(dirname "$here")
source "$here/bench_args.sh"
cli="$root/build/release/apps/cnnbench"
pairs=5
models="lenet5 fc3"
steps=300
repeat=3
batch=64
data="$root/datasets/mnist"
python=/usr/bin/python3
out=""
force=0
chrt_prefix=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli="$2"; shift 2 ;;
    --pairs) pairs="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --chrt) bench_check_int --chrt "$2" 1 99; chrt_prefix=(chrt -f "$2"); shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) bench_usage_error "unknown argument '$1' (see --help)" ;;
  esac
done

bench_check_int --pairs "$pairs" 1 100
bench_check_int --steps "$steps" 1 1000000
bench_check_int --repeat "$repeat" 1 100
bench_check_int --batch "$batch" 1 65536
for model in $models; do
  [[ $model == lenet5 || $model == fc3 ]] || bench_usage_error "--models takes lenet5 and fc3, not '$model'"
done
bench_check_cli "$cli"
[[ -f "$data/train-images-idx3-ubyte" ]] || bench_usage_error "no MNIST in $data (datasets/fetch_mnist.sh, or --data DIR)"
"$python" -c "import torch" 2>/dev/null || bench_usage_error "$python cannot import torch (apt-get install python3-torch, or --python PATH)"
[[ -z "$out" ]] || bench_check_output "$out" "$force"

# The peer keeps freed memory (bench/torch_peer.py, KEEP_FREED_MEMORY); the plain loop gets the
# same allocator setting, so that the ratio measures the harness, not glibc's heap layout (which
# moved a plain loop 2x from one process to the next).
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-33554432}
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-4000000000}
export MALLOC_TOP_PAD_=${MALLOC_TOP_PAD_:-268435456}
work=$(mktemp -d "${TMPDIR:-/tmp}/peer-vs-plain-XXXXXX")
trap 'rm -rf "$work"' EXIT

# FIELD of a JSON file, a Python expression over `d`.
json_field() {
  "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
median() {
  "$python" -c 'import statistics,sys; print(statistics.median(float(v) for v in sys.argv[1:]))' "$@"
}

cpu_field() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
machine="$(nproc) cores, $(cpu_field 'model name'), family $(cpu_field 'cpu family') model $(cpu_field 'model')"
coretype="${OPENBLAS_CORETYPE:-unset}"
echo "cnnbench: $cli"
echo "machine: $machine"
echo "OPENBLAS_CORETYPE: $coretype; ${chrt_prefix[*]:-no chrt}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "malloc (both sides): MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_=$MALLOC_TOP_PAD_"
printf '%-7s %4s %4s %12s %12s %7s\n' model pair cpu peer_img/s plain_img/s ratio

results="$work/pairs.tsv"
: >"$results"
for model in $models; do
  ratios=()
  for ((pair = 1; pair <= pairs; ++pair)); do
    "${chrt_prefix[@]}" "$cli" sweep --model "$model" --strategies pytorch --cores 1 --steps "$steps" --repeat "$repeat" \
      --batch "$batch" --data "$data" --python "$python" --quiet --out "$work/sweep.json" --force >/dev/null
    point="[p for p in d['points'] if p['strategy'] == 'pytorch'][0]"
    status=$(json_field "$work/sweep.json" "$point['status']")
    [[ $status == ok ]] || { echo "$bench_script: the pytorch point was $status: $(json_field "$work/sweep.json" "$point.get('reason')")" >&2; exit 1; }
    peer=$(json_field "$work/sweep.json" "$point['images_per_s']['median']")
    cpu=$(json_field "$work/sweep.json" "$point['pin_map'][0]['pu']")
    plain=$("${chrt_prefix[@]}" taskset -c "$cpu" "$python" "$here/plain_torch_loop.py" --model "$model" --data "$data" \
              --batch "$batch" --batches "$steps" --repeat "$repeat" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')
    ratio=$("$python" -c "print($peer / $plain)")
    ratios+=("$ratio")
    printf '%-7s %4d %4d %12.0f %12.0f %7.3f\n' "$model" "$pair" "$cpu" "$peer" "$plain" "$ratio"
    printf '%s\t%d\t%d\t%s\t%s\t%s\n' "$model" "$pair" "$cpu" "$peer" "$plain" "$ratio" >>"$results"
  done
  printf '%-7s median ratio peer/plain over %d pairs: %.3f\n' "$model" "$pairs" "$(median "${ratios[@]}")"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ -n "$out" ]]; then
  "$python" - "$results" "$out.tmp" "$machine" "$coretype" "$cli" "$steps" "$repeat" "$batch" \
    "${chrt_prefix[*]:-none}" <<'EOF'
import json, statistics, sys
rows, out, machine, coretype, cli, steps, repeat, batch, chrt = sys.argv[1:]
pairs = [dict(zip(("model", "pair", "cpu", "peer_images_per_s", "plain_images_per_s", "ratio"),
                  (m, int(p), int(c), float(a), float(b), float(r))))
         for m, p, c, a, b, r in (line.split("\t") for line in open(rows).read().splitlines())]
models = sorted({p["model"] for p in pairs})
json.dump({"machine": machine, "openblas_coretype": coretype, "cli": cli, "steps": int(steps),
           "repeat": int(repeat), "batch": int(batch), "chrt": chrt, "pairs": pairs,
           "median_ratio": {m: statistics.median(p["ratio"] for p in pairs if p["model"] == m)
                            for m in models}}, open(out, "w"), indent=1)
EOF
  mv "$out.tmp" "$out"
  echo "wrote $out"
fi
