#!/usr/bin/env bash
# The main job: builds tracelm and generates text with captured decode. Without a model folder as
# the first argument it makes a random-weight Qwen3 checkpoint first (no download possible here),
# so the text is gibberish; pass a Hugging Face Qwen3 folder for real text.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
MODEL=${1:-}
PROMPT=${2:-"The capital of France is"}
if [ -z "$MODEL" ]; then
  MODEL=build/demo-qwen3-tiny
  [ -f "$MODEL/config.json" ] || build/tracelm make-checkpoint --geometry tiny --seed 1 --out "$MODEL"
fi
build/tracelm generate --model "$MODEL" --prompt "$PROMPT" --max-tokens 64
