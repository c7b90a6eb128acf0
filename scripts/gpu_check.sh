#!/usr/bin/env bash
# The CUDA backend's device check, one script for a machine with an NVIDIA GPU (sized for an H200 box with 16 cores:
# at most about 7 minutes, each part time-boxed so that a hang cannot eat the budget). Everything it prints also goes
# to $OUT when that is set (else $BUILD_DIR/gpu_check).
#
#   bash scripts/gpu_check.sh                      # builds $BUILD_DIR (default build-gpu) with CUDA: needs the
#                                                  # Debian packages (scripts/install_deps.sh)
#   GPU_PREBUILT=.gpu bash scripts/gpu_check.sh    # binaries and libraries packed by scripts/gpu_pack.sh on a CPU
#                                                  # machine with nvcc, for a GPU machine that cannot install them
#
# Parts: the device; every CUDA test (op conformance against the CPU reference, eager and replayed; engine greedy
# decode equal to the CPU backend's tokens on the tiny and qwen3-0.6b bf16 geometries; replay == eager; on-device
# sampling; DSA top-k against its oracle); the tiny-model CUDA tests again under compute-sanitizer memcheck; then
# `bench --backend cuda` on the tiny and the qwen3-0.6b bf16 geometry with a summary table (decode eager and
# replayed, replay / eager, kernels per step, achieved bandwidth against the device's measured copy bandwidth).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${OUT:-${BUILD_DIR:-build-gpu}/gpu_check}
GEN_TOKENS=${GEN_TOKENS:-128}
mkdir -p "$RESULTS"
exec > >(tee "$RESULTS/gpu_check.log") 2>&1
status=0
part() {  # part NAME SECONDS COMMAND...: runs a time-boxed part, remembers a failure, goes on
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit} s)"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@"
    local rc=$?
    echo "== $name: rc $rc, $((SECONDS - t0)) s"
    [ $rc -eq 0 ] || status=1
}

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv ||
    echo "nvidia-smi not available"

