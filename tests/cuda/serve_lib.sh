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
