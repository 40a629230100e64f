#!/usr/bin/env bash
# The main job: installs what is missing, builds, and recognizes the bundled sample with Whisper
# (whisper.cpp in the process, tiny.en), printing events (volume, speech, transcripts) as JSON lines.
# Without the Whisper files (scripts/install-whisper.sh failed or was skipped), the graph says so in
# one line and recognizes with the embedded PocketSphinx instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-whisper.sh >/dev/null || echo "quickstart: Whisper could not be installed; the recognizer will use PocketSphinx" >&2
swift build
exec .build/debug/voicepipe run pipelines/recognizer-file.yaml "$@"
