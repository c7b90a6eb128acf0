#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs on a GPU machine that cannot install packages (no network there) into .gpu/
# (git-ignored): the tracelm and tracelm_tests binaries of ${BUILD_DIR:-build}, built here with CUDA (nvcc found;
# CMakeLists.txt's default architectures are the H100/H200's, sm_90a plus PTX), the shared libraries they need that
# a bare machine may lack, and the source folder the tests were compiled to read their data from.
#
#   bash scripts/gpu_pack.sh        # then on the GPU machine: GPU_PREBUILT=.gpu bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake --build "$BUILD_DIR" -j"$(nproc)" --target tracelm tracelm_tests
[ -f "$BUILD_DIR/libtracelm_cuda.a" ] || { echo "gpu_pack: $BUILD_DIR was built without CUDA (no nvcc found)" >&2; exit 1; }
rm -rf .gpu
mkdir -p .gpu/lib
cp "$BUILD_DIR/tracelm" "$BUILD_DIR/tracelm_tests" .gpu/
strip .gpu/tracelm .gpu/tracelm_tests
# Everything but the C and C++ runtimes (which any machine with nvcc has, at least as new).
ldd .gpu/tracelm_tests | awk '$3 ~ /^\// { print $3 }' | grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl)\.so' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
pwd > .gpu/source_dir
(cd "$BUILD_DIR" && pwd) > .gpu/binary_dir  # where the tests run the tracelm binary from
du -sh .gpu
