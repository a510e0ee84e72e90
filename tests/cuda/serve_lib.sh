# Shared by the server-level GPU scripts (source it): launch a server in the background and wait
# for /health; stop it. Uses the caller's $out (log folder) and $port; sets $pid.
#   launch NAME CMD...   (log: $out/NAME.log; waits up to ${health_tries:-600} x 0.1 s)
launch() {
  local name=$1; shift
  "$@" >"$out/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 "${health_tries:-600}"); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "--- $name did not start:"; tail -n 20 "$out/$name.log"; return 1
}
stop() { kill $pid 2>/dev/null; wait $pid 2>/dev/null; }

# generate_ids PROMPT: the greedy output ids of one /generate call (max_new_tokens
# ${max_new_tokens:-48}), or "no answer".
generate_ids() {
  curl -sf -m 120 "http://127.0.0.1:$port/generate" -d "{\"text\": \"$1\", \"sampling_params\": \
{\"max_new_tokens\": ${max_new_tokens:-48}, \"temperature\": 0, \"ignore_eos\": true}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["output_ids"])' 2>/dev/null ||
    echo "no answer"
}
# answers NAME: the ids of every prompt in the caller's $prompts, one line each into
# $out/NAME.ids, sequentially and then all at once (batched decode across sequences); the
# server's /v1/stats into $out/NAME.stats.json.
answers() {
  local name=$1 p i=0 asks=()
  : >"$out/$name.ids"
  for p in "${prompts[@]}"; do generate_ids "$p" >>"$out/$name.ids"; done
  # Wait for these requests only: other background jobs (the server, a second node) run on.
  for p in "${prompts[@]}"; do generate_ids "$p" >"$out/$name.c$i" & asks+=($!); i=$((i+1)); done
  wait "${asks[@]}" 2>/dev/null
  for i in $(seq 0 $((${#prompts[@]} - 1))); do cat "$out/$name.c$i" >>"$out/$name.ids"; done
  curl -sf "http://127.0.0.1:$port/v1/stats" >"$out/$name.stats.json"
}
