#!/usr/bin/env bash
# Builds bench/aec/harness.cpp with the echo canceller of Sources/CEchoCancel into .build/aec-harness
# (g++ directly, independent of SwiftPM). Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.build/aec-harness}
mkdir -p "$(dirname "$out")"
flags=(-std=c++17 -O2 -Wall -Wextra -Wno-unused-parameter
       -DWEBRTC_AUDIO_PROCESSING_ONLY_BUILD -DWEBRTC_POSIX -DWEBRTC_LINUX
       -I/usr/include/webrtc_audio_processing -ISources/CEchoCancel/include)
src=(Sources/CEchoCancel/aec.cpp bench/aec/harness.cpp)
if [ ! -x "$out" ] || [ -n "$(find "${src[@]}" Sources/CEchoCancel/include -newer "$out" 2>/dev/null)" ]; then
    g++ "${flags[@]}" "${src[@]}" -o "$out" -lwebrtc_audio_processing -lspeexdsp
fi
echo "$out"
