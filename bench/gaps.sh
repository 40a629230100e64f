#!/usr/bin/env bash
# Audible gaps: a 1 kHz tone played through pulse-sink (20 ms device buffer) while N recognizer-style
# pipelines run in the same process, recorded from the null sink's monitor with parec; then the same
# tone played by GStreamer (audiotestsrc ! pulsesink, 20 ms buffer) under the same voicepipe load.
# Needs the release build bench/run makes (.build-release) and the private daemon (scripts/pulse-env.sh).
# Usage: bench/gaps.sh N [SECONDS]   prints one line per player: gaps, CPU, late frames
set -euo pipefail
cd "$(dirname "$0")/.."
n=$1; secs=${2:-20}
vp=.build-release/release/voicepipe
out=bench/out/gaps-$n; mkdir -p "$out"
# One graph: the tone to the speaker, and N recognizer chains (file at 1x -> volume -> VAD -> slicer -> Opus -> null).
gen() {
  local with_tone=$1
  echo "version: 1"; echo "name: gaps"; echo "nodes:"
  [ "$with_tone" = 1 ] && echo "  tone: { type: tone-source, frequency: 1000, level_db: -12, realtime: true, rate: 48000 }" \
                       && echo "  spk:  { type: pulse-sink, latency_ms: 20, frame_ms: 10, drift_compensation: ${DRIFT:-true} }"
  for i in $(seq "$n"); do
    echo "  mic$i: { type: file-source, path: samples/sentences.wav, realtime: true, loop: true }"
    echo "  vol$i: { type: volume }"; echo "  vad$i: { type: vad, stop_ms: 600 }"
    echo "  sl$i: { type: slicer, mode: utterance, slice_ms: 600 }"; echo "  op$i: { type: opus-encode, bitrate: 16000 }"
    echo "  out$i: { type: null-sink }"
  done
  echo "links:"
  [ "$with_tone" = 1 ] && echo "  - tone -> spk"
  for i in $(seq "$n"); do
    echo "  - { from: mic$i, to: vol$i, capacity: 50, overflow: drop-oldest }"
    echo "  - vol$i -> vad$i -> sl$i -> op$i -> out$i"
  done
}
count_gaps() { python3 - "$1" <<'PY'
import sys, struct
data = open(sys.argv[1], "rb").read()
x = struct.unpack("<%dh" % (len(data) // 2), data[: len(data) // 2 * 2])
rate = 48000; win = rate // 1000          # 1 ms windows
rms = [ (sum(v * v for v in x[i:i + win]) / win) ** 0.5 for i in range(0, len(x) - win, win) ]
start = next((i for i, r in enumerate(rms) if r > 2000), None)
if start is None: print("no-tone"); sys.exit()
rms = rms[start + 500:]                    # skip the first 0.5 s (stream start)
end = max(i for i, r in enumerate(rms) if r > 2000)
rms = rms[: end - 200]                     # and the tail
gaps = 0; run = 0
for r in rms:
    if r < 1000: run += 1                   # well below the tone (about 5800 RMS at -12 dBFS)
    else:
        if run >= 2: gaps += 1
        run = 0
print(gaps, len(rms) / 1000.0)
PY
}
measure() {   # $1 = label, $2 = pid of the voicepipe process
  sleep 3
  local t0 w0 t1 w1
  t0=$(awk '{print $14+$15}' /proc/$2/stat); w0=$(date +%s.%N)
  timeout "$secs" parec -d vp_null.monitor --format=s16le --rate=48000 --channels=1 --raw > "$out/$1.raw" || true
  t1=$(awk '{print $14+$15}' /proc/$2/stat); w1=$(date +%s.%N)
  echo "$(echo "($t1 - $t0) / $(getconf CLK_TCK) / ($w1 - $w0)" | bc -l)"
}
# voicepipe plays the tone itself.
gen 1 > "$out/with-tone.yaml"
$vp run "$out/with-tone.yaml" --stats --quiet 2>"$out/vp-stats.txt" & pid=$!
cpu=$(measure voicepipe $pid); kill -INT $pid; wait $pid || true
late=$( { grep -o 'late_frames=[0-9]*' "$out/vp-stats.txt" || true; } | awk -F= '{s += $2} END {print s+0}')
printf "N=%s player=voicepipe gaps/seconds=%s cpu=%.2f late_frames=%s\n" "$n" "$(count_gaps "$out/voicepipe.raw")" "$cpu" "$late"
# GStreamer plays the tone, voicepipe runs the same load.
gen 0 > "$out/load.yaml"
$vp run "$out/load.yaml" --quiet 2>/dev/null & pid=$!
gst-launch-1.0 -q audiotestsrc freq=1000 volume=0.25 ! audio/x-raw,rate=48000,channels=1 ! pulsesink device=vp_null buffer-time=20000 latency-time=10000 >/dev/null 2>&1 & gpid=$!
cpu=$(measure gstreamer $pid); kill $gpid; kill -INT $pid; wait $pid || true
printf "N=%s player=gstreamer gaps/seconds=%s cpu=%.2f\n" "$n" "$(count_gaps "$out/gstreamer.raw")" "$cpu"
