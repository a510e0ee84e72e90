#!/usr/bin/env bash
# Installs what the build needs (Debian packages, as root), then configures and builds in build/.
# usage: setup.sh [--deps-only] [TARGET...]   (default target: ft; "all" builds the tests too)
# Without root it prints the exact apt-get line to run and stops. CUDA is built when nvcc is
# found (PATH or /usr/local/cuda); otherwise the build is CPU-only.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build pkg-config git libpcre2-dev nlohmann-json3-dev libcli11-dev
          libfmt-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev)
[ "${FT_WITH_NODE:-0}" = 1 ] && packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# node and npm may come from outside Debian's packages; accept any working install.
if [ "${FT_WITH_NODE:-0}" = 1 ] && command -v node >/dev/null && command -v npm >/dev/null; then
  missing=($(printf '%s\n' "${missing[@]}" | grep -v -x -e nodejs -e npm || true))
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

[ "${1:-}" = "--deps-only" ] && exit 0
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(ft)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FT_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target "${targets[@]}"
