#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/fuzz_*.cpp) with clang-14 under AddressSanitizer +
# UndefinedBehaviorSanitizer into build-fuzz, then runs each on its seed corpus (fuzz/corpus/<name>/) for
# N seconds: bash scripts/fuzz.sh [N=60]. Exits non-zero on the first crash, leak, timeout or sanitizer
# report; the reproducer is written to build-fuzz/crashes/<name>-crash-<sha1> (run the harness on it to
# replay). Inputs the fuzzer finds go to build-fuzz/corpus/<name>/, never into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
HARNESSES=(gguf safetensors tokenizer_json chat_template tool_calls)

bash scripts/install_deps.sh clang-14 libclang-rt-14-dev

CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRACELM_FUZZ=ON \
  -DTRACELM_TESTS=OFF -DTRACELM_CUDA=OFF >/dev/null
targets=()
for h in "${HARNESSES[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$BUILD_DIR" -j"${JOBS:-2}" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD_DIR/crashes"
for h in "${HARNESSES[@]}"; do
  echo "=== fuzz_$h: ${SECONDS_EACH}s ==="
  mkdir -p "$BUILD_DIR/corpus/$h"
  # The first corpus folder receives new inputs; the seeds are only read (the chat template fuzzer starts from the
  # real templates of testdata/chat_templates/). -timeout: an input that takes over 10 s is a hang and counts as a
  # failure.
  seeds="fuzz/corpus/$h"
  [ "$h" = chat_template ] && seeds="testdata/chat_templates"
  dict=()
  [ -f "fuzz/$h.dict" ] && dict=(-dict="fuzz/$h.dict")
  "$BUILD_DIR/fuzz_$h" -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$BUILD_DIR/crashes/$h-" "$BUILD_DIR/corpus/$h" "$seeds"
done
echo "fuzz: no crashes"
