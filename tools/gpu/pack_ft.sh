#!/bin/bash
# Packs a CUDA `ft` built on this machine for a GPU machine that lacks the Debian dev packages:
# the binary plus the shared libraries it needs that are not libc/libstdc++/CUDA, as one
# tarball to name in the device tool's `carry` (unpack there with tools/gpu/unpack_ft.sh).
# Further binaries of the same build (e.g. BUILD/tests/cuda/cuda_validate) travel beside it.
#   tools/gpu/pack_ft.sh BUILD_DIR OUT.tar.xz [BINARY...]
set -euo pipefail
build=$1 out=$2
shift 2
[ -x "$build/ft" ] || { echo "pack_ft: no $build/ft (build with -DFT_CUDA=ON first)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib"
cp "$build/ft" "$@" "$tmp/bin/"
ldd "$build/ft" "$@" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|libcu*|libnccl*) ;;
    *) cp -L "$lib" "$tmp/lib/" ;;
  esac
done
# xz -9 (64 MiB dictionary): binaries of one build share most of their code, so a second or third
# one costs little (four CUDA binaries: 32 -> 17 MiB; the device tool carries <= 64 MiB in all).
XZ_OPT=${XZ_OPT:--9} tar -C "$tmp" -cJf "$out" bin lib
echo "pack_ft: $out ($(du -h "$out" | cut -f1))"
