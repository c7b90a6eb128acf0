#!/usr/bin/env bash
# Runs the end-to-end decode tests of an existing build (${BUILD_DIR:-build}) again for every ISA this CPU has
# below its best one, through TRACELM_ISA (the default run already covers the best): portable on an AVX2 machine,
# portable and avx2 on an AVX-512 one, and avxvnni wherever the CPU has AVX-VNNI and it is not the best. Extra ctest
# arguments are passed on.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# transformers and llama.cpp goldens, replay == eager; Isas/ReplayAllocations runs every ISA by itself. SmolLM2's
# llama.cpp goldens only replayed (eager == replay is Replay.*'s): on the portable kernels the pair took 5.7 min of
# CPU time here, most of the pass. The Qwen3-30B-A3B slice's goldens (a 3.7 GB checkpoint through the kernels the
# tiny geometries already run) only in the default pass. The DeepSeek-V3.2 slice's reference logits here too: on
# AVX512_BF16 the default pass can hold them only to a bf16 bound, avx2 and portable to 1e-4.
E2E='^(Goldens\.|Deepseek\.Slice|Decode/SmolLM2\..*/replay|Decode/MoeLlamaCpp\..*/replay|SmolLM2Cli\.|Replay\.|Models/ArchGoldens\.)'
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
isas=()
if has avx2 fma f16c; then
  isas+=(portable)
  avx512=false
  if has avx512f avx512bw avx512vl avx512dq; then avx512=true; fi
  if $avx512 || has avx_vnni; then isas+=(avx2); fi
  if $avx512 && has avx_vnni; then isas+=(avxvnni); fi
fi
for isa in "${isas[@]}"; do
  echo "--- TRACELM_ISA=$isa"
  TRACELM_ISA=$isa ctest --test-dir "$BUILD_DIR" --output-on-failure -R "$E2E" -E 'Qwen3_30bA3bSlice' "$@"
done
