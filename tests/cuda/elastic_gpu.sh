#!/usr/bin/env bash
# Elastic GPU memory (issue #9) against the real CUDA `ft serve` (--moe-backend offload):
#  (a) 8 concurrent streaming greedy completions while a loop POSTs a different
#      /v1/cache/rebuild (expert slots and KV tokens) every 0.5 s: no request fails and every
#      output equals the unresized run's;
#  (b) a second process (python3 + torch) takes 40 GB of VRAM, then frees it, while a long
#      generation runs: /v1/stats shows a shrink, then a grow, and the generation completes.
# Run on the GPU machine: tests/cuda/elastic_gpu.sh FT_BINARY [MODEL_DIR] [OUT_DIR]
set -u
ft=$1 model=${2:-models/demo} out=${3:-/tmp/elastic_gpu}
mkdir -p "$out"
port=19575
pid=
. "$(dirname "$0")/serve_lib.sh"
start() {  # name, flags...
  local name=$1; shift
  launch "$name" "$ft" serve --model "$model" --port $port --moe-backend offload \
    --max-running-requests 8 --ctx-size 2048 --stats-log-interval 0 "$@"
}
fails=0
start plain --elastic off --moe-cache-size 16 || exit 1
python3 tests/cuda/elastic_gpu.py streams $port "$out/plain.json" none || fails=$((fails+1))
stop
start resized --elastic off --moe-cache-size 16 || exit 1
python3 tests/cuda/elastic_gpu.py streams $port "$out/resized.json" "$out/plain.json" || fails=$((fails+1))
stop
grep -E "resize [0-9]+ \(api\)" "$out/resized.log" | head -n 3
# (b) the floor sits 20 GB under the free VRAM now: 40 GB taken crosses it, and so does the
# free afterwards (grow back).
free_gb=$(python3 -c 'import torch; f,t=torch.cuda.mem_get_info(); print(int(f/2**30))')
floor=$((free_gb - 20))
start pressure --elastic on --elastic-floor ${floor}GiB --elastic-margin 2GiB --elastic-interval-ms 100 \
  --elastic-grow-cooldown 0.5 --moe-cache-size 16 || exit 1
python3 tests/cuda/elastic_gpu.py pressure $port "$out/pressure.json" none || fails=$((fails+1))
stop
grep -E "elastic:|resize [0-9]+ \(elastic" "$out/pressure.log" | head -n 6
echo "elastic_gpu: $fails failed"
[ $fails -eq 0 ]
