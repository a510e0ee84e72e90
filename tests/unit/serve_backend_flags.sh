#!/usr/bin/env bash
# ft serve's backend and memory flags: each mistake is one "ft: error: ..." line (exit != 0)
# naming the flag or the numbers and the fix; a budget that cannot hold the model is refused
# at start-up; the CPU backend serves and /v1/stats reports backend "cpu" with zero offload
# counters. usage: serve_backend_flags.sh FT_BINARY MODEL_DIR
set -u
ft=$1 model=$2
export FT_LOG_LEVEL=error  # only the error line on stderr
fails=0 passes=0
port=$((20000 + $$ % 20000))
expect_err() {  # name, expected stderr substring, ft arguments...
  local name=$1 want=$2; shift 2
  local err out rc lines
  out=$(timeout 60 "$ft" "$@" 2>/tmp/ft_sbf_err.$$); rc=$?
  err=$(cat /tmp/ft_sbf_err.$$); rm -f /tmp/ft_sbf_err.$$
  lines=$(printf '%s' "$err" | grep -c '')
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -z "$out" ] && [ "$lines" -eq 1 ] &&
     [[ "$err" == "ft: error: "*"$want"* ]]; then passes=$((passes+1)); else
    echo "FAIL $name: rc=$rc lines=$lines err=${err:0:400} out=${out:0:100}"; fails=$((fails+1)); fi
}
serve=(serve --model "$model" --port $port)
expect_err bad-backend "auto, fused, offload, cpu or hybrid" "${serve[@]}" --moe-backend gpu
expect_err bad-size "not a size" "${serve[@]}" --gpu-memory lots
expect_err bad-unit "unknown unit" "${serve[@]}" --gpu-memory 8parsecs
expect_err bad-ratio "--memory-ratio" "${serve[@]}" --memory-ratio 1.5
expect_err ratio-and-size "excludes" "${serve[@]}" --gpu-memory 8GiB --memory-ratio 0.5
expect_err size-and-rate "excludes" "${serve[@]}" --moe-cache-size 64 --moe-cache-rate 0.5
expect_err bad-rate "--moe-cache-rate" "${serve[@]}" --moe-cache-rate 2
expect_err tiny-reserve "--kv-reserve-tokens" "${serve[@]}" --kv-reserve-tokens 4
if "$ft" --version | grep -q "CUDA backend not built"; then
  # No CUDA backend: every GPU backend names the rebuild, before any model work.
  for b in fused offload hybrid; do
    expect_err "no-cuda-$b" "needs the CUDA backend" "${serve[@]}" --moe-backend $b
  done
else
  # A budget that cannot hold the model is refused with the numbers and the fix, before the
  # device is needed (so this runs on CPU-only CI machines too).
  expect_err budget-offload "does not fit the memory budget of 0.06 GiB" "${serve[@]}" \
    --moe-backend offload --gpu-memory 64MiB --kv-reserve-tokens 4096
  expect_err budget-names-fix "--gpu-memory" "${serve[@]}" --moe-backend fused --gpu-memory 64MiB
  expect_err budget-names-kv "KV reserve" "${serve[@]}" --moe-backend hybrid --gpu-memory 100MiB
  expect_err ctx-over-reserve "raise --kv-reserve-tokens" "${serve[@]}" --moe-backend offload \
    --gpu-memory 8GiB --ctx-size 8192 --kv-reserve-tokens 4096
  if "$ft" --version | grep -q "cuda: no CUDA device"; then
    expect_err no-device "needs a CUDA device" "${serve[@]}" --moe-backend offload --gpu-memory 8GiB
    expect_err no-device-ratio "needs a CUDA device" "${serve[@]}" --moe-backend fused
  fi
fi
# The CPU backend serves; /v1/stats and /metrics carry the backend and offload fields.
"$ft" serve --model "$model" --port $port --moe-backend cpu 2>/tmp/ft_sbf_log.$$ &
pid=$!
ok=0
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.1
done
if [ $ok -eq 1 ]; then
  curl -sf "http://127.0.0.1:$port/generate" -d '{"text":"hello","sampling_params":{"max_new_tokens":4}}' >/dev/null
  stats=$(curl -sf "http://127.0.0.1:$port/v1/stats")
  metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
  if node -e '
      const s = JSON.parse(process.argv[1]);
      const m = s.moe, t = m.time_s;
      const ok = s.backend === "cpu" && s.device.startsWith("cpu") && s.steps_total > 0 &&
        m.hits === 0 && m.misses === 0 && m.hit_rate === 0 && m.fetched_bytes === 0 &&
        m.fetched_experts === 0 && m.cpu_experts === 0 && m.streamed_bytes === 0 &&
        m.probation_fetches === 0 &&
        m.steps > 0 && t.attention === 0 && t.fetch === 0 && t.cpu === 0 &&
        s.memory.budget_bytes === 0 && s.memory.kv_tokens > 0;
      process.exit(ok ? 0 : 1);' "$stats"; then passes=$((passes+1)); else
    echo "FAIL stats: $stats"; fails=$((fails+1)); fi
  if [[ "$metrics" == *'ft_backend_info{backend="cpu"} 1'* && "$metrics" == *"ft_moe_expert_hit_rate 0"* &&
        "$metrics" == *"ft_moe_fetched_bytes_total 0"* &&
        "$metrics" == *"ft_moe_probation_fetches_total 0"* ]]; then passes=$((passes+1)); else
    echo "FAIL metrics: ${metrics:0:2000}"; fails=$((fails+1)); fi
else
  echo "FAIL serve did not come up: $(cat /tmp/ft_sbf_log.$$)"; fails=$((fails+1))
fi
kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f /tmp/ft_sbf_log.$$
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
