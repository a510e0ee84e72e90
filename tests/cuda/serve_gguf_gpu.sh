#!/usr/bin/env bash
# ft serve of quantized experts on a GPU (issue #6). Default: a mixed-format GGUF, the demo model
# quantized on the fly with `ft quantize --type q4_k_m` (gate/up Q4_K, down IQ4_NL or Q8_0 by
# layer, attn_v Q6_K in the sensitive layers, output Q6_K); FORMAT fp8 / nvfp4: a fast-load
# checkpoint written by `ft checkpoint --type fp8|nvfp4` (experts with per-expert scales).
# Fused (every expert resident) and offload at a one-layer expert cache (every decode step
# fetches into slots sized for the largest layer) serve it; their greedy token ids over the real
# HTTP API (temperature 0, sequential and concurrent) must equal the CPU backend's on the same
# weights: the model dequantized to f32 (`ft checkpoint --type f32`; CUDA computes with f32
# activations, as the CPU does on f32 weights). The CPU serving the quantized file itself
# quantizes activations to int8 per 16 in its quantized matmuls, and so does hybrid's CPU share:
# their ids are reported beside (answers equal), not required equal. Run on the GPU machine:
#   tests/cuda/serve_gguf_gpu.sh FT_BINARY [MODEL_DIR (models/demo)] [OUT_DIR] [FORMAT (q4_k_m)]
set -u
ft=$1 src=${2:-models/demo} out=${3:-/tmp/serve_gguf} fmt=${4:-q4_k_m}
mkdir -p "$out"
port=${PORT:-19565}
fails=0 passes=0
prompts=("The cat" "Once upon a time" "What is a river?" "hello" "The meaning of the word")
pass() { passes=$((passes+1)); echo "PASS $1"; }
failed() { fails=$((fails+1)); echo "FAIL $1"; }

if [ "$fmt" = q4_k_m ] || [ "$fmt" = q5_k_m ]; then
  model="$out/demo-$fmt.gguf"
  make=("$ft" quantize "$src" "$model" --type "$fmt")
else
  model="$out/demo-$fmt"
  make=("$ft" checkpoint --model "$src" --out "$model" --type "$fmt")
fi
if "${make[@]}" >"$out/quantize.log" 2>&1; then
  pass "$fmt model: $(tr '\r' '\n' <"$out/quantize.log" | grep -v '^\[' | grep . | tail -n 2 | head -n 1)"
else
  failed "$fmt model"; cat "$out/quantize.log"; echo "$passes passed, $fails failed"; exit 1
fi

twin="$out/demo-$fmt-f32"
if "$ft" checkpoint --model "$model" --out "$twin" --type f32 >"$out/twin.log" 2>&1; then
  pass "f32 twin of the $fmt model"
else
  failed "f32 twin"; cat "$out/twin.log"
fi

. "$(dirname "$0")/serve_lib.sh"
start() {  # name, model, flags...: serves in the background, waits for /health
  local name=$1 m=$2; shift 2
  # --kv-dtype f32: the GPU keeps the CPU's KV arithmetic; FT_CUDA_QGEMV=f32: its quantized
  # GEMVs keep f32 activations, as the CPU on the f32 twin does (int8 is the default).
  launch "$name" env FT_CUDA_QGEMV=f32 "$ft" serve --model "$m" --port $port \
    --stats-log-interval 1 --kv-dtype f32 "$@"
}

max_new_tokens=32  # answers (serve_lib.sh)

run_backend() {  # name, model, flags...
  local name=$1; shift
  if start "$name" "$@"; then
    answers "$name"
    stop
    python3 - "$out/$name.stats.json" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
m = s["moe"]
print(f"--- {sys.argv[2]}: backend {s['backend']}; hits {m['hits']} misses {m['misses']}; fetched "
      f"{m['fetched_experts']} experts / {m['fetched_bytes']} B; streamed {m['streamed_bytes']} B; "
      f"slots {m['expert_slots']}/{m['experts_total']}")
PY
  else
    failed "$name starts"
    stop
  fi
}

run_backend cpu_f32 "$twin" --moe-backend cpu
run_backend cpu "$model" --moe-backend cpu
run_backend fused "$model" --moe-backend fused --gpu-memory 2GiB --kv-reserve-tokens 8192 \
  --ctx-size 2048
run_backend offload "$model" --moe-backend offload --gpu-memory 1GiB --kv-reserve-tokens 8192 \
  --ctx-size 2048 --moe-cache-size 8
run_backend hybrid "$model" --moe-backend hybrid --gpu-memory 1GiB --kv-reserve-tokens 8192 \
  --ctx-size 2048 --moe-cache-size 8

for b in cpu hybrid; do
  same=$(paste -d'|' "$out/$b.ids" "$out/cpu_f32.ids" 2>/dev/null | awk -F'|' '$1 == $2' | wc -l)
  echo "--- $b (int8 activations on the CPU) == cpu on the f32 twin: $same of $((2 * ${#prompts[@]})) answers"
done
[ "$(grep -c '^\[' "$out/hybrid.ids" 2>/dev/null)" = $((2 * ${#prompts[@]})) ] &&
  pass "hybrid answered" || failed "hybrid answered"
python3 - "$out/hybrid.stats.json" <<'PY' && pass "hybrid stats" || failed "hybrid stats"
import json, sys
s = json.load(open(sys.argv[1]))
m = s["moe"]
sys.exit(0 if s["backend"] == "hybrid" and m["misses"] > 0 and
         m["cpu_experts"] + m["fetched_experts"] > 0 else 1)
PY
for b in fused offload; do
  [ -s "$out/$b.ids" ] || { failed "$b answered"; continue; }
  if cmp -s "$out/cpu_f32.ids" "$out/$b.ids"; then pass "$b greedy ids == cpu ($fmt)"; else
    failed "$b greedy ids differ from cpu ($fmt)"
    diff "$out/cpu_f32.ids" "$out/$b.ids" | head -6; fi
  python3 - "$out/$b.stats.json" "$b" <<'PY' && pass "$b stats" || failed "$b stats"
import json, sys
s, b = json.load(open(sys.argv[1])), sys.argv[2]
m = s["moe"]
ok = s["backend"] == b
if b == "offload":  # a one-layer cache: decode misses and fetches
    ok = ok and m["misses"] > 0 and m["fetched_bytes"] > 0 and m["expert_slots"] == 8
sys.exit(0 if ok else 1)
PY
done
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
