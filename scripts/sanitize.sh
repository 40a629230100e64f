#!/usr/bin/env bash
# The sanitizer runs CI makes after the tests:
#   1. the runtime's tests (PipelineCore: edges, executors, the scheduler, timing) built and run under
#      ThreadSanitizer, in their own build directory (.build-tsan), on the PipelineCore package alone;
#   2. every fuzz target under libFuzzer with AddressSanitizer, bench/libfuzz, SECONDS per target
#      (default 10);
#   3. voicepipe itself under AddressSanitizer on the paths that drive C libraries with real media
#      (PocketSphinx, FFmpeg, Opus, AAC, both echo cancellers, RTP, serve with concurrent sessions),
#      bench/asan-runs.sh, sharing step 2's build.
# Steps 2 and 3 build the C and C++ code (the shims, libyaml, BoringSSL, llhttp) with AddressSanitizer and
# UndefinedBehaviorSanitizer too (bench/sanitizer-flags.sh); Swift has no UBSan of its own: it traps on
# overflow and out-of-bounds access in every build, which the fuzzers count as crashes.
# A sanitizer report fails the run.
# --build-only builds what steps 1-3 run and stops (CI builds them beside the tests; see .ci/run).
#   scripts/sanitize.sh [--tsan-only | --fuzz-only | --build-only] [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."
tsan=1 fuzz=1 seconds=10 build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tsan-only) fuzz=0; shift ;;
    --fuzz-only) tsan=0; shift ;;
    --build-only) build_only=1; shift ;;
    --seconds) seconds="$2"; shift 2 ;;
    *) echo "scripts/sanitize.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ $build_only = 1 ]; then
  # shellcheck source=bench/sanitizer-flags.sh
  source bench/sanitizer-flags.sh
  swift build --package-path Sources/PipelineCore --scratch-path .build-tsan --sanitize thread --build-tests
  swift build --scratch-path "$sanitizer_scratch" --product voicepipe-fuzz "${sanitizer_flags[@]}"
  swift build --scratch-path "$sanitizer_scratch" --product voicepipe "${sanitizer_flags[@]}"
  exit 0
fi
if [ $tsan = 1 ]; then
  echo "scripts/sanitize.sh: the runtime's tests under ThreadSanitizer"
  # halt_on_error: the first data race fails the run (a report is not a warning).
  # (The hand-off's exhaustive exploration is single-threaded computation: nothing for the sanitizer to see.)
  TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}" \
    swift test --package-path Sources/PipelineCore --scratch-path .build-tsan --sanitize thread --no-parallel --skip everyInterleaving 2>&1 \
    | grep -vE "^(◇|↳|✔ Test [^r])" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "scripts/sanitize.sh: ThreadSanitizer run failed" >&2; exit 1; }
fi
if [ $fuzz = 1 ]; then
  bench/libfuzz --seconds "$seconds"
  bench/asan-runs.sh
fi