if [ -n "${GPU_PREBUILT:-}" ]; then
    BIN=$GPU_PREBUILT
    export LD_LIBRARY_PATH="$PWD/$GPU_PREBUILT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The tests read their data (tokenizers, goldens) from the source folder they were compiled in.
    src=$(cat "$GPU_PREBUILT/source_dir")
    if [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
    bin_dir=$(cat "$GPU_PREBUILT/binary_dir")
    mkdir -p "$bin_dir" && ln -sf "$PWD/$GPU_PREBUILT/tracelm" "$bin_dir/tracelm"
    export TRACELM_DATA_DIR=$PWD/models  # make-checkpoint's tokenizer (the build folder's share/tracelm holds it too)
else
    BIN=${BUILD_DIR:-build-gpu}
    bash scripts/install_deps.sh
    cmake -S . -B "$BIN" -DCMAKE_BUILD_TYPE=Release -DTRACELM_CUDA=ON >/dev/null
    part build 600 cmake --build "$BIN" -j"$(nproc)" --target tracelm tracelm_tests
    [ $status -eq 0 ] || exit 1
fi

# One process per suite: a CUDA error is sticky, so one failing kernel would fail every later test of its process.
# The CPU reference of the engine tests runs the AVX2 kernels: with AVX512_BF16 the CPU rounds activations to bf16
# against bf16 weights, which the GPU (f32 activations) does not, and the tolerance is for summation order only.
suites=('OpConformance.*/cuda' 'CudaEngine.*' 'CudaCapabilities.*:CudaCli.*' 'DsaTopkCuda.*' 'SamplingCuda.*')
for s in "${suites[@]}"; do
    part "CUDA tests $s" 90 env TRACELM_ISA=avx2 "$BIN/tracelm_tests" --gtest_filter="$s" \
        --gtest_output="xml:$RESULTS/tests_${s%%.*}.xml"
done
bench() {  # bench NAME MODEL [BATCH]: bench --backend cuda, then its summary row
    local name=$1 model=$2 batch=${3:-1}
    local f="$RESULTS/bench_$name.txt"
    part "bench $name" 60 "$BIN/tracelm" bench --backend cuda --model "$model" --prompt-tokens 128 \
        --gen-tokens "$GEN_TOKENS" --rounds 3 --batch "$batch" >"$f" 2>&1
    cat "$f"
    metric() { awk -v k="$1" '$1 == k { print $2 }' "$f"; }
    local eager replay nodes bytes copy_bw
    eager=$(metric decode_eager_tokens_per_s) replay=$(metric decode_replay_tokens_per_s) nodes=$(metric graph_ops)
    bytes=$(metric decode_bytes_per_step) copy_bw=$(metric read_bandwidth_gb_s)
    [ -n "$replay" ] && [ -n "$eager" ] && [ -n "$bytes" ] && [ -n "$copy_bw" ] || return 0
    awk -v m="$name" -v e="$eager" -v r="$replay" -v n="$nodes" -v b="$bytes" -v c="$copy_bw" -v B="$batch" \
        -v s="$(metric decode_replay_sampled_tokens_per_s)" -v t="$(metric tokens_match)" 'BEGIN { a = b * r / B / 1e9
        printf "| %s | %d | %.1f | %.1f | %.2f | %.1f | %d | %.0f | %.0f | %.0f%% | %s |\n", m, B, e, r, r / e, s, n, a, c, 100 * a / c, t }' \
        >>"$RESULTS/summary.md"
}
echo "| model | batch | decode eager tok/s | decode replay tok/s | replay / eager | replayed, sampled tok/s | kernels per step | achieved GB/s (bytes/step x steps/s) | device copy GB/s | share | eager == replay tokens |" >"$RESULTS/summary.md"
echo "|---|---|---|---|---|---|---|---|---|---|---|" >>"$RESULTS/summary.md"
CKPT=/tmp/tracelm-gpu-check
part "checkpoints" 60 bash -c "'$BIN/tracelm' make-checkpoint --geometry tiny --seed 1 --out $CKPT/tiny >/dev/null &&
    '$BIN/tracelm' make-checkpoint --geometry qwen3-0.6b --seed 1 --dtype bf16 --out $CKPT/q06b-bf16 >/dev/null"
bench tiny "$CKPT/tiny"
for b in 1 4 16; do bench "qwen3-0.6b-bf16-batch$b" "$CKPT/q06b-bf16" "$b"; done
# Where a replayed step's time goes: GPU time per kernel over a short bench (nsys traces the graphs' nodes; without
# it, ncu times the eager steps' kernels one by one).
profile_table() {  # CSV with a kernel name column and a duration column -> the 25 costliest kernels
    python3 - "$@" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if any("Name" in c for c in r))
cols = rows[head]
name = next(i for i, c in enumerate(cols) if c in ("Name", "Kernel Name"))
dur = next(i for i, c in enumerate(cols) if c in ("Total Time (ns)", "Metric Value"))
calls = collections.Counter(); total = collections.Counter()
for r in rows[head + 1:]:
    if len(r) <= max(name, dur): continue
    try: v = float(r[dur].replace(",", ""))
    except ValueError: continue
    total[r[name][:90]] += v; calls[r[name][:90]] += int(r[cols.index("Instances")]) if "Instances" in cols else 1
