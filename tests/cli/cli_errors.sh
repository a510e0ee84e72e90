#!/usr/bin/env bash
# CLI contract: help/version work; every bad input is a one-line "ft: error: ..." on stderr with
# a non-zero exit and nothing on stdout. usage: cli_errors.sh FT_BINARY FIXTURES_DIR
set -u
ft=$1 fx=$2
fails=0 passes=0
expect_ok() {  # name, expected stdout substring, command...
  local name=$1 want=$2; shift 2
  local out; out=$("$@" 2>/dev/null); local rc=$?
  if [ $rc -eq 0 ] && [[ "$out" == *"$want"* ]]; then passes=$((passes+1)); else
    echo "FAIL $name: rc=$rc out=${out:0:200}"; fails=$((fails+1)); fi
}
expect_err() {  # name, expected stderr substring, command...
  local name=$1 want=$2; shift 2
  local err out rc
  out=$("$@" 2>/tmp/ft_cli_err.$$); rc=$?; err=$(cat /tmp/ft_cli_err.$$); rm -f /tmp/ft_cli_err.$$
  local lines; lines=$(printf '%s' "$err" | grep -c '')
  if [ $rc -ne 0 ] && [ -z "$out" ] && [ "$lines" -eq 1 ] && [[ "$err" == "ft: error: "*"$want"* ]]; then
    passes=$((passes+1)); else
    echo "FAIL $name: rc=$rc lines=$lines err=${err:0:300} out=${out:0:100}"; fails=$((fails+1)); fi
}
m=$fx/qwen3_moe
expect_ok version "ft " "$ft" --version
expect_ok help "logits" "$ft" --help
expect_ok run-help "--prompt-ids" "$ft" run --help
expect_ok logits-help "--positions" "$ft" logits --help
expect_ok logits '"n_vocab":1000' "$ft" logits --model "$m" --ids 1,2,3
expect_ok run-ids '"ids":[' "$ft" run --model "$m" --prompt-ids 5,6,7 -n 3 --json
expect_err no-command "" "$ft"
expect_err unknown-flag "--frobnicate" "$ft" run --model "$m" --prompt-ids 1 --frobnicate
expect_err missing-dir "does not exist" "$ft" logits --model /nonexistent/model --ids 1
expect_err id-range "out of range" "$ft" logits --model "$m" --ids 1,2,99999
expect_err id-bad "not a token id" "$ft" logits --model "$m" --ids 1,x,3
expect_err id-negative "not a token id" "$ft" run --model "$m" --prompt-ids -5 -n 2
expect_err id-empty "not a token id" "$ft" logits --model "$m" --ids ,
expect_err positions "positions" "$ft" logits --model "$m" --ids 1 --positions middle
expect_err n-zero "-n must be positive" "$ft" run --model "$m" --prompt-ids 1 -n 0
expect_err temperature "temperature" "$ft" run --model "$m" --prompt-ids 1 --temperature -1
expect_err not-a-model "config.json" "$ft" logits --model "$fx" --ids 1
expect_err no-tokenizer "tokenizer.json" "$ft" run --model "$m" "hello"
expect_err bench-topk "--top-k" "$ft" bench cpu --experts 4 --top-k 8
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
