#!/usr/bin/env bash
# Builds xgrammar's C++ core (constrained decoding, src/grammar; docs/structured-output.md) once per machine into
# ${TRACELM_CACHE:-~/.cache/tracelm}/xgrammar-0.2.9 (include/, lib/libxgrammar.a), which CMake links. The source is
# PyPI's source distribution (pip download, SHA-256 checked); the static library alone is built, without Python or
# its bindings: about 130 CPU seconds once, nothing afterwards.
set -euo pipefail
VERSION=0.2.9
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
DEST=${TRACELM_CACHE:-$HOME/.cache/tracelm}/xgrammar-$VERSION
[ -f "$DEST/include/xgrammar/xgrammar.h" ] && ls "$DEST"/lib*/libxgrammar.a >/dev/null 2>&1 && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetch_xgrammar: building xgrammar $VERSION into $DEST (once)"
# --no-binary names xgrammar alone: its build requirements may come as wheels (pip only reads its metadata).
python3 -m pip download --quiet --no-deps --no-binary xgrammar "xgrammar==$VERSION" -d "$work"
echo "$SHA256  $work/xgrammar-$VERSION.tar.gz" | sha256sum -c --quiet
tar xzf "$work/xgrammar-$VERSION.tar.gz" -C "$work"
mkdir -p "$work/build"
# Its cmake/config.cmake turns the Python bindings on; a config.cmake in the build folder takes precedence.
echo 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)' >"$work/build/config.cmake"
# -fno-lto: its flags ask for link-time optimisation, which would move its code generation into every link of ours.
cmake -S "$work/xgrammar-$VERSION" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-fno-lto \
    -DCMAKE_INSTALL_PREFIX="$DEST.part" >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target xgrammar
rm -rf "$DEST.part"
cmake --install "$work/build" >/dev/null
rm -rf "$DEST"
mv "$DEST.part" "$DEST"
