#!/usr/bin/env bash
# Sets up and builds ft, starts `ft serve` (the embedded demo model unless arguments say
# otherwise) on 127.0.0.1:1919, shows one streamed chat answer through the OpenAI API, and keeps
# serving until interrupted. Extra arguments go to `ft serve` (e.g. --model DIR --port N).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
command -v curl >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq curl >/dev/null; }
port=1919
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do [ "${args[i]}" = "--port" ] && port=${args[i+1]}; done
./build/ft serve "$@" &
server=$!
trap 'kill $server 2>/dev/null' INT TERM
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
  kill -0 $server 2>/dev/null || exit 1
  sleep 0.2
done
echo '$ curl -N http://127.0.0.1:'$port'/v1/chat/completions -d '"'"'{"messages":[{"role":"user","content":"What does \"river\" mean?"}],"stream":true}'"'"
curl -sN "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"What does \"river\" mean?"}],"stream":true,"max_tokens":60}' |
  awk '{ if (match($0, /"content":"([^"\\]|\\.)*"/)) { s = substr($0, RSTART + 11, RLENGTH - 12);
         gsub(/\\"/, "\"", s); gsub(/\\n/, " ", s); printf "%s", s; fflush() } }'
echo
echo "ft is serving on http://127.0.0.1:$port (OpenAI /v1/chat/completions, Anthropic /v1/messages); Ctrl-C stops it."
wait $server
