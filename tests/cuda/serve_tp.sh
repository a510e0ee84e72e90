#!/usr/bin/env bash
# ft serve --tensor-parallel on the multi-GPU machine: one GPU's greedy ids (fused; serve_gpu.sh
# checks those against the CPU backend, which ran at 2 tok/s on the 32-core device) are the
# reference; TP=2 resident, TP=2 offloaded (minimum slots per GPU), both again with whole experts
# per GPU (--tp-experts whole), TP=2 HYBRID (one layer of slots per GPU, each rank's misses
# split between its fetches and its CPU workers; /v1/stats must say hybrid with CPU-computed
# experts), slices and whole experts, and TP=2 as two "nodes"
# (two processes, one GPU each, NCCL bootstrap on 127.0.0.1) must give the same ids over HTTP
# (temperature 0), sequential and concurrent requests. Also checks a refused split and the
# refusal of --moe-backend cpu. Each run's verdict prints as soon as it finishes.
#   tests/cuda/serve_tp.sh FT_BINARY [MODEL_DIR (default models/demo)] [OUT_DIR]
# SERVE_TP_ONLY='tp1|tp2_hybrid' runs only the named runs (tp1 is every check's reference).
set -u
ft=$1 model=${2:-models/demo} out=${3:-/tmp/serve_tp}
only=${SERVE_TP_ONLY:-}
selected() { [ -z "$only" ] || [[ "$1" =~ ^($only)$ ]]; }
mkdir -p "$out"
port=19575
fails=0 passes=0
prompts=("The cat" "Once upon a time" "What is a river?" "hello")
pass() { passes=$((passes+1)); echo "PASS $1"; }
failed() { fails=$((fails+1)); echo "FAIL $1"; }

. "$(dirname "$0")/serve_lib.sh"
health_tries=900
start() {  # name, flags...
  local name=$1; shift
  launch "$name" "$ft" serve --model "$model" --port $port --kv-dtype f32 "$@"  # TP: f32 KV
}

max_new_tokens=40  # answers (serve_lib.sh)

# check NAME: NAME's ids against one GPU's, reported at once (a run cut short still reports).
check() {
  local b=$1
  [ -s "$out/$b.ids" ] || { failed "$b answered"; return; }
  if cmp -s "$out/tp1.ids" "$out/$b.ids"; then pass "$b greedy ids == one GPU"; else
    failed "$b greedy ids differ from one GPU"; diff "$out/tp1.ids" "$out/$b.ids" | head -6; fi
  grep -m3 "tensor parallel" "$out/$b.log" | sed 's/^/    /'
}

run() {  # name, flags...
  local name=$1; shift
  selected "$name" || return 0
  if start "$name" "$@"; then answers "$name"; stop; else failed "$name starts"; stop; fi
  [ "$name" = tp1 ] || check "$name"
}

# 4 GiB per GPU: the demo model needs little, and a 125 GiB KV pool is slow to set up.
common=(--kv-reserve-tokens 4096 --ctx-size 1024)
resident=(--gpu-memory 4GiB "${common[@]}")
CUDA_VISIBLE_DEVICES=0 run tp1 --moe-backend fused "${resident[@]}"
run tp2 --tensor-parallel 2 --tp-experts slice "${resident[@]}"
run tp2_whole --tensor-parallel 2 --tp-experts whole "${resident[@]}"
run tp2_offload --tensor-parallel 2 --tp-experts slice --moe-backend offload --moe-cache-size 8 \
  --gpu-memory 1GiB "${common[@]}"
run tp2_whole_offload --tensor-parallel 2 --tp-experts whole --moe-backend offload \
  --moe-cache-size 4 --gpu-memory 1GiB "${common[@]}"
# HYBRID per rank (no bw profile on the device: the default split, CPU bandwidth and threads
# halved per rank); the stats must show it.
hybrid_stats() {  # name: backend hybrid and CPU-computed experts in /v1/stats
  local got
  selected "$1" || return 0
  got=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["backend"], s["moe"]["cpu_experts"])' \
    "$out/$1.stats.json" 2>/dev/null)
  if [[ "$got" =~ ^hybrid\ [1-9][0-9]*$ ]]; then pass "$1 stats: $got cpu experts"; else
    failed "$1 stats: '$got' (want hybrid and cpu_experts > 0)"; fi
  grep -m2 "hybrid split" "$out/$1.log" | sed 's/^/    /'
}
run tp2_hybrid --tensor-parallel 2 --tp-experts slice --moe-backend hybrid --moe-cache-size 8 \
  --gpu-memory 1GiB "${common[@]}"
hybrid_stats tp2_hybrid
run tp2_whole_hybrid --tensor-parallel 2 --tp-experts whole --moe-backend hybrid \
  --moe-cache-size 4 --gpu-memory 1GiB "${common[@]}"
hybrid_stats tp2_whole_hybrid
# Two "nodes" on one host: node 1 (GPU 1) replays node 0's steps.
if selected tp2_nodes; then
CUDA_VISIBLE_DEVICES=1 "$ft" serve --model "$model" --tensor-parallel 2 --nnodes 2 --node-rank 1 \
  --master 127.0.0.1:29561 "${resident[@]}" >"$out/node1.log" 2>&1 &
node1=$!
CUDA_VISIBLE_DEVICES=0 run tp2_nodes --tensor-parallel 2 --nnodes 2 --node-rank 0 \
  --master 127.0.0.1:29561 "${resident[@]}"
for _ in $(seq 1 50); do kill -0 $node1 2>/dev/null || break; sleep 0.1; done
if kill -0 $node1 2>/dev/null; then failed "node 1 did not stop with node 0"; kill $node1; else
  pass "node 1 stopped with node 0"; fi
tail -n 3 "$out/node1.log"
fi
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("    tp2_offload stats:", s["backend"], s["moe"]["misses"], "misses")' \
  "$out/tp2_offload.stats.json" 2>/dev/null

err=$("$ft" serve --model "$model" --port $port --tensor-parallel 3 2>&1); rc=$?
if [ $rc -ne 0 ] && [[ "$err" == *"attention heads do not divide"* ]]; then
  pass "refusal: $(printf '%s' "$err" | tail -n 1)"; else failed "refusal rc=$rc: $err"; fi
err=$("$ft" serve --model "$model" --port $port --tensor-parallel 2 --moe-backend cpu 2>&1); rc=$?
if [ $rc -ne 0 ] && [[ "$err" == *"--moe-backend cpu runs the whole model on the CPU"* ]]; then
  pass "refusal: $(printf '%s' "$err" | tail -n 1)"; else failed "cpu refusal rc=$rc: $err"; fi
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
