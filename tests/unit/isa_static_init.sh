#!/usr/bin/env bash
# The objects compiled for one instruction set (-mavx2 / -mavx512*: backend/cpu/kernels_*.cpp)
# must hold no dynamic initializer: startup runs it before any CPU check, so a table built with
# AVX-512 stores killed every binary on a CPU without AVX-512 (SIGILL before main). Their
# kernel tables are constexpr. Fails listing the objects that have one.
#   isa_static_init.sh OBJECT...
set -euo pipefail
bad=()
checked=0
for o in "$@"; do
  case "$(basename "$o")" in kernels_*.o) ;; *) continue ;; esac
  checked=$((checked + 1))
  if nm "$o" | grep -q "_GLOBAL__sub_I"; then bad+=("$o"); fi
done
[ "$checked" -gt 0 ] || { echo "isa_static_init: no kernels_*.o among the objects" >&2; exit 1; }
if [ ${#bad[@]} -gt 0 ]; then
  echo "isa_static_init: dynamic initializers in ISA-specific objects: ${bad[*]}" >&2
  exit 1
fi
echo "isa_static_init: $checked ISA-specific objects, no dynamic initializer"
