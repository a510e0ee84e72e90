#!/usr/bin/env bash
# Every tensor-parallel GPU check on the two-GPU machine, in sequence, one summary line: the
# parity checks (tp_validate; ONLY: its --only filter, e.g. "whole|vocab"), the per-GPU
# host->GPU bandwidths (ft bench bw --devices-only, into OUT_DIR/bw_profile.json), tp_bench
# with slices vs whole experts and again with the vocab-split lm_head, and serve_tp.sh. Logs go
# to OUT_DIR; keep OUT_DIR off the device tool's $OUT when its file count matters.
#   tests/cuda/tp_all_gpu.sh BIN_DIR [OUT_DIR] [ONLY]
# BIN_DIR holds ft, tp_validate and tp_bench: tools/gpu/pack_ft.sh BUILD X.tar.xz
# BUILD/tests/cuda/tp_validate BUILD/tests/cuda/tp_bench, unpacked with tools/gpu/unpack_ft.sh.
set -u
bin=$1 out=${2:-/tmp/tp_all} only=${3:-}
here=$(dirname "$0")
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out"
failed=()
step() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then echo "PASS $name ($((SECONDS - t0)) s)"; else
    echo "FAIL $name ($((SECONDS - t0)) s): $(tail -n 2 "$out/$name.log" | tr '\n' ' ')"
    failed+=("$name"); fi
}
step tp_validate "$bin/tp_validate" tests/fixtures ${only:+--only "$only"}
grep -E "^(FAIL|SKIP) " "$out/tp_validate.log" | head -10
step bench_bw "$bin/ft" bench bw --devices-only --devices all --out "$out/bw_profile.json"
step tp_bench "$bin/tp_bench" --worlds 1 2 --budgets all 16GiB --tp-experts slice whole
step tp_bench_vocab "$bin/tp_bench" --worlds 2 --budgets all --tp-experts slice --vocab-split
grep -E "^\| [12] " "$out/tp_bench.log" "$out/tp_bench_vocab.log" | cut -c1-160
step serve_tp "$here/serve_tp.sh" "$bin/ft" models/demo "$out/serve_tp"
grep -E "^(PASS|FAIL)" "$out/serve_tp.log"
echo "tp_all_gpu: ${#failed[@]} of 5 steps failed ${failed[*]}"
[ ${#failed[@]} -eq 0 ]
