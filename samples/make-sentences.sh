#!/bin/sh
# Regenerates samples/sentences.wav: four English sentences spoken by flite's slt voice,
# 16 kHz mono 16-bit, with 0.5 s of silence before the first and 1 s after each one.
# Needs flite and sox (Debian: apt-get install flite sox).
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while IFS= read -r sentence; do
    i=$((i + 1))
    flite -voice slt -t "$sentence" -o "$tmp/s$i.wav"
    sox "$tmp/s$i.wav" -r 16000 -c 1 -b 16 "$tmp/p$i.wav" pad 0 1
done <<'SENTENCES'
the weather is nice today
please turn on the lights in the kitchen
i would like a cup of coffee
we need more information about the project
SENTENCES
sox "$tmp"/p*.wav -r 16000 -c 1 -b 16 sentences.wav pad 0.5 0
soxi sentences.wav
