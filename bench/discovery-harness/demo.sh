#!/usr/bin/env bash
# Two discovery-harness peers in the network namespaces of scripts/netns-pair.sh (needs root):
# both connect; B is killed with SIGKILL and A reports the loss; B restarts and both connect again;
# mdns_probe.py browses both; B then stops with SIGTERM (bye + goodbyes). Prints each step's timing
# and leaves the logs in a temporary directory. Tears the namespaces down at the end.
#   bench/discovery-harness/demo.sh [HARNESS]    default: the build of build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(readlink -f "${1:-$(bench/discovery-harness/build.sh)}")
dir=$(mktemp -d /tmp/discovery-demo.XXXXXX)
scripts/netns-pair.sh up >/dev/null

now() { date +%s.%N; }
# start NS NAME RTP LOG: runs the harness in NS; its pid (not that of `ip netns exec`) in LOG.pid.
start() {
    (ip netns exec "$1" sh -c 'echo $$ > "$3.pid"; exec "$4" "$1" "$2"' _ "$2" "$3" "$4" "$bin" >"$4" 2>&1 &)
    for _ in $(seq 50); do [ -s "$4.pid" ] && break; sleep 0.02; done
}
# wait_for LOG EVENT [N] [TIMEOUT]: waits until LOG holds N lines with "event":"EVENT"; prints the last one's t.
wait_for() {
    local n=${3:-1} end=$(( $(date +%s) + ${4:-10} ))
    while [ "$(grep -c "\"event\":\"$2\"" "$1" || true)" -lt "$n" ]; do
        [ "$(date +%s)" -le "$end" ] || { echo "timeout waiting for $2 in $1" >&2; cat "$1" >&2; return 1; }
        sleep 0.05
    done
    grep "\"event\":\"$2\"" "$1" | sed -n "${n}p" | python3 -c 'import json,sys; print(json.load(sys.stdin)["t"])'
}
since() { python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.2f} s')" "$1" "$2"; }
# exited LOG: waits up to 3 s for the harness of LOG to exit, then forgets its pid.
exited() {
    for _ in $(seq 150); do kill -0 "$(cat "$1.pid")" 2>/dev/null || break; sleep 0.02; done
    rm -f "$1.pid"
}
cleanup() {
    for f in "$dir"/*.pid; do [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/netns-pair.sh down >/dev/null
}
trap cleanup EXIT

t0=$(now); start vp-a A 5006 "$dir/a.log"; start vp-b B 5008 "$dir/b.log"
ta=$(wait_for "$dir/a.log" connected); tb=$(wait_for "$dir/b.log" connected)
echo "start A and B: A connected after $(since "$ta" "$t0"), B after $(since "$tb" "$t0")"

tk=$(now); kill -9 "$(cat "$dir/b.log.pid")"
td=$(wait_for "$dir/a.log" disconnected); tl=$(wait_for "$dir/a.log" peer_lost)
echo "kill -9 B: A disconnected after $(since "$td" "$tk") ($(grep -o '"reason":"[a-z ]*"' "$dir/a.log" | tail -1)), peer_lost after $(since "$tl" "$tk")"

exited "$dir/b.log"
tr=$(now); start vp-b B 5008 "$dir/b2.log"
ta=$(wait_for "$dir/a.log" connected 2); tb=$(wait_for "$dir/b2.log" connected)
echo "restart B: A connected again after $(since "$ta" "$tr"), B after $(since "$tb" "$tr")"

echo "mdns_probe.py browse in vp-b:"
ip netns exec vp-b python3 Tests/Fixtures/mdns_probe.py browse --timeout 2 _voicepipe-intercom._udp | sed 's/^/  /'

ts=$(now); kill -TERM "$(cat "$dir/b2.log.pid")"
td=$(wait_for "$dir/a.log" disconnected 2); tl=$(wait_for "$dir/a.log" peer_lost 2)
echo "SIGTERM B: A disconnected after $(since "$td" "$ts") ($(grep -o '"reason":"[a-z ]*"' "$dir/a.log" | tail -1)), peer_lost after $(since "$tl" "$ts"); B: $(grep -c '"event":"stopped"' "$dir/b2.log") stopped line"
exited "$dir/b2.log"
kill -TERM "$(cat "$dir/a.log.pid")"; wait_for "$dir/a.log" stopped >/dev/null; exited "$dir/a.log"
echo "logs: $dir"
