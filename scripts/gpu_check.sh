#!/usr/bin/env bash
# The CUDA backend's device check, one script for a machine with an NVIDIA GPU (sized for an H200 box with
# 16 cores: about 5 minutes). Installs the Debian packages, builds with TRACELM_CUDA=ON, runs the op
# conformance suite and the CUDA tests, makes a qwen3-0.6b bf16 checkpoint, benchmarks eager and replayed
# decode on the GPU and prints a summary table. Everything it prints also goes to $OUT when that is set.
#
#   bash scripts/gpu_check.sh            # BUILD_DIR (default build-gpu), GEN_TOKENS (default 128)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
GEN_TOKENS=${GEN_TOKENS:-128}
RESULTS=${OUT:-$BUILD_DIR/gpu_check}
mkdir -p "$RESULTS"
exec > >(tee "$RESULTS/gpu_check.log") 2>&1

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "nvidia-smi not available"

echo "== dependencies and build ($BUILD_DIR)"
bash scripts/install_deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTRACELM_WERROR=ON -DTRACELM_CUDA=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target tracelm tracelm_tests

echo "== tests: op conformance on every backend, CUDA end to end"
status=0
"$BUILD_DIR/tracelm_tests" --gtest_filter='OpConformance*:*Cuda*' --gtest_output="xml:$RESULTS/tests.xml" || status=1

echo "== bench: qwen3-0.6b bf16 on cuda"
CKPT="$BUILD_DIR/qwen3-0.6b-bf16"
[ -f "$CKPT/model.safetensors" ] || "$BUILD_DIR/tracelm" make-checkpoint --geometry qwen3-0.6b --seed 1 --dtype bf16 --out "$CKPT"
"$BUILD_DIR/tracelm" bench --backend cuda --model "$CKPT" --prompt-tokens 128 --gen-tokens "$GEN_TOKENS" \
  | tee "$RESULTS/bench_cuda.txt" || status=1

metric() { awk -v k="$1" '$1 == k { print $2 }' "$RESULTS/bench_cuda.txt"; }
eager=$(metric decode_eager_tokens_per_s)
replay=$(metric decode_replay_tokens_per_s)
nodes=$(metric graph_ops)
bytes=$(metric decode_bytes_per_token)
copy_bw=$(metric read_bandwidth_gb_s)
if [ -n "$replay" ] && [ -n "$bytes" ] && [ -n "$copy_bw" ]; then
  echo
  echo "| decode eager tok/s | decode replay tok/s | replay / eager | kernels per step | achieved GB/s (bytes/token x tok/s) | device copy GB/s | share |"
  echo "|---|---|---|---|---|---|---|"
  awk -v e="$eager" -v r="$replay" -v n="$nodes" -v b="$bytes" -v c="$copy_bw" 'BEGIN {
    a = b * r / 1e9
    printf "| %.1f | %.1f | %.2f | %d | %.0f | %.0f | %.0f%% |\n", e, r, r / e, n, a, c, 100 * a / c }' \
    | tee "$RESULTS/summary.md"
fi
echo "tokens_match (eager == replay): $(metric tokens_match)"
exit $status
