#!/usr/bin/env bash
# The main job: installs what is missing, builds, and recognizes the bundled sample with the
# embedded PocketSphinx engine, printing events (volume, speech, transcripts) as JSON lines.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build
exec .build/debug/voicepipe run pipelines/recognizer-file.yaml "$@"
