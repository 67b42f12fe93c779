#!/usr/bin/env bash
# GPU platforms, measured in one go on a machine with an NVIDIA GPU:
#   1. the machine: GPU, driver, Python's torch, compiler, CMake;
#   2. edgegossip and the gpu test suite built against the machine's CUDA
#      LibTorch (scripts/build-cuda.sh, from .deb files);
#   3. the gpu test suite;
#   4. bench framework on the GPU for LeNet-5 and the zoo models, then
#      bench tta --profile gpu (one GPU platform, three CPU platforms;
#      GoSGD and EdgeGossip) over seeds 1..REPEAT.
# Every step runs under a deadline, so that the run ends within BUDGET
# seconds whatever hangs; what it printed goes to OUT/measure.log and the
# figures' CSV files to OUT, after each step.
#
#   scripts/measure-gpu.sh --debs DIR --data DIR --out DIR [--budget SECONDS]
#                          [--epochs N] [--repeat N] [--batches "64 512"]
#                          [--models "lenet5 alexnet squeezenet mobilenetv2"]
#
# --data is the Fashion-MNIST directory (IDX files, raw or gzip'd, or xz'd,
# which are decompressed into gpu-data/ first). --debs holds .deb files or
# the bundle of `scripts/build-cuda.sh --download DIR --pack FILE`.
set -uo pipefail
cd "$(dirname "$0")/.."

debs="" data="" out="" budget=540 epochs=16 repeat=3 batches="64 512"
models="lenet5 alexnet squeezenet mobilenetv2"
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) debs=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "measure-gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$debs" ] || [ -z "$data" ] || [ -z "$out" ]; then
  echo "measure-gpu: --debs, --data and --out are needed" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
data=$(cd "$data" && pwd)
if ls "$data"/*.xz > /dev/null 2>&1; then
  # IDX files compressed harder than gzip, to travel within a size limit;
  # the data readers take raw and gzip'd files.
  mkdir -p gpu-data
  for f in "$data"/*; do
    name=$(basename "$f")
    case "$name" in
      *.xz) python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "gpu-data/${name%.xz}" ;;
      *) cp "$f" gpu-data/ ;;
    esac
  done
  data=$(cd gpu-data && pwd)
fi
log="$out/measure.log"
exec > >(tee -a "$log") 2>&1
deadline=$(( $(date +%s) + budget ))
build=build-cuda
results=$(pwd)/gpu-results
failed=0

# step NAME CAP COMMAND...: runs COMMAND for at most CAP seconds and never
# past the deadline (less 15 s to copy the results).
step() {
  local name=$1 cap=$2
  shift 2
  local left=$(( deadline - $(date +%s) - 15 ))
  if [ "$left" -lt 20 ]; then
    echo "=== $name: skipped, ${left} s left"
    failed=1
    return 1
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "=== $name (at most ${cap} s) $(date -u +%H:%M:%S)"
  local start=$(date +%s)
  timeout --kill-after=5 "$cap" "$@"
  local rc=$?
  echo "=== $name: exit $rc after $(( $(date +%s) - start )) s"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

collect() {
  local f
  [ -f "$results/tta/gpu/tta-seeds.csv" ] && cp "$results/tta/gpu/tta-seeds.csv" "$out/tta-gpu-seeds.csv"
  [ -f "$results/tta/gpu/seed-1/tta.csv" ] && cp "$results/tta/gpu/seed-1/tta.csv" "$out/tta-gpu-curves.csv"
  for s in gosgd gosgd-async edgegossip; do
    f=$(ls "$results"/tta/gpu/seed-1/runs-"$s"/*/metrics.csv 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$out/tta-gpu-metrics-$s.csv"
  done
  return 0
}

echo "=== machine $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))' || true
g++ --version | head -1; cmake --version | head -1; echo "ninja $(ninja --version)"; nproc; uname -r

step build 420 bash scripts/build-cuda.sh --debs "$debs" --build "$build" edgegossip test_gpu
if [ ! -x "$build/edgegossip" ]; then
  echo "measure-gpu: the build did not finish"
  exit 1
fi
. "$build/env.sh"

if [ -x "$build/tests/test_gpu" ]; then
  step test 120 "$build/tests/test_gpu" --log_level=test_suite
else
  echo "=== test: test_gpu did not build"
  failed=1
fi
# shellcheck disable=SC2086
step "framework $models" 240 "$build/edgegossip" bench framework --device cuda --models $models \
  --batches $batches --data "$data" --out "$results"
step "tta gpu" 300 "$build/edgegossip" bench tta --profile gpu --epochs "$epochs" --repeat "$repeat" \
  --strategies gosgd edgegossip --set data.dir="$data" --out "$results"
collect
echo "=== done $(date -u +%H:%M:%S), $([ "$failed" -eq 0 ] && echo "every step passed" || echo "a step failed or was skipped")"
exit "$failed"
