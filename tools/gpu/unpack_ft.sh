#!/bin/bash
# On the GPU machine: unpacks a tools/gpu/pack_ft.sh tarball into DIR and prints the
# LD_LIBRARY_PATH to run DIR/bin/ft with.   eval "$(tools/gpu/unpack_ft.sh X.tar.xz /tmp/f)"
set -euo pipefail
mkdir -p "$2" && tar -C "$2" -xJf "$1"
echo "export LD_LIBRARY_PATH=$2/lib:/usr/local/cuda/lib64:\${LD_LIBRARY_PATH:-}"
