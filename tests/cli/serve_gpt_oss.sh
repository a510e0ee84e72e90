#!/usr/bin/env bash
# ft serve --model tests/fixtures/gpt_oss on the CPU: /generate with the reference prompt ids at
# temperature 0 returns transformers' greedy ids, a chat completion through the fixture's Harmony
# chat template answers, ft run agrees, and a GGUF of the fixture serves the same ids.
# usage: serve_gpt_oss.sh FT_BINARY FIXTURES_DIR
set -u
ft=$1 fx=$2/gpt_oss
export FT_LOG_LEVEL=error
tmp=$(mktemp -d /tmp/ft_serve_oss.XXXXXX)
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0 passes=0 pid=
check() {  # name, condition-result (0 ok), detail
  if [ "$2" -eq 0 ]; then passes=$((passes+1)); else echo "FAIL $1: $3"; fails=$((fails+1)); fi
}
# prompt_ids / greedy_ids (I64) of reference.safetensors as "1, 2, 3".
ref_ids() {
  python3 - "$fx/reference.safetensors" "$1" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
a, b = h[sys.argv[2]]["data_offsets"]; f.seek(8 + n + a); raw = f.read(b - a)
print(", ".join(str(v) for v in struct.unpack(f"<{len(raw) // 8}q", raw)))
PY
}
prompt=$(ref_ids prompt_ids) greedy=$(ref_ids greedy_ids)
serve() {  # model
  port=$((22000 + RANDOM % 20000))
  "$ft" serve --model "$1" --port $port --moe-backend cpu 2>"$tmp/serve.log" &
  pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  return 1
}
generate() {
  curl -sf -m 60 "http://127.0.0.1:$port/generate" -d "{\"input_ids\": [$prompt], \
\"sampling_params\": {\"max_new_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true}}" |
    python3 -c 'import json,sys; print(", ".join(map(str, json.load(sys.stdin)["output_ids"])))'
}

serve "$fx"; check serve-health $? "$(tail -c 300 "$tmp/serve.log")"
got=$(generate)
[ "$got" == "$greedy" ]; check greedy-ids $? "got [$got], transformers [$greedy]"
resp=$(curl -sf -m 60 "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"m","messages":[{"role":"user","content":"hi there"}],"max_tokens":5}')
[[ "$resp" == *'"choices"'* ]]; check chat $? "${resp:0:300}"
kill $pid 2>/dev/null; wait $pid 2>/dev/null

out=$("$ft" run --model "$fx" --prompt-ids "${prompt// /}" -n 16 --ignore-eos --json 2>&1)
[[ "$out" == *"\"ids\":[${greedy// /}]"* ]]; check run-greedy $? "${out:0:300}"

"$ft" quantize "$fx" "$tmp/oss.gguf" --type source >/dev/null 2>"$tmp/q.log"
check quantize-gguf $? "$(tail -c 300 "$tmp/q.log")"
serve "$tmp/oss.gguf"; check gguf-serve-health $? "$(tail -c 300 "$tmp/serve.log")"
got=$(generate)
[ "$got" == "$greedy" ]; check gguf-greedy-ids $? "got [$got], transformers [$greedy]"
kill $pid 2>/dev/null; wait $pid 2>/dev/null

echo "serve_gpt_oss: $passes passed, $fails failed"
[ $fails -eq 0 ]
