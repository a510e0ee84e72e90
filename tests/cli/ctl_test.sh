#!/usr/bin/env bash
# ft ctl against a real `ft serve` of the demo model: every subcommand's human and --json output,
# API-key handling, and one-line errors (exit != 0) for an unreachable or bad base URL.
# usage: ctl_test.sh FT_BINARY DEMO_MODEL_DIR
set -u
ft=$1 model=$2
port=$((20000 + RANDOM % 20000))
key=ctl-test-key
url=http://127.0.0.1:$port
log=$(mktemp)
"$ft" serve --model "$model" --port "$port" --api-key "$key" --threads 1 >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
ctl() { "$ft" ctl --base-url "$url" --api-key "$key" "$@"; }
for _ in $(seq 1 300); do
  ctl health >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "server died:"; cat "$log"; exit 1; }
  sleep 0.1
done
fails=0 passes=0
check() {  # name, rc wanted (0 or nz), substring of stdout (ok) or stderr (error), command...
  local name=$1 want_rc=$2 want=$3; shift 3
  local out err rc
  out=$("$@" 2>/tmp/ft_ctl_err.$$); rc=$?; err=$(cat /tmp/ft_ctl_err.$$); rm -f /tmp/ft_ctl_err.$$
  local ok=1
  if [ "$want_rc" = 0 ]; then
    [ $rc -eq 0 ] && [[ "$out" == *"$want"* ]] || ok=0
  else
    local lines; lines=$(printf '%s' "$err" | grep -c '')
    [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && [[ "$err" == "ft: error: "*"$want"* ]] || ok=0
  fi
  if [ $ok = 1 ]; then passes=$((passes+1)); else
    echo "FAIL $name: rc=$rc out=${out:0:300} err=${err:0:300}"; fails=$((fails+1)); fi
}
check health 0 "ok (ready)" ctl health
check health-json 0 '"status":"ok"' ctl --json health
check generate-json 0 '"output_ids":[' ctl --json generate "the cat" -n 4
check generate 0 "" ctl generate "a dog" -n 3
check stats 0 "requests_total" ctl stats
check stats-bytes 0 "memory.weight_bytes" ctl stats
check stats-json 0 '"generated_tokens_total": ' ctl --json stats
check requests 0 "generate" ctl requests
check requests-head 0 "completion" ctl requests
check no-key nz "answered 401" "$ft" ctl --base-url "$url" generate "x" -n 1
check wrong-key nz "answered 401" "$ft" ctl --base-url "$url" --api-key nope generate "x" -n 1
check unreachable nz "cannot reach http://127.0.0.1:1/health" "$ft" ctl --base-url http://127.0.0.1:1 health
check https nz "must start with http://" "$ft" ctl --base-url https://example.com health
check generate-empty nz "give the text" ctl generate ""
check generate-n nz "" ctl generate "x" -n 0
check no-sub nz "" "$ft" ctl
# Live pools (issue #9): the table, JSON, resizes applied between steps, refusals.
check cache 0 "prefix_kv" ctl cache
check cache-kv 0 "kv" ctl cache
check cache-json 0 '"pools": [' ctl --json cache
check cache-resize-kv 0 "applied" ctl cache --kv 8192 --wait 10
check cache-resize-prefix 0 "applied" ctl cache --kv 16384 --prefix 256 --state 8 --wait 10
check cache-resize-json 0 '"status": "applied"' ctl --json cache --state 16 --wait 10
check cache-no-moe nz "no 'moe' pool" ctl cache --moe 4
check cache-too-small nz "outside the 'kv' pool's limits" ctl cache --kv 1
check cache-stats 0 "elastic.resizes" ctl stats
ctx_now=$(ctl --json cache | grep -o '"ctx_size": [0-9]*' | grep -o '[0-9]*$')
if [ "${ctx_now:-0}" -eq 4096 ]; then passes=$((passes+1)); else echo "FAIL cache-ctx: $ctx_now"; fails=$((fails+1)); fi
check generate-after-resize 0 '"output_ids":[' ctl --json generate "the cat" -n 4
# Stats must count the three generations above (the 401s never reached the engine).
done_n=$(ctl --json stats | grep -o '"requests_finished": [0-9]*' | grep -o '[0-9]*$')
if [ "${done_n:-0}" -eq 3 ]; then passes=$((passes+1)); else echo "FAIL stats-count: $done_n"; fails=$((fails+1)); fi
echo "ctl_test: $passes passed, $fails failed"
[ $fails -eq 0 ]
