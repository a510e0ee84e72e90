#!/usr/bin/env bash
# Every server-level GPU test against one CUDA `ft` binary, in sequence, with a summary line:
# serve_gpu.sh (backends vs CPU on the demo model), serve_hybrid_gpu.sh (a DeltaNet fixture on
# CUDA vs CPU), elastic_gpu.sh (live resizes under 8 streams; a second process taking 40 GB) and
# serve_gguf_gpu.sh (a Q4_K_M GGUF of the demo model, fused and offload vs the CPU).
# The model-level checks are the standalone cuda_validate (see tests/cuda/standalone).
#   tests/cuda/serve_all_gpu.sh FT_BINARY [OUT_DIR]
set -u
ft=$1 out=${2:-/tmp/serve_all}
here=$(dirname "$0")
failed=()
for t in serve_gpu serve_hybrid_gpu elastic_gpu serve_gguf_gpu; do
  echo "=== $t"
  case $t in
    serve_gpu) "$here/serve_gpu.sh" "$ft" models/demo "$out/$t" ;;
    serve_hybrid_gpu) "$here/serve_hybrid_gpu.sh" "$ft" tests/fixtures/qwen3_5_moe models/demo "$out/$t" ;;
    elastic_gpu) "$here/elastic_gpu.sh" "$ft" models/demo "$out/$t" ;;
    serve_gguf_gpu) "$here/serve_gguf_gpu.sh" "$ft" models/demo "$out/$t" ;;
  esac || failed+=("$t")
done
echo "serve_all_gpu: ${#failed[@]} of 4 scripts failed ${failed[*]}"
[ ${#failed[@]} -eq 0 ]
