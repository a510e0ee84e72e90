#!/usr/bin/env bash
# ft serve with the prefix cache (on by default on the CPU engine): a chat resent with one more
# message reports cached prompt tokens in OpenAI chat usage and Anthropic usage, and /v1/stats
# shows the cache's occupancy. usage: prefix_serve.sh FT_BINARY MODEL_DIR
set -u
ft=$1 model=$2
export FT_LOG_LEVEL=error
port=$((20000 + ($$ + 7919) % 20000))
# A bad --snapshot-vram is refused before the model loads, naming the flag.
bad=$("$ft" serve --model "$model" --port $port --snapshot-vram lots 2>&1)
if [ $? -eq 0 ] || ! printf '%s' "$bad" | grep -q -- '--snapshot-vram'; then
  echo "FAIL snapshot-vram-refused: $bad"; exit 1
fi
"$ft" serve --model "$model" --port $port --snapshot-vram 1GiB 2>/tmp/ft_ps_log.$$ &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f /tmp/ft_ps_log.$$' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
fails=0
check() {  # name, condition result (0 ok), detail
  if [ "$2" -ne 0 ]; then echo "FAIL $1: $3"; fails=$((fails + 1)); fi
}
sys='{"role":"system","content":"You are a careful assistant that answers in one short line about the weather and nothing else at all."}'
u1='{"role":"user","content":"What is the weather like today in the city?"}'
a1='{"role":"assistant","content":"Sunny and warm."}'
u2='{"role":"user","content":"And tomorrow?"}'
chat() {
  curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"m\",\"max_tokens\":3,\"temperature\":0,\"messages\":[$1]}"
}
r1=$(chat "$sys,$u1")
c1=$(printf '%s' "$r1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])')
check first-uncached "$([ "$c1" = 0 ]; echo $?)" "cached_tokens $c1 on a cold cache: $r1"
r2=$(chat "$sys,$u1,$a1,$u2")
read -r c2 p2 < <(printf '%s' "$r2" | python3 -c 'import json,sys; u=json.load(sys.stdin)["usage"]; print(u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens"])')
check second-cached "$([ "${c2:-0}" -ge 20 ] && [ "${c2:-0}" -lt "${p2:-0}" ]; echo $?)" \
  "cached_tokens ${c2:-?} of ${p2:-?}: $r2"
r3=$(curl -sf "http://127.0.0.1:$port/v1/messages" -H 'content-type: application/json' \
  -H 'anthropic-version: 2023-06-01' \
  -d "{\"model\":\"m\",\"max_tokens\":3,\"system\":\"You are a careful assistant that answers in one short line about the weather and nothing else at all.\",\"messages\":[$u1,$a1,$u2]}")
c3=$(printf '%s' "$r3" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["cache_read_input_tokens"])')
check anthropic-cached "$([ "${c3:-0}" -ge 20 ]; echo $?)" "cache_read_input_tokens ${c3:-?}: $r3"
stats=$(curl -sf "http://127.0.0.1:$port/v1/stats")
printf '%s' "$stats" | python3 -c '
import json,sys
p=json.load(sys.stdin)["prefix_cache"]
assert p["enabled"] and p["pages_used"] > 0 and p["pages_total"] > 0 and p["cached_tokens_total"] >= 40, p
# The snapshot tier occupancy (no VRAM tier on the CPU; attention-only demo: no snapshots).
for k in ("snapshots", "snapshot_bytes", "snapshot_hits", "snapshot_spills", "snapshot_evictions"):
  assert isinstance(p[k], int) and p[k] >= 0, (k, p)
assert p["snapshot_vram_slots"] == 0 and p["snapshot_vram_used"] == 0, p' \
  || { echo "FAIL stats: $stats"; fails=$((fails + 1)); }
metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
for m in prefix_cache_snapshot_vram_slots prefix_cache_snapshot_vram_used \
         prefix_cache_snapshot_spills_total prefix_cache_snapshot_hits_total; do
  printf '%s' "$metrics" | grep -q "^ft_$m " || { echo "FAIL metrics: no ft_$m"; fails=$((fails + 1)); }
done
[ $fails -eq 0 ] && echo "prefix_serve: all checks passed (cached $c2 of $p2; anthropic $c3)"
exit $fails
