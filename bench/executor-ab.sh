#!/usr/bin/env bash
# Late source wake-ups and media age with the file source on the real-time executor (default) or on
# the cooperative pool (executor: bulk, as before), same graph, same run:
#   bench/executor-ab.sh N realtime|bulk [SECONDS] [--set ID.KEY=VALUE ...]   (VOICEPIPE=path picks the binary)
# Needs the release build bench/run makes (.build-release).
cd "$(dirname "$0")/.."
n=$1; ex=$2; secs=${3:-20}
mkdir -p bench/out; stats=bench/out/executor-$n-$ex.txt
"${VOICEPIPE:-.build-release/release/voicepipe}" run bench/graphs/recognizer-style.yaml --instances "$n" --stats --quiet --set mic.executor=$ex "${@:4}" 2>"$stats" &
pid=$!
sleep 2
t0=$(awk '{print $14+$15}' /proc/$pid/stat); w0=$(date +%s.%N)
sleep "$secs"
t1=$(awk '{print $14+$15}' /proc/$pid/stat); w1=$(date +%s.%N)
kill -INT $pid; wait $pid || true
hz=$(getconf CLK_TCK)
cpu=$(echo "($t1 - $t0) / $hz / ($w1 - $w0)" | bc -l)
late=$( { grep -o 'late_frames=[0-9]*' "$stats" || true; } | awk -F= '{s += $2} END {print s+0}')
frames=$( awk '$1=="mic.out" && $2=="->" {s+=$4} END {print s+0}' "$stats")
p99=$(awk '$1=="mic.out" && $2=="->" {print $(NF-2)}' "$stats" | sort -n | tail -1)
sinkp99=$(awk '/end-to-end/ {f=1; next} f && /out:/ {print $4}' "$stats" | sort -n | awk '{a[NR]=$1} END {print a[int(NR*0.5)+1], a[NR]}')
printf "%s %s cpu=%.2f late=%s frames=%s mic_edge_max_p99=%s sink_p99_median_max=%s\n" "$n" "$ex" "$cpu" "$late" "$frames" "$p99" "$sinkp99"
