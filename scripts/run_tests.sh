#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
# One test process at a time: each already uses every core, and oversubscribed spinning pools crawl.
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
