#!/usr/bin/env bash
# The test command: installs what is missing, starts a private PulseAudio daemon (null sink, ALSA
# routed through it), builds once and runs every test in one `swift test`, then stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build --build-tests
# shellcheck source=scripts/pulse-env.sh
source scripts/pulse-env.sh start
trap 'scripts/pulse-env.sh stop >/dev/null 2>&1 || true' EXIT
swift test --skip-build "$@"
