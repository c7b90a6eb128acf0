#!/usr/bin/env bash
# The test command: installs dependencies, builds, fetches the registry models (SmolLM2-135M-Instruct and Gemma 3
# 270M, once, into ~/.cache/tracelm), runs the whole suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
# Without a model its tests skip; CI sets TRACELM_REQUIRE_MODELS=1 so that they must run.
for model in smollm2 gemma3-270m; do
  if ! "$BUILD_DIR"/tracelm fetch-model "$model"; then
    [ -n "${TRACELM_REQUIRE_MODELS:-}" ] && exit 1
    echo "warning: could not fetch the model $model; its tests will skip" >&2
  fi
done
# The server's integration test (Serve.OpenAIClient) drives it with the official `openai` client.
if ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install --quiet openai || echo "warning: could not install the Python package openai; Serve.OpenAIClient will skip" >&2
fi
# Serve.StructuredOutput validates answers with `jsonschema`, an implementation independent of tracelm's.
if ! python3 -c "import jsonschema" 2>/dev/null; then
  python3 -m pip install --quiet jsonschema ||
    echo "warning: could not install the Python package jsonschema; Serve.StructuredOutput will skip" >&2
fi
# Serve.Operations parses /metrics with `prometheus_client`'s own parser.
if ! python3 -c "import prometheus_client" 2>/dev/null; then
  python3 -m pip install --quiet prometheus_client ||
    echo "warning: could not install the Python package prometheus_client; Serve.Operations' metrics test will skip" >&2
fi
# One test process at a time: each already uses every core, and oversubscribed spinning pools crawl.
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
