#!/usr/bin/env bash
# ft serve on a GPU: the CPU backend's greedy answers are the reference; fused, offload at a
# small budget (minimum slots: every step misses) and hybrid must give the same token ids over
# the real HTTP API (temperature 0). Also checks the budget refusal and /v1/stats' offload
# fields, then runs `ft bench bw` once. Run on the GPU machine:
#   tests/cuda/serve_gpu.sh FT_BINARY [MODEL_DIR (default models/demo)] [OUT_DIR]
set -u
ft=$1 model=${2:-models/demo} out=${3:-/tmp/serve_gpu}
mkdir -p "$out"
port=19555
fails=0 passes=0
prompts=("The cat" "Once upon a time" "What is a river?" "hello" "The meaning of the word")
pass() { passes=$((passes+1)); echo "PASS $1"; }
failed() { fails=$((fails+1)); echo "FAIL $1"; }

. "$(dirname "$0")/serve_lib.sh"
start() {  # name, flags...: serves in the background, waits for /health
  local name=$1; shift
  # --kv-dtype f32: the GPU keeps the CPU's arithmetic, so greedy ids compare exactly.
  launch "$name" "$ft" serve --model "$model" --port $port --stats-log-interval 1 --kv-dtype f32 "$@"
}

run_backend() {  # name, flags...
  local name=$1; shift
  if start "$name" "$@"; then
    answers "$name"
    stop
    echo "--- $name: $(grep -m1 'moe backend' "$out/$name.log" | sed 's/.*moe backend/moe backend/')"
    python3 - "$out/$name.stats.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
m = s["moe"]
print(f"    backend {s['backend']}; hits {m['hits']} misses {m['misses']} hit rate "
      f"{m['hit_rate']:.3f}; fetched {m['fetched_experts']} experts / {m['fetched_bytes']} B; "
      f"streamed {m['streamed_bytes']} B; cpu experts {m['cpu_experts']}; slots "
      f"{m['expert_slots']}/{m['experts_total']}; time {m['time_s']}; memory {s['memory']}")
EOF
    grep -m2 "stats:" "$out/$name.log" | sed 's/^/    /'
  else
    failed "$name starts"
    stop
  fi
}

run_backend cpu --moe-backend cpu
run_backend fused --moe-backend fused --gpu-memory 2GiB --kv-reserve-tokens 8192 --ctx-size 2048
run_backend offload --moe-backend offload --gpu-memory 1GiB --kv-reserve-tokens 8192 \
  --ctx-size 2048 --moe-cache-size 8
run_backend offload_auto_slots --moe-backend offload --gpu-memory 1GiB \
  --kv-reserve-tokens 8192 --ctx-size 2048
run_backend hybrid --moe-backend hybrid --gpu-memory 1GiB --kv-reserve-tokens 8192 \
  --ctx-size 2048 --moe-cache-size 8
run_backend auto --kv-reserve-tokens 8192 --ctx-size 2048

for b in fused offload offload_auto_slots hybrid auto; do
  [ -s "$out/$b.ids" ] || { failed "$b answered"; continue; }
  if cmp -s "$out/cpu.ids" "$out/$b.ids"; then pass "$b greedy ids == cpu"; else
    failed "$b greedy ids differ from cpu"; diff "$out/cpu.ids" "$out/$b.ids" | head -6; fi
  python3 - "$out/$b.stats.json" "$b" <<'EOF' && pass "$b stats" || failed "$b stats"
import json, sys
s, b = json.load(open(sys.argv[1])), sys.argv[2]
m = s["moe"]
want = {"fused": "fused", "offload": "offload", "offload_auto_slots": "offload",
        "hybrid": "hybrid"}.get(b, s["backend"])
ok = s["backend"] == want and s["memory"]["budget_bytes"] > 0
if b == "offload":  # minimum slots: decode misses and fetches
    ok = ok and m["misses"] > 0 and m["fetched_bytes"] > 0 and m["expert_slots"] == 8
if b == "hybrid":
    ok = ok and m["misses"] > 0 and m["cpu_experts"] + m["fetched_experts"] > 0
sys.exit(0 if ok else 1)
EOF
done

# A budget that cannot hold the model is refused at start-up: one line, exit != 0.
err=$(FT_LOG_LEVEL=error "$ft" serve --model "$model" --port $port --moe-backend offload \
      --gpu-memory 64MiB 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s' "$err" | grep -c '')" -eq 1 ] &&
   [[ "$err" == *"does not fit the memory budget"* ]]; then pass "refusal: $err"; else
  failed "refusal rc=$rc: $err"; fi

echo "=== ft bench bw"
XDG_CACHE_HOME="$out/cache" timeout 150 "$ft" bench bw --seconds 1 2>&1 | tee "$out/bench_bw.txt"
[ -s "$out/cache/ft/bw_profile.json" ] && pass "bench bw wrote the profile" || failed "bench bw profile"
cat "$out/cache/ft/bw_profile.json" 2>/dev/null
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
