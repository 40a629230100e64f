#!/bin/sh
# CPU of one duplex call: two voicepipe processes run pipelines/intercom.yaml against each other on
# loopback for LEN seconds (file in, WAV out); prints each process's user+sys CPU from /proc.
# Usage: bench/intercom-cpu.sh [seconds]   (from the package root, after swift build; debug build
# unless VOICEPIPE=.build/release/voicepipe)
set -e
LEN=${1:-20}
BIN=${VOICEPIPE:-.build/debug/voicepipe}
DIR=$(mktemp -d)
sox -n -r 48000 -c 1 -b 16 "$DIR/a.wav" synth "$LEN" sine 300-1800 vol 0.3
sox -n -r 48000 -c 1 -b 16 "$DIR/b.wav" synth "$LEN" sine 1800-300 vol 0.3
LOCAL_PORT=47106 PEER_PORT=47108 BIND=127.0.0.1 "$BIN" run pipelines/intercom.yaml --quiet \
  --set mic.type=file-source --set mic.path="$DIR/a.wav" --set mic.realtime=true \
  --set spk.type=wav-sink --set spk.path="$DIR/a-hears.wav" & PA=$!
LOCAL_PORT=47108 PEER_PORT=47106 BIND=127.0.0.1 "$BIN" run pipelines/intercom.yaml --quiet \
  --set mic.type=file-source --set mic.path="$DIR/b.wav" --set mic.realtime=true \
  --set spk.type=wav-sink --set spk.path="$DIR/b-hears.wav" & PB=$!
sleep "$LEN"
TCK=$(getconf CLK_TCK)
for p in $PA $PB; do
  set -- $(cut -d' ' -f14,15 /proc/$p/stat)
  echo "pid $p: $(echo "scale=3; ($1+$2)/$TCK" | bc) s CPU in ${LEN} s -> $(echo "scale=2; 100*($1+$2)/$TCK/$LEN" | bc)% of one core"
done
kill -TERM $PA $PB; wait $PA $PB || true
rm -rf "$DIR"
