#!/usr/bin/env bash
# ft serve of a hybrid (DeltaNet) fixture on a GPU: the CPU backend's greedy ids are the
# reference; fused, offload at the minimum slot count and hybrid must give the same ids over
# HTTP (/generate with input_ids, temperature 0), sequential and concurrent (batched decode of
# several sequences, each with its own recurrent state); then the prefix cache's VRAM snapshot
# tier (cached tokens, /v1/stats, /metrics, --snapshot-vram refusal). The fixture has no tokenizer, so the
# demo model's is borrowed (ids stay below the fixture's vocabulary). Run on the GPU machine:
#   tests/cuda/serve_hybrid_gpu.sh FT_BINARY [FIXTURE (tests/fixtures/qwen3_5_moe)] [DEMO] [OUT]
set -u
ft=$1 fixture=${2:-tests/fixtures/qwen3_5_moe} demo=${3:-models/demo} out=${4:-/tmp/serve_hybrid}
mkdir -p "$out/model"
for f in config.json model.safetensors; do ln -sf "$(realpath "$fixture/$f")" "$out/model/$f"; done
for f in tokenizer.json tokenizer_config.json; do cp "$demo/$f" "$out/model/"; done
port=19556 fails=0 passes=0
prompts=("[1, 5, 17, 300, 42]" "[7, 8, 9]" "[999, 3, 250, 250, 12, 600, 44, 1, 2, 90, 91]" "[64]")
pass() { passes=$((passes+1)); echo "PASS $1"; }
failed() { fails=$((fails+1)); echo "FAIL $1"; }

. "$(dirname "$0")/serve_lib.sh"
start() {  # name, flags...
  local name=$1; shift
  launch "$name" "$ft" serve --model "$out/model" --port $port --kv-dtype f32 "$@"  # exact ids
}
ask() {  # ids -> json
  curl -sf -m 120 "http://127.0.0.1:$port/generate" -d "{\"input_ids\": $1, \"sampling_params\": \
{\"max_new_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}}"
}
ids() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_ids"])' "$1" 2>/dev/null || echo "no answer"; }

run_backend() {  # name, flags...
  local name=$1; shift
  if ! start "$name" "$@"; then failed "$name starts"; stop; return; fi
  : >"$out/$name.ids"
  local i=0 p
  for p in "${prompts[@]}"; do ask "$p" >"$out/$name.s$i.json"; ids "$out/$name.s$i.json" >>"$out/$name.ids"; i=$((i+1)); done
  i=0
  for p in "${prompts[@]}"; do ask "$p" >"$out/$name.c$i.json" & i=$((i+1)); done
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null
  for i in $(seq 0 $((${#prompts[@]} - 1))); do ids "$out/$name.c$i.json" >>"$out/$name.ids"; done
  curl -sf "http://127.0.0.1:$port/v1/stats" >"$out/$name.stats.json"
  stop
  echo "--- $name: $(grep -m1 'moe backend' "$out/$name.log" | sed 's/.*moe backend/moe backend/')"
}

run_backend cpu --moe-backend cpu
run_backend fused --moe-backend fused --gpu-memory 2GiB --ctx-size 1024
run_backend offload --moe-backend offload --gpu-memory 1GiB --ctx-size 1024 --moe-cache-size 8
run_backend hybrid --moe-backend hybrid --gpu-memory 1GiB --ctx-size 1024 --moe-cache-size 8
head -c 600 "$out/cpu.ids"
for b in fused offload hybrid; do
  [ -s "$out/$b.ids" ] || { failed "$b answered"; continue; }
  grep -q "no answer" "$out/cpu.ids" "$out/$b.ids" && { failed "$b: a request got no answer"; continue; }
  if cmp -s "$out/cpu.ids" "$out/$b.ids"; then pass "$b greedy ids == cpu"; else
    failed "$b greedy ids differ from cpu"; diff "$out/cpu.ids" "$out/$b.ids" | head -6; fi
done
# Prefix cache with the VRAM snapshot tier (--snapshot-vram auto): a second request sharing the
# first one's prompt reports cached tokens, /v1/stats and /metrics show snapshots in VRAM; a
# --snapshot-vram above half the budget is refused with the flag named.
if start snapshots --moe-backend offload --gpu-memory 1GiB --ctx-size 1024 --moe-cache-size 8; then
  complete() {
    curl -sf -m 120 "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
      -d "{\"model\": \"m\", \"prompt\": $1, \"max_tokens\": 2, \"temperature\": 0}"
  }
  a=$(python3 -c 'print([(i * 37 + 11) % 997 for i in range(90)])')
  b=$(python3 -c 'print([(i * 37 + 11) % 997 for i in range(90)] + [5, 6, 7, 8, 9, 10, 11, 12])')
  complete "$a" >"$out/snap.r1.json"
  complete "$b" >"$out/snap.r2.json"
  cached=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens_details"]["cached_tokens"])' "$out/snap.r2.json" 2>/dev/null || echo 0)
  if [ "${cached:-0}" -gt 0 ]; then pass "second request cached_tokens $cached"; else
    failed "second request cached_tokens ${cached:-?}: $(head -c 300 "$out/snap.r2.json")"; fi
  curl -sf "http://127.0.0.1:$port/v1/stats" >"$out/snap.stats.json"
  if python3 -c '
import json,sys
p=json.load(open(sys.argv[1]))["prefix_cache"]
assert p["snapshot_vram_slots"] > 0 and p["snapshot_vram_used"] > 0, p
print("vram snapshots", p["snapshot_vram_used"], "of", p["snapshot_vram_slots"], "hits", p["snapshot_hits"])' \
      "$out/snap.stats.json"; then pass "/v1/stats VRAM snapshots in use"; else
    failed "/v1/stats VRAM snapshots: $(head -c 600 "$out/snap.stats.json")"; fi
  if curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^ft_prefix_cache_snapshot_vram_used [1-9]'; then
    pass "/metrics VRAM snapshots"; else failed "/metrics ft_prefix_cache_snapshot_vram_used"; fi
  stop
else
  failed "snapshots starts"; stop
fi
if "$ft" serve --model "$out/model" --port $port --moe-backend offload --gpu-memory 1GiB \
    --snapshot-vram 900MiB >"$out/snap_refused.log" 2>&1; then
  failed "--snapshot-vram 900MiB of 1GiB was accepted"
elif grep -q -- "--snapshot-vram" "$out/snap_refused.log"; then pass "--snapshot-vram too large refused"
else failed "refusal names --snapshot-vram: $(tail -n 2 "$out/snap_refused.log")"; fi
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
