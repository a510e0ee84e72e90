#!/usr/bin/env bash
# Fast-load checkpoints and KL divergence through the CLI: ft checkpoint and ft quantize
# --out-format ftc write directories that logits/run/tokenize/perplexity take as --model (same
# logits as the source); ft perplexity --kl-divergence-base against a model and against a
# --save-logits file; bad arguments are one-line errors.
# usage: checkpoint_cli.sh FT_BINARY DEMO_MODEL_DIR
set -u
ft=$1 demo=$2
export FT_LOG_LEVEL=error
tmp=$(mktemp -d /tmp/ft_ckpt_cli.XXXXXX)
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
field() {  # json, python expression over j
  python3 -c "import json,sys; j=json.loads(sys.argv[1]); print($2)" "$1"
}

# ft checkpoint: same logits, tokenizer and generation as the source.
"$ft" checkpoint --model "$demo" --out "$tmp/ftc" >"$tmp/out" 2>"$tmp/log"
check checkpoint $? "$(tail -c 300 "$tmp/log")"
[ -f "$tmp/ftc/ft_checkpoint.json" ] && [ -f "$tmp/ftc/weights.ftw" ] && [ -f "$tmp/ftc/tokenizer.json" ]
check checkpoint-files $? "$(ls "$tmp/ftc")"
grep -q "100%" "$tmp/log"; check checkpoint-progress $? "$(tail -c 200 "$tmp/log")"
a=$("$ft" logits --model "$demo" --ids 1,2,3,4,5 --positions all)
b=$("$ft" logits --model "$tmp/ftc" --ids 1,2,3,4,5 --positions all 2>/dev/null)
[ -n "$a" ] && [ "$a" == "$b" ]; check logits-identical $? "source and checkpoint logits differ"
a=$("$ft" run --model "$demo" "The cat" -n 8 --json)
b=$("$ft" run --model "$tmp/ftc" "The cat" -n 8 --json 2>/dev/null)
[ -n "$a" ] && [ "$(field "$a" "j['ids']")" == "$(field "$b" "j['ids']")" ]
check run-identical $? "${a:0:200} vs ${b:0:200}"
a=$("$ft" tokenize --model "$demo" "Hello, world! 123" --json)
b=$("$ft" tokenize --model "$tmp/ftc" "Hello, world! 123" --json)
[ "$a" == "$b" ]; check tokenize-identical $? "$a vs $b"

# From a GGUF: the config comes from its metadata, the tokenizer is written as tokenizer.json.
"$ft" quantize "$demo" "$tmp/d.gguf" --type q8_0 >/dev/null 2>&1
"$ft" checkpoint --model "$tmp/d.gguf" --out "$tmp/gftc" >/dev/null 2>"$tmp/log"
check checkpoint-gguf $? "$(tail -c 300 "$tmp/log")"
a=$("$ft" logits --model "$tmp/d.gguf" --ids 1,2,3 --positions all)
b=$("$ft" logits --model "$tmp/gftc" --ids 1,2,3 --positions all)
[ -n "$a" ] && [ "$a" == "$b" ]; check gguf-logits-identical $? "GGUF and checkpoint logits differ"
a=$("$ft" tokenize --model "$tmp/d.gguf" "Hello, world! 123" --json)
b=$("$ft" tokenize --model "$tmp/gftc" "Hello, world! 123" --json)
[ "$a" == "$b" ]; check gguf-tokenize-identical $? "$a vs $b"

# ft quantize --out-format ftc and the KL report.
"$ft" quantize "$demo" "$tmp/q4" --type q4_k --out-format ftc >"$tmp/out" 2>"$tmp/log"
check quantize-ftc $? "$(tail -c 300 "$tmp/log")"
grep -q '"dtype": "Q4_K"' "$tmp/q4/ft_checkpoint.json"; check quantize-ftc-type $? "no Q4_K tensor"
sed -n '1,60p' "$demo/README.md" >"$tmp/text.txt"
self=$("$ft" perplexity --model "$demo" --file "$tmp/text.txt" --ctx 128 --kl-divergence-base "$demo")
[ "$(field "$self" "j['kl_divergence']['mean'] == 0 and j['kl_divergence']['top1_agreement'] == 1")" == True ]
check kl-self-zero $? "${self:0:300}"
kl=$("$ft" perplexity --model "$tmp/q4" --file "$tmp/text.txt" --ctx 128 --kl-divergence-base "$demo" 2>/dev/null)
[ "$(field "$kl" "0 < j['kl_divergence']['mean'] < 0.2 and 0.7 < j['kl_divergence']['top1_agreement'] < 1 and j['kl_divergence']['max'] >= j['kl_divergence']['p99'] >= j['kl_divergence']['median']")" == True ]
check kl-q4k $? "${kl:0:400}"
base=$("$ft" perplexity --model "$demo" --file "$tmp/text.txt" --ctx 128 --save-logits "$tmp/base.lp")
[ -f "$tmp/base.lp" ] && [ "$(field "$base" "j['perplexity']")" == "$(field "$self" "j['perplexity']")" ]
check save-logits $? "${base:0:300}"
kf=$("$ft" perplexity --model "$tmp/q4" --file "$tmp/text.txt" --ctx 128 --kl-divergence-base "$tmp/base.lp" 2>/dev/null)
# F16 log-probs: the same KL to a few parts in a thousand.
[ "$(field "$kf" "abs(j['kl_divergence']['mean'] / $(field "$kl" "j['kl_divergence']['mean']") - 1) < 0.02 and j['kl_divergence']['top1_agreement'] == $(field "$kl" "j['kl_divergence']['top1_agreement']")")" == True ]
check kl-from-file $? "${kf:0:300} vs ${kl:0:300}"

expect_err kl-ctx-mismatch "different --ctx" "$ft" perplexity --model "$tmp/q4" --file "$tmp/text.txt" --ctx 64 --kl-divergence-base "$tmp/base.lp"
printf 'other words entirely\n' >"$tmp/other.txt"
expect_err kl-tokens-mismatch "tokens differ" "$ft" perplexity --model "$tmp/q4" --file "$tmp/other.txt" --ctx 128 --kl-divergence-base "$tmp/base.lp"
expect_err kl-missing "" "$ft" perplexity --model "$demo" --file "$tmp/text.txt" --kl-divergence-base "$tmp/nope"
touch "$tmp/afile"
expect_err checkpoint-out-file "is not a directory" "$ft" checkpoint --model "$demo" --out "$tmp/afile"
expect_err quantize-ftc-type "unknown" "$ft" quantize "$demo" "$tmp/bad" --type q9_z --out-format ftc
: >"$tmp/ftc/weights.ftw"
expect_err truncated-checkpoint "shorter than the" "$ft" logits --model "$tmp/ftc" --ids 1

echo "checkpoint_cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
