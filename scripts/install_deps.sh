#!/usr/bin/env bash
# Installs the Debian packages tracelm builds against, plus any named as arguments (skipped when all are present),
# then builds xgrammar's C++ core into the cache once (scripts/fetch_xgrammar.sh).
set -euo pipefail
PKGS=(g++ cmake make ninja-build pkg-config libpcre2-dev libutf8proc-dev nlohmann-json3-dev libcli11-dev libgtest-dev libssl-dev libboost-dev python3-pip tar haproxy
      libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers glslc "$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
bash "$(dirname "$0")/fetch_xgrammar.sh"
