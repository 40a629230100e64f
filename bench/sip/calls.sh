#!/usr/bin/env bash
# SIP calls on `voicepipe serve`: CPU per concurrent call and the delay a call leg adds.
#
# CPU: a `sip` route whose graph echoes the caller (app-source -> app-sink at 16 kHz); SIPp places N calls
# at once (bench/sip/call_20s.xml: A-law RTP for ~20 s each way); once all N are active, serve's CPU time
# is read from /proc over 8 s. Delay: `voicepipe call` plays tones to the same route and records the echo;
# Tests/Fixtures/sip/echo_check.py finds the round trip (caller send queue, route jitter buffer, graph,
# route send, caller jitter buffer: two call legs), reported per leg.
#
# usage: bench/sip/calls.sh [N...]      (default: 1 10 20 40; VOICEPIPE=path/to/voicepipe)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${VOICEPIPE:-.build/release/voicepipe}"
[ -x "$bin" ] || bin=.build/debug/voicepipe
counts=("$@"); [ ${#counts[@]} -gt 0 ] || counts=(1 10 20 40)
dir=$(mktemp -d)
trap 'kill "$serve" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port); sip=$(free_port)
cat > "$dir/echo.yaml" <<YAML
version: 1
nodes:
  mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
  speaker: { type: app-sink, capacity: 500 }
links:
  - mic -> speaker
YAML
cat > "$dir/serve.yaml" <<YAML
listen: { host: 127.0.0.1, port: $http }
max_sessions: 200
routes:
  - name: phone
    protocol: sip
    port: $sip
    graph: $dir/echo.yaml
YAML
"$bin" serve "$dir/serve.yaml" --log-level warning > "$dir/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
active() { curl -s "http://127.0.0.1:$http/metrics" | awk '/^voicepipe_sessions_active\{route="phone"\}/ {print $2}'; }
ticks() { awk '{print $14 + $15}' "/proc/$serve/stat"; }
hz=$(getconf CLK_TCK)
echo "binary: $bin; $(nproc) cores"
echo "| concurrent calls | serve CPU % (of one core) | CPU % per call |"
echo "|---:|---:|---:|"
for n in "${counts[@]}"; do
  sipp "127.0.0.1:$sip" -sf bench/sip/call_20s.xml -m "$n" -l "$n" -r 100 -i 127.0.0.1 -p "$(free_port)" -mp "$(free_port)" \
    -nostdin -timeout 120 -timeout_error > "$dir/sipp.out" 2>&1 &
  sipp_pid=$!
  for _ in $(seq 200); do [ "$(active)" = "$n" ] && break; sleep 0.05; done
  t0=$(ticks); s0=$(date +%s.%N)
  sleep 8
  t1=$(ticks); s1=$(date +%s.%N)
  seen=$(active)
  wait "$sipp_pid" || echo "(SIPp reported failed calls at N=$n)"
  python3 -c "
cpu = ($t1 - $t0) / $hz / ($s1 - $s0) * 100
print('| %d | %.1f | %.2f |' % ($n, cpu, cpu / $n) + ('' if '$seen' == '$n' else ' (only $seen active at the end)'))"
  for _ in $(seq 200); do [ "$(active)" = "0" ] && break; sleep 0.1; done
done
# The delay a call leg adds.
sox -n -r 16000 -c 1 -b 16 "$dir/a.wav" trim 0 0.4; sox -n -r 16000 -c 1 -b 16 "$dir/b.wav" synth 0.8 sine 440 vol 0.5
sox -n -r 16000 -c 1 -b 16 "$dir/c.wav" trim 0 0.6; sox -n -r 16000 -c 1 -b 16 "$dir/d.wav" synth 0.8 sine 1000 vol 0.5
sox "$dir/a.wav" "$dir/b.wav" "$dir/c.wav" "$dir/d.wav" "$dir/c.wav" "$dir/tones.wav"
cat > "$dir/caller.yaml" <<YAML
version: 1
nodes:
  mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
  rec:     { type: wav-sink, path: $dir/heard.wav }
  play:    { type: file-source, path: $dir/tones.wav }
  speaker: { type: app-sink, capacity: 500 }
links:
  - mic -> rec
  - play -> speaker
YAML
echo
echo "| codec | round trip, two legs (ms, median of 5) | per leg (ms) |"
echo "|---|---:|---:|"
for codec in pcmu pcma g722 opus; do
  delays=()
  for _ in 1 2 3 4 5; do
    "$bin" call "sip:echo@127.0.0.1:$sip" "$dir/caller.yaml" --codecs "$codec" --log-level error > /dev/null
    delays+=("$(python3 Tests/Fixtures/sip/echo_check.py "$dir/tones.wav" "$dir/heard.wav" | python3 -c 'import json,sys; print(json.load(sys.stdin)["delay_ms"])')")
  done
  python3 -c "
import statistics; d = sorted([$(IFS=,; echo "${delays[*]}")]); m = statistics.median(d)
print('| $codec | %d (%s) | %.0f |' % (m, ', '.join(map(str, d)), m / 2))"
done
