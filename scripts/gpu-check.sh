#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, build for sm_90, run the GPU tests, benchmark
# the GPU strategy (and PyTorch, when importable) on FC-3 and LeNet-5 at batch 64, 256 and 1024,
# then 2 MPI ranks sharing the GPU at batch 256 and 1024 (when MPI is built and mpirun exists),
# and write OUTDIR/gpu-report.json. Designed to finish in under 8 minutes.
#   usage: scripts/gpu-check.sh OUTDIR        (BUILD_DIR, JOBS and CUDA_ARCHS may be overridden)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
OUTDIR=$(mkdir -p "$1" && cd "$1" && pwd)
SOURCE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-/tmp/cnnbench-gpu-check-build}
JOBS=${JOBS:-16}
CUDA_ARCHS=${CUDA_ARCHS:-90}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUTDIR/runs"
START=$(date +%s)

step() { echo "== gpu-check [$(( $(date +%s) - START ))s] $*"; }
die() { echo "gpu-check: error: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this machine has no NVIDIA driver"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  > "$OUTDIR/nvidia-smi.txt" || die "nvidia-smi failed: no usable GPU"
cat "$OUTDIR/nvidia-smi.txt"
[[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null || die "nvcc not found (CUDA toolkit)"

step "configure + build in $BUILD_DIR (Release, CUDA archs $CUDA_ARCHS, -j$JOBS)"
rm -rf "$BUILD_DIR"
cmake -S "$SOURCE" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCNNBENCH_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCNNBENCH_BUILD_BENCHMARKS=OFF \
  > "$OUTDIR/configure.log" 2>&1 || { tail -30 "$OUTDIR/configure.log"; die "configure failed"; }
grep "cnnbench:" "$OUTDIR/configure.log" || true
TARGETS=(cnnbench_cli test_gpu_kernels test_gpu_strategy)
# Several ranks: the MPI test (2 ranks on the one GPU against serial) and 2-rank benchmarks.
MPIRUN=()
if grep -q "cnnbench: MPI on" "$OUTDIR/configure.log" && command -v mpirun >/dev/null; then
  TARGETS+=(test_gpu_ranks)
  MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}" \
  > "$OUTDIR/build.log" 2>&1 || { tail -40 "$OUTDIR/build.log"; die "build failed"; }
CLI=$(find "$BUILD_DIR/apps" -maxdepth 2 -type f -name cnnbench -perm -u+x | head -1)
[[ -n "$CLI" ]] || die "the cnnbench binary was not built"

step "GPU tests (ctest -R gpu: kernels, strategy against serial, 2 MPI ranks against serial)"
TESTS_OK=true
(cd "$BUILD_DIR" && ctest -R gpu --output-on-failure --timeout 240) > "$OUTDIR/ctest.log" 2>&1 \
  || TESTS_OK=false
tail -15 "$OUTDIR/ctest.log"
"$BUILD_DIR/tests/test_gpu_strategy" --gtest_brief=0 > "$OUTDIR/test_gpu_strategy.log" 2>&1 || true

# Steps per run: about 2 million images, after the driver's own warm-up step.
steps_for() { echo $(( 2000000 / $1 )); }

step "cnnbench --strategy gpu benchmarks"
for model in lenet5 fc3; do
  for batch in 64 256 1024; do
    report="$OUTDIR/runs/cnnbench-$model-b$batch.json"
    timeout 120 "$CLI" train --strategy gpu --model "$model" --batch "$batch" --synthetic 60000 \
      --steps "$(steps_for "$batch")" --report "$report" --quiet \
      || echo "gpu-check: cnnbench $model batch $batch failed (exit $?)" | tee -a "$OUTDIR/failures.txt"
  done
  report="$OUTDIR/runs/cnnbench-$model-b1024-stream.json"
  timeout 120 "$CLI" train --strategy gpu --gpu-data stream --model "$model" --batch 1024 \
    --synthetic 60000 --steps "$(steps_for 1024)" --report "$report" --quiet \
    || echo "gpu-check: cnnbench $model stream failed (exit $?)" | tee -a "$OUTDIR/failures.txt"
done

if [[ ${#MPIRUN[@]} -gt 0 ]]; then
  step "cnnbench --strategy gpu on 2 MPI ranks sharing the GPU"
  for model in lenet5 fc3; do
    for batch in 256 1024; do
      report="$OUTDIR/runs/cnnbench-$model-b$batch-2ranks.json"
      timeout 120 "${MPIRUN[@]}" "$CLI" train --strategy gpu --model "$model" --batch "$batch" \
        --synthetic 60000 --steps "$(( $(steps_for "$batch") / 2 ))" --report "$report" --quiet \
        || echo "gpu-check: cnnbench 2 ranks $model batch $batch failed (exit $?)" \
           | tee -a "$OUTDIR/failures.txt"
    done
  done
else
  step "no MPI in this build or no mpirun: no multi-rank runs"
fi

if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  step "PyTorch baseline"
  for model in lenet5 fc3; do
    for batch in 64 256 1024; do
      timeout 120 "$PYTHON" "$SOURCE/bench/gpu_torch.py" --model "$model" --batch "$batch" \
        --steps "$(( $(steps_for "$batch") / 2 ))" --json "$OUTDIR/runs/torch-$model-b$batch.json" \
        || echo "gpu-check: torch $model batch $batch failed (exit $?)" | tee -a "$OUTDIR/failures.txt"
    done
  done
else
  step "PyTorch with CUDA not importable: no baseline"
fi

step "report"
"$PYTHON" - "$OUTDIR" "$TESTS_OK" "$(( $(date +%s) - START ))" "$SOURCE" <<'EOF'
import glob, json, os, platform, subprocess, sys
outdir, tests_ok, seconds, source = sys.argv[1], sys.argv[2] == "true", int(sys.argv[3]), sys.argv[4]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def find(value, key):
    """First value of key anywhere in a JSON tree (the run report nests its metrics)."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            found = find(v, key)
            if found is not None:
                return found
    return None

runs = []
for model in ("lenet5", "fc3"):
    for batch in (64, 256, 1024):
        ours = load(f"{outdir}/runs/cnnbench-{model}-b{batch}.json")
        torch = load(f"{outdir}/runs/torch-{model}-b{batch}.json")
        ours_ips = find(ours, "images_per_s") if ours else None
        torch_ips = torch["images_per_s"] if torch else None
        run = {"model": model, "batch": batch, "cnnbench_images_per_s": ours_ips,
               "torch_images_per_s": torch_ips,
               "ratio": ours_ips / torch_ips if ours_ips and torch_ips else None}
        if ours:
            run["gpu_metrics"] = find(ours, "strategy_metrics") or find(ours, "copy_hidden_fraction")
        stream = load(f"{outdir}/runs/cnnbench-{model}-b{batch}-stream.json")
        if stream:
            run["cnnbench_stream_images_per_s"] = find(stream, "images_per_s")
        runs.append(run)

# 2 MPI ranks on the one GPU: the global batch is split between them, gradients summed on the host.
two_ranks = []
for model in ("lenet5", "fc3"):
    for batch in (256, 1024):
        ours = load(f"{outdir}/runs/cnnbench-{model}-b{batch}-2ranks.json")
        if not ours:
            continue
        metrics = find(ours, "strategy_metrics") or {}
        single = next((r["cnnbench_images_per_s"] for r in runs
                       if r["model"] == model and r["batch"] == batch), None)
        ips = find(ours, "images_per_s")
        two_ranks.append({"model": model, "batch": batch, "ranks": metrics.get("ranks"),
                          "cnnbench_images_per_s": ips,
                          "vs_one_rank": ips / single if ips and single else None,
                          "allreduce": metrics.get("allreduce"),
                          "devices": [{k: r.get(k) for k in ("rank", "host", "device", "device_name",
                                                             "samples_per_step")}
                                      for r in metrics.get("per_rank", [])]})

# ctest's line for the MPI test (2 ranks sharing the GPU vs serial, bit-identical ranks), if it ran.
ranks_test = None
try:
    for line in open(f"{outdir}/ctest.log"):
        if " test_gpu_ranks " in line and ("Passed" in line or "Failed" in line):
            ranks_test = "Passed" in line
except OSError:
    pass

lenet = next(r for r in runs if r["model"] == "lenet5" and r["batch"] == 1024)
torch_any = next((load(p) for p in glob.glob(f"{outdir}/runs/torch-*.json")), None)
ours_any = next((load(p) for p in glob.glob(f"{outdir}/runs/cnnbench-*.json")), None)
try:
    smi = open(f"{outdir}/nvidia-smi.txt").read().strip()
except OSError:
    smi = ""
git = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
report = {
    "kind": "gpu-check",
    "device": smi,
    "host": platform.node(),
    "git_sha": git,
    "versions": {
        "cnnbench_context": find(ours_any, "context") if ours_any else None,
        "torch": torch_any.get("torch") if torch_any else None,
        "torch_cuda": torch_any.get("torch_cuda") if torch_any else None,
        "cudnn": torch_any.get("cudnn") if torch_any else None,
    },
    "gpu_tests_passed": tests_ok,
    "two_ranks_match_serial_test": ranks_test,
    "runs": runs,
    "two_ranks_one_gpu": two_ranks,
    "goal": {
        "lenet5_b1024_images_per_s": lenet["cnnbench_images_per_s"],
        "at_least_1M_images_per_s": (lenet["cnnbench_images_per_s"] or 0) >= 1e6,
        "at_least_2x_torch": (lenet["ratio"] or 0) >= 2.0 if lenet["ratio"] else None,
    },
    "failures": open(f"{outdir}/failures.txt").read().splitlines()
                if os.path.exists(f"{outdir}/failures.txt") else [],
    "script_seconds": seconds,
}
with open(f"{outdir}/gpu-report.json", "w") as f:
    json.dump(report, f, indent=2)
for r in runs:
    print(f"{r['model']:7s} b{r['batch']:<5d} cnnbench {r['cnnbench_images_per_s'] or 0:12.0f} img/s"
          f"   torch {r['torch_images_per_s'] or 0:12.0f} img/s   ratio {r['ratio'] or 0:.2f}")
for r in two_ranks:
    allreduce = r["allreduce"] or {}
    print(f"{r['model']:7s} b{r['batch']:<5d} 2 ranks  {r['cnnbench_images_per_s'] or 0:12.0f} img/s"
          f"   allreduce {allreduce.get('ms_per_step_mean', 0):.3f} ms/step (mean over ranks)")
EOF
step "done: $OUTDIR/gpu-report.json"
$TESTS_OK || die "GPU tests failed (see $OUTDIR/ctest.log)"