all_ns = sum(total.values()) or 1
print(f"{'kernel':90} {'calls':>7} {'total us':>10} {'share':>6}")
for k, v in total.most_common(25): print(f"{k:90} {calls[k]:7d} {v / 1e3:10.1f} {100 * v / all_ns:5.1f}%")
PY
}
if command -v nsys >/dev/null; then
    part "profile (nsys) qwen3-0.6b-bf16 replayed" 120 nsys profile --cuda-graph-trace=node -o "$RESULTS/q06b" -f true \
        "$BIN/tracelm" bench --backend cuda --model "$CKPT/q06b-bf16" --prompt-tokens 128 --gen-tokens 32 --rounds 1
    nsys stats --report cuda_gpu_kern_sum --format csv --output "$RESULTS/q06b" "$RESULTS/q06b.nsys-rep" >/dev/null &&
        profile_table "$RESULTS/q06b_cuda_gpu_kern_sum.csv"
    rm -f "$RESULTS"/*.nsys-rep "$RESULTS"/*.sqlite
elif command -v ncu >/dev/null; then
    # At the clocks and with the caches a replay sees (ncu otherwise locks base clocks and flushes caches).
    ncu_real=(ncu --clock-control none --cache-control none)
    part "profile (ncu) qwen3-0.6b-bf16 eager" 150 "${ncu_real[@]}" --csv --metrics gpu__time_duration.sum \
        --launch-count 700 --log-file "$RESULTS/q06b_ncu.csv" "$BIN/tracelm" generate --backend cuda \
        --model "$CKPT/q06b-bf16" --capture off --prompt "hello" --max-tokens 2
    profile_table "$RESULTS/q06b_ncu.csv"
    # Why the GEMVs fall short of the bandwidth: registers, occupancy, DRAM throughput of one layer's and the
    # LM head's launches.
    part "profile (ncu) GEMV detail" 120 "${ncu_real[@]}" --kernel-name regex:gemv --launch-skip 10 --launch-count 5 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        --log-file "$RESULTS/gemv_ncu.txt" "$BIN/tracelm" generate --backend cuda --model "$CKPT/q06b-bf16" \
        --capture off --prompt "hello" --max-tokens 2
    part "profile (ncu) LM head GEMV detail" 60 "${ncu_real[@]}" --kernel-name "regex:^(?!.*glu).*gemv_kernel" --launch-skip 84 \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis --log-file "$RESULTS/gemv_lm_head_ncu.txt" "$BIN/tracelm" generate \
        --backend cuda --model "$CKPT/q06b-bf16" --capture off --prompt "hello" --max-tokens 2
    cat "$RESULTS/gemv_lm_head_ncu.txt" >>"$RESULTS/gemv_ncu.txt"
    grep -E "gemv|Grid Size|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput|Duration|Block Limit" \
        "$RESULTS/gemv_ncu.txt" | head -80
else
    echo "== neither nsys nor ncu: no profile ($(ls -d /usr/local/cuda*/bin 2>/dev/null | tr '\n' ' '))"
fi
# serve --backend cuda at 1 and 16 streams (tracelm alone): closed loop, about 260 prompt and 64 output tokens each.
part "serve --backend cuda, 1 and 16 streams" 150 python3 scripts/bench_serve.py --model "$CKPT/q06b-bf16" \
    --tracelm "$BIN/tracelm" --backend cuda --numerics ggml --concurrency 1,16 --json "$RESULTS/serve_cuda.json"
# The sanitizers last: they are the slowest part, and what ran before them is already under $OUT.
if command -v compute-sanitizer >/dev/null; then
    for s in 'OpConformance.*/cuda' 'CudaEngine.*Tiny*' 'DsaTopkCuda.*' 'SamplingCuda.*'; do
        part "memcheck $s" 60 env TRACELM_ISA=avx2 compute-sanitizer --tool memcheck --print-limit 5 \
            --error-exitcode 1 "$BIN/tracelm_tests" --gtest_filter="$s"
    done
    # Eager and replayed steps differing in bits is what a read of uninitialised device memory looks like.
    part "initcheck CudaEngine.ReplayEqualsEagerTiny" 60 env TRACELM_ISA=avx2 compute-sanitizer --tool initcheck \
        --print-limit 5 --error-exitcode 1 "$BIN/tracelm_tests" --gtest_filter='CudaEngine.ReplayEqualsEagerTiny'
else
    echo "== compute-sanitizer not found: memcheck skipped"
fi

echo
cat "$RESULTS/summary.md"
exit $status
