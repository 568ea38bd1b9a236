#!/usr/bin/env bash
# Serial training throughput of cnnbench against PyTorch on one thread, measured side by side:
# for each model and batch, PAIRS alternating runs of the two programs, then the median images/s
# of each and the median of the per-pair ratios (cnnbench / PyTorch).
#
# usage: bench/serial_vs_pytorch.sh [--cli PATH] [--pairs N] [--batches "16 64 256"]
#                                   [--models "lenet5 fc3"] [--images N] [--isa TARGET]
#                                   [--torch-coretype NAME|unset|inherit] [--torch-isa avx2|unset]
# --cli: the cnnbench to time (default build/release/apps/cnnbench; a sanitizer build is refused).
# --isa runs cnnbench's kernels on that SIMD target (default: the CPU's best). PyTorch's OpenBLAS
# then gets its AVX2 setting, OPENBLAS_CORETYPE=Haswell, for avx2 and the targets below it, and
# is left unset (OpenBLAS picks the CPU's best) otherwise; --torch-coretype overrides that
# (inherit: leave the environment be). OPENBLAS_CORETYPE reaches PyTorch's dense layers only: its
# convolutions run on oneDNN, which picks its own ISA. --torch-isa avx2 caps that too
# (DNNL_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2): PyTorch as it runs on a CPU without AVX-512.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_args.sh"
cli="$(dirname "$here")/build/release/apps/cnnbench"
pairs=5
batches="16 64 256"
models="lenet5 fc3"
images=32768  # per run and model (FC-3 gets twice as many: it is about twice as fast)
isa=best
torch_coretype=""
torch_isa=unset
python=/usr/bin/python3

while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli="$2"; shift 2 ;;
    --pairs) pairs="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --isa) isa="$2"; shift 2 ;;
    --torch-coretype) torch_coretype="$2"; shift 2 ;;
    --torch-isa) torch_isa="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) bench_usage_error "unknown argument '$1' (see --help)" ;;
  esac
done

bench_check_int --pairs "$pairs" 1 100
bench_check_int --images "$images" 1 100000000
for batch in $batches; do bench_check_int --batches "$batch" 1 65536; done
bench_check_cli "$cli"
[[ -x "$python" ]] || python="$(command -v python3)"
if [[ -z "$torch_coretype" ]]; then
  case "$isa" in
    avx2|sse4|scalar) torch_coretype=Haswell ;;
    *) torch_coretype=unset ;;
  esac
fi
# The environment PyTorch runs in: OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE, set with it on some
# machines) as chosen above; cnnbench's own environment is left as it is.
torch_env=(env)
case "$torch_coretype" in
  inherit) ;;
  unset) torch_env+=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE) ;;
  *) torch_env+=(OPENBLAS_CORETYPE="$torch_coretype") ;;
esac
# glibc's malloc hands PyTorch's large per-step buffers back to the OS and maps them again every
# step unless told to keep them: a plain loop then ran at 6-14k images/s from one process to the
# next instead of 13-14k (docs/design.md, "Peer strategies"). The peer keeps them, and so does the
# PyTorch side here (unless the environment set these itself).
torch_env+=(MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-33554432}"
            MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-4000000000}"
            MALLOC_TOP_PAD_="${MALLOC_TOP_PAD_:-268435456}")
case "$torch_isa" in
  unset) ;;
  avx2) torch_env+=(DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) ;;
  *) bench_usage_error "--torch-isa takes avx2 or unset, not '$torch_isa'" ;;
esac

have_torch=1
if ! "$python" -c "import torch" 2>/dev/null; then
  have_torch=0
  echo "python3-torch is not installed: reporting cnnbench's numbers only" >&2
fi

# images_per_s from a JSON object on stdin (a run report's metrics or torch_train.py's line).
images_per_s() {
  "$python" -c 'import json,sys; d=json.load(sys.stdin); print(d.get("metrics", d)["images_per_s"])'
}

median() {
  "$python" -c 'import statistics,sys; print(statistics.median(float(v) for v in sys.argv[1:]))' "$@"
}

echo "cnnbench: $cli"
cpu_field() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
echo "machine: $(nproc) cores, $(cpu_field 'model name'), family $(cpu_field 'cpu family') model $(cpu_field 'model') stepping $(cpu_field 'stepping')"
echo "cnnbench --isa $isa; PyTorch OPENBLAS_CORETYPE: $torch_coretype (environment: ${OPENBLAS_CORETYPE:-unset}), PyTorch ISA cap: $torch_isa, PyTorch malloc keeps freed memory (MALLOC_MMAP_THRESHOLD_ ${MALLOC_MMAP_THRESHOLD_:-33554432})"
printf '%-7s %5s %14s %14s %8s\n' model batch cnnbench_img/s pytorch_img/s ratio
for model in $models; do
  for batch in $batches; do
    model_images=$images
    [[ "$model" == fc3 ]] && model_images=$((images * 2))
    steps=$(( model_images / batch ))
    ours=() theirs=() ratios=()
    for ((pair = 0; pair < pairs; ++pair)); do
      ours_now=$("$cli" train --model "$model" --batch "$batch" --synthetic 8192 --steps "$steps" \
                   --isa "$isa" --quiet --report - | images_per_s)
      ours+=("$ours_now")
      if [[ $have_torch == 1 ]]; then
        theirs_now=$("${torch_env[@]}" "$python" "$here/torch_train.py" --model "$model" --batch "$batch" \
                       --steps "$steps" --threads 1 | images_per_s)
        theirs+=("$theirs_now")
        ratios+=("$("$python" -c "print($ours_now / $theirs_now)")")
      fi
    done
    if [[ $have_torch == 1 ]]; then
      printf '%-7s %5d %14.0f %14.0f %8.2f\n' "$model" "$batch" "$(median "${ours[@]}")" \
        "$(median "${theirs[@]}")" "$(median "${ratios[@]}")"
    else
      printf '%-7s %5d %14.0f %14s %8s\n' "$model" "$batch" "$(median "${ours[@]}")" - -
    fi
  done
done
