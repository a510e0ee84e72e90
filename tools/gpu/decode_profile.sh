#!/bin/bash
# On the GPU machine: per-kernel time and DRAM bytes of one all-resident decode layer of the
# Qwen3-30B-A3B-shaped synthetic model (ft bench offload), from Nsight Compute run kernel by
# kernel inside the replayed decode graphs (no clock locking, no cache flush: warm L2 as in a
# real step). Prints one table row per kernel of the last profiled layer, and the sum.
#   tools/gpu/decode_profile.sh FT [OUT_DIR]
# Only decode-path kernels are profiled (--kernel-name), so prefill's thousands of launches are
# skipped at little cost (about 40 s on an H200).
set -euo pipefail
ft=$1 out=${2:-/tmp}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$ncu" --graph-profiling node --clock-control none --cache-control none \
  --kernel-name regex:"gemv_kernel|decode_kernel|stream_kernel|ensure_kernel|fetch_kernel|down_ahead_kernel" \
  --launch-count 900 --print-summary none \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers \
  "$ft" bench offload --layers 2 --budgets all --prompts 512 --hybrid-budgets none --decode 16 \
  > "$out/decode_profile.txt" 2>&1
python3 "$(dirname "$0")/ncu_layer_table.py" "$out/decode_profile.txt"
