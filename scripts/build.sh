#!/usr/bin/env bash
# Configures and builds tracelm into ${BUILD_DIR:-build} (Release, warnings as errors): every target, or the
# space-separated ${BUILD_TARGETS}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Ninja keeps both cores busy across targets, where Make finishes one target's files before the next; a build folder
# keeps the generator it was made with.
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DTRACELM_WERROR=ON ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
