#!/bin/sh
# Mouth-to-ear latency of the intercom path on loopback (clicks in, clicks out): Opus at 0 and ±40 ms
# of jitter (a seeded UDP relay), AAC, and each with the aec node in the microphone path; the jitter
# buffer's min_ms from $JB_MIN_MS (default 20).
# Usage: bench/intercom-latency.sh   (from the package root)
set -e
swift build --build-tests >/dev/null
VOICEPIPE_BENCH=1 JB_MIN_MS=${JB_MIN_MS:-20} swift test --skip-build --filter IntercomBench 2>&1 | grep BENCH
