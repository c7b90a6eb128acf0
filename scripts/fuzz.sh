#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/fuzz_*.cpp) with clang-14 under AddressSanitizer +
# UndefinedBehaviorSanitizer into build-fuzz, then runs each on its seed corpus (fuzz/corpus/<name>/) for
# N seconds, as many at once as there are cores: bash scripts/fuzz.sh [N=60]. Exits non-zero on the first crash, leak, timeout or sanitizer
# report; the reproducer is written to build-fuzz/crashes/<name>-crash-<sha1> (run the harness on it to
# replay). Inputs the fuzzer finds go to build-fuzz/corpus/<name>/, never into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
HARNESSES=(gguf safetensors tokenizer_json chat_template tool_calls)

bash scripts/install_deps.sh clang-14 libclang-rt-14-dev
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}  # as scripts/build.sh

CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRACELM_FUZZ=ON \
  -DTRACELM_TESTS=OFF -DTRACELM_CUDA=OFF >/dev/null
targets=()
for h in "${HARNESSES[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$BUILD_DIR" -j"${JOBS:-2}" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD_DIR/crashes"
# One harness for SECONDS_EACH, its output into $BUILD_DIR/fuzz_<name>.log.
fuzz_one() {
  local h=$1
  mkdir -p "$BUILD_DIR/corpus/$h"
  # The first corpus folder receives new inputs; the seeds are only read (the chat template fuzzer starts from the
  # real templates of testdata/chat_templates/). -timeout: an input that takes over 10 s is a hang and counts as a
  # failure.
  local seeds="fuzz/corpus/$h" dict=()
  [ "$h" = chat_template ] && seeds="testdata/chat_templates"
  [ -f "fuzz/$h.dict" ] && dict=(-dict="fuzz/$h.dict")
  "$BUILD_DIR/fuzz_$h" -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$BUILD_DIR/crashes/$h-" "$BUILD_DIR/corpus/$h" "$seeds" > "$BUILD_DIR/fuzz_$h.log" 2>&1
}
# A fuzzer runs on one core: as many at once as there are cores, each still for SECONDS_EACH.
PARALLEL=$(nproc)
for ((i = 0; i < ${#HARNESSES[@]}; i += PARALLEL)); do
  batch=("${HARNESSES[@]:i:PARALLEL}")
  pids=()
  for h in "${batch[@]}"; do
    fuzz_one "$h" &
    pids+=($!)
  done
  failed=0
  for j in "${!batch[@]}"; do
    echo "=== fuzz_${batch[j]}: ${SECONDS_EACH}s ==="
    wait "${pids[j]}" || failed=1
    cat "$BUILD_DIR/fuzz_${batch[j]}.log"
  done
  [ "$failed" = 0 ] || exit 1
done
echo "fuzz: no crashes"
