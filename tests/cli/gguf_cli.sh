#!/usr/bin/env bash
# GGUF through the CLI: ft quantize writes GGUF files (a progress bar on stderr); ft logits, run,
# tokenize and serve take --model FILE.gguf; an unquantized GGUF gives the same logits as its
# safetensors checkpoint; bad arguments are one-line errors.
# usage: gguf_cli.sh FT_BINARY FIXTURES_DIR DEMO_MODEL_DIR
set -u
ft=$1 fx=$2 demo=$3
export FT_LOG_LEVEL=error
tmp=$(mktemp -d /tmp/ft_gguf_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0
check() {  # name, condition-result (0 ok), detail
  if [ "$2" -eq 0 ]; then passes=$((passes+1)); else echo "FAIL $1: $3"; fails=$((fails+1)); fi
}
expect_err() {  # name, expected stderr substring, command...
  local name=$1 want=$2; shift 2
  local out err rc lines
  out=$("$@" 2>"$tmp/err"); rc=$?; err=$(cat "$tmp/err")
  lines=$(printf '%s' "$err" | grep -c '')
  [ $rc -ne 0 ] && [ -z "$out" ] && [ "$lines" -eq 1 ] && [[ "$err" == "ft: error: "*"$want"* ]]
  check "$name" $? "rc=$rc lines=$lines err=${err:0:300}"
}

# Unquantized GGUF of a fixture: identical logits.
"$ft" quantize "$fx/qwen3_moe" "$tmp/q.gguf" --type source >"$tmp/out" 2>"$tmp/log"
check quantize-source $? "$(tail -c 300 "$tmp/log")"
a=$("$ft" logits --model "$fx/qwen3_moe" --ids 1,2,3,4 --positions all)
b=$("$ft" logits --model "$tmp/q.gguf" --ids 1,2,3,4 --positions all)
[ -n "$a" ] && [ "$a" == "$b" ]; check logits-identical $? "safetensors and GGUF logits differ"

# The demo model as Q8_0: progress bar, then run / chat / tokenize / serve on the file.
"$ft" quantize "$demo" "$tmp/demo-q8.gguf" --type q8_0 >"$tmp/out" 2>"$tmp/log"
check quantize-q8 $? "$(tail -c 300 "$tmp/log")"
grep -q "100.0%" "$tmp/log"; check progress-bar $? "no progress bar: $(tail -c 200 "$tmp/log")"
grep -q "demo-q8.gguf" "$tmp/out"; check prints-file $? "$(cat "$tmp/out")"
out=$("$ft" run --model "$tmp/demo-q8.gguf" "The cat" -n 6 --json)
[[ "$out" == *'"ids":['* ]]; check run-text $? "${out:0:200}"
out=$("$ft" run --model "$tmp/demo-q8.gguf" --chat "What is a cat?" -n 6 2>/dev/null)
[ $? -eq 0 ] && [ -n "$out" ]; check run-chat $? "${out:0:200}"
a=$("$ft" tokenize --model "$demo" "Hello, world! 123" --json)
b=$("$ft" tokenize --model "$tmp/demo-q8.gguf" "Hello, world! 123" --json)
[ -n "$a" ] && [ "$a" == "$b" ]; check tokenize-same $? "$a vs $b"

# GGUF in: re-quantized, the tokenizer and chat template carried over.
"$ft" quantize "$tmp/demo-q8.gguf" "$tmp/re.gguf" --type q4_0 >/dev/null 2>&1
check quantize-gguf-in $? "re-quantizing a GGUF failed"
c=$("$ft" tokenize --model "$tmp/re.gguf" "Hello, world! 123" --json)
[ "$a" == "$c" ]; check requant-tokenizer $? "$a vs $c"
out=$("$ft" run --model "$tmp/re.gguf" --chat "hi" -n 3 --json 2>/dev/null)
[[ "$out" == *'"ids":['* ]]; check requant-chat $? "${out:0:200}"

# Split output joins on load.
"$ft" quantize "$demo" "$tmp/split.gguf" --type q4_k --split 2 >"$tmp/out" 2>/dev/null
check quantize-split $? "$(cat "$tmp/out")"
out=$("$ft" run --model "$tmp/split-00001-of-00002.gguf" --prompt-ids 1,2,3 -n 3 --json)
[[ "$out" == *'"ids":['* ]]; check run-split $? "${out:0:200}"

port=$((21000 + $$ % 20000))
"$ft" serve --model "$tmp/demo-q8.gguf" --port $port 2>"$tmp/serve.log" &
pid=$!
ok=1
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then ok=0; break; fi
  sleep 0.1
done
check serve-health $ok "$(tail -c 300 "$tmp/serve.log")"
resp=$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}')
[[ "$resp" == *'"choices"'* ]]; check serve-chat $? "${resp:0:300}"
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null

expect_err out-not-gguf ".gguf file" "$ft" quantize "$fx/qwen3_moe" "$tmp/x.bin"
expect_err bad-type "q9_z" "$ft" quantize "$fx/qwen3_moe" "$tmp/x.gguf" --type q9_z
expect_err missing-gguf "does not exist" "$ft" run --model "$tmp/none.gguf" --prompt-ids 1 -n 1
printf 'GGUF\x01\x00\x00\x00' >"$tmp/v1.gguf"
expect_err gguf-v1 "v1 is not supported" "$ft" logits --model "$tmp/v1.gguf" --ids 1
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
