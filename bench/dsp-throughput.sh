#!/usr/bin/env bash
# x-realtime of voicepipe (file -> resample 48k->16k -> vad -> slicer -> opus-encode -> null-sink)
# versus gst-launch-1.0 (filesrc ! wavparse ! audioresample ! opusenc ! fakesink) on the same file.
# Usage: bench/dsp-throughput.sh [seconds-of-audio] [runs]     (release build: swift build -c release)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_OF_AUDIO=${1:-600}
RUNS=${2:-3}
BIN=${VOICEPIPE:-.build/release/voicepipe}
[ -x "$BIN" ] || swift build -c release --product voicepipe >/dev/null
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT

# Material: espeak-ng sentences separated by 1 s silences, with light noise, at 48 kHz mono,
# repeated to the requested length.
for i in 1 2 3; do
  espeak-ng -v en-us -w "$WORK/s$i.wav" "This is sentence number $i of the throughput benchmark for voice pipelines."
done
sox -n -r 22050 -c 1 -b 16 "$WORK/gap.wav" trim 0 1
sox "$WORK/s1.wav" "$WORK/gap.wav" "$WORK/s2.wav" "$WORK/gap.wav" "$WORK/s3.wav" "$WORK/gap.wav" "$WORK/unit.wav"
UNIT=$(soxi -D "$WORK/unit.wav")
REPEATS=$(python3 -c "import math; print(max(1, math.ceil($SECONDS_OF_AUDIO / $UNIT) - 1))")
sox "$WORK/unit.wav" -r 48000 -c 1 -b 16 "$WORK/clean.wav" repeat "$REPEATS"
sox -n -r 48000 -c 1 -b 16 "$WORK/noise.wav" synth "$(soxi -D "$WORK/clean.wav")" whitenoise vol 0.01
sox -m "$WORK/clean.wav" "$WORK/noise.wav" "$WORK/in.wav"
DUR=$(soxi -D "$WORK/in.wav")

now() { date +%s.%N; }
best_vp=999999; best_gst=999999
for r in $(seq "$RUNS"); do
  t0=$(now); INPUT="$WORK/in.wav" "$BIN" run bench/dsp-throughput.yaml >/dev/null; t1=$(now)
  vp=$(python3 -c "print($t1 - $t0)")
  t0=$(now)
  gst-launch-1.0 -q filesrc location="$WORK/in.wav" ! wavparse ! audioresample quality=4 \
    ! audio/x-raw,rate=16000,channels=1 ! opusenc bitrate=24000 audio-type=voice frame-size=20 ! fakesink
  t1=$(now)
  gst=$(python3 -c "print($t1 - $t0)")
  echo "run $r: voicepipe ${vp}s, gstreamer ${gst}s"
  best_vp=$(python3 -c "print(min($best_vp, $vp))"); best_gst=$(python3 -c "print(min($best_gst, $gst))")
done
python3 - "$DUR" "$best_vp" "$best_gst" <<'PY'
import sys
dur, vp, gst = map(float, sys.argv[1:])
print(f"audio: {dur:.1f} s at 48 kHz mono")
print(f"voicepipe: {vp:.3f} s = {dur / vp:.0f}x realtime (resample+vad+slicer+opus)")
print(f"gstreamer: {gst:.3f} s = {dur / gst:.0f}x realtime (audioresample+opusenc)")
print(f"ratio voicepipe/gstreamer speed: {gst / vp:.2f}")
PY
