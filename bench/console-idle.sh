#!/usr/bin/env bash
# What `voicepipe run --console` costs: the throughput graph (bench/dsp-throughput.yaml: file -> resample ->
# vad -> slicer -> opus-encode -> null-sink, as fast as it goes) run without a console, with a console no one
# watches, and with one viewer on the console's event stream (the chosen pipeline, 4 updates/s, audio levels
# measured on every edge). Runs alternate; medians of wall time and CPU time (user + system) are printed.
# Usage: bench/console-idle.sh [seconds-of-audio] [runs]   (VOICEPIPE=path of the binary; release by default)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_OF_AUDIO=${1:-600}
RUNS=${2:-7}
BIN=${VOICEPIPE:-.build/release/voicepipe}
[ -x "$BIN" ] || swift build -c release --product voicepipe >/dev/null
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
UNIT=$(soxi -D samples/sentences.wav)
REPEATS=$(python3 -c "import math; print(max(1, math.ceil($SECONDS_OF_AUDIO / $UNIT) - 1))")
sox samples/sentences.wav -r 48000 "$WORK/in.wav" repeat "$REPEATS"
PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")

one() {  # mode -> "wall cpu"
  local args=()
  [ "$1" != none ] && args=(--console "127.0.0.1:$PORT")
  local viewer=""; : >"$WORK/stream"
  if [ "$1" = viewer ]; then
    # Connects as soon as the console answers, and follows the stream until the run ends.
    ( for _ in $(seq 200); do curl -sN "http://127.0.0.1:$PORT/console/stream?session=dsp-throughput%230" >>"$WORK/stream" 2>/dev/null && break; sleep 0.005; done ) &
    viewer=$!
  fi
  INPUT="$WORK/in.wav" /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$BIN" run --quiet "${args[@]}" bench/dsp-throughput.yaml >/dev/null 2>"$WORK/err"
  [ -n "$viewer" ] && { kill "$viewer" 2>/dev/null || true; wait "$viewer" 2>/dev/null || true; }
  if [ "$1" = viewer ] && ! grep -q "event: stats" "$WORK/stream"; then echo "the viewer saw no stats" >&2; exit 1; fi
  awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$WORK/time"
}

declare -A wall cpu
for r in $(seq "$RUNS"); do
  for mode in none idle viewer; do
    read -r w c < <(one "$mode")
    wall[$mode]+="$w "; cpu[$mode]+="$c "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s–%s", lo, hi }'; }
DUR=$(soxi -D "$WORK/in.wav")
printf "%.0f s of 48 kHz audio, %s runs each, %s\n\n" "$DUR" "$RUNS" "$BIN"
printf "| console | wall s (median) | wall range | CPU s (median) | CPU range |\n|---|---|---|---|---|\n"
for mode in none idle viewer; do
  label=$([ $mode = none ] && echo "none" || ([ $mode = idle ] && echo "--console, no viewer" || echo "--console, one viewer"))
  printf "| %s | %s | %s | %s | %s |\n" "$label" "$(echo "${wall[$mode]}" | median)" "$(echo "${wall[$mode]}" | spread)" \
    "$(echo "${cpu[$mode]}" | median)" "$(echo "${cpu[$mode]}" | spread)"
done
