#!/usr/bin/env bash
# The sanitizer runs CI makes after the tests:
#   1. ThreadSanitizer over every test target: the whole test bundle and `voicepipe` built with
#      -sanitize=thread in their own build directory (.build-tsan), then the runtime's tests (PipelineCoreTests)
#      and the concurrent parts of the other targets (the NATS client and its publish queue; the Whisper
#      decoder pool, the Tencent client, the digital human's queue, playback, RTP, barge-in, Wyoming, chat;
#      serve's sessions and routes, whose `voicepipe serve` processes are the sanitized binary too,
#      VOICEPIPE_TEST_BINARY). Every report, from the bundle or a process it starts, goes to a file
#      (TSAN_OPTIONS log_path) and any report fails the run;
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
# The ThreadSanitizer build's directory (VOICEPIPE_TSAN_SCRATCH to keep another).
tsan_scratch="${VOICEPIPE_TSAN_SCRATCH:-.build-tsan}"
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
  swift build --scratch-path "$tsan_scratch" --sanitize thread --build-tests
  swift build --scratch-path "$sanitizer_scratch" --product voicepipe-fuzz "${sanitizer_flags[@]}"
  swift build --scratch-path "$sanitizer_scratch" --product voicepipe "${sanitizer_flags[@]}"
  exit 0
fi
if [ $tsan = 1 ]; then
  echo "scripts/sanitize.sh: every test target's concurrent parts under ThreadSanitizer"
  swift build --scratch-path "$tsan_scratch" --sanitize thread --build-tests 2>&1 | grep -E "error|Compiling|Build" | tail -3
  # Whole targets and suites (type names) chosen for their threads, tasks and locks; suites that only
  # compute (codecs, DSP, parsers) or measure real-time behaviour (device timing, echo cancellation)
  # stay in the plain run. Skipped here: the hand-off's exhaustive exploration (single-threaded computation)
  # and the accept loop's CPU budget at the descriptor limit (a sanitized process spends several times the CPU).
  suites=(
    'PipelineCoreTests\.'
    'NATSClientTests\.(PublishQueueTests|JetStreamServerTests|PublishSpoolTests)'
    'NodesTests\.(IVHOutboundQueueTests|PlaybackQueueStateMachineTests|AudioPlaybackTests|WhisperScheduleTests|WhisperASRTests|TencentASRServerTests|RTPLoopbackTests|BargeInTests|WyomingEngineTests|TTSWyomingTests|ChatTests)'
    'RunnerTests\.(SessionLifecycleTests|SessionInboxTests|SessionOutboxTests|ServeTests|ServeTwilioTests|ServeAudioSocketTests|ServeSIPTests)'
  )
  filter=$(IFS='|'; echo "${suites[*]}")
  reports=$(mktemp -d /tmp/voicepipe-tsan.XXXXXX)
  [ -n "${PULSE_SERVER:-}" ] || { source scripts/pulse-env.sh start >/dev/null; trap 'scripts/pulse-env.sh stop >/dev/null 2>&1 || true' EXIT; }
  set +e
  # halt_on_error=0: a race is written to its file and the run goes on, so one run lists them all.
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1}:suppressions=$PWD/scripts/tsan-suppressions.txt:log_path=$reports/report"
  export VOICEPIPE_TEST_BINARY="$PWD/$tsan_scratch/debug/voicepipe"
  swift test --scratch-path "$tsan_scratch" --sanitize thread --skip-build --no-parallel --filter "$filter" \
    --skip 'everyInterleaving|acceptAtDescriptorLimit' --xunit-output "$reports/results.xml" > "$reports/tests.log" 2>&1
  status=$?
  # As in scripts/test.sh: one to three tests that failed (real-time tests slowed several times by the
  # sanitizer) are run once more, alone; a race report fails the run either way.
  if [ $status -ne 0 ] && [ -f "$reports/results-swift-testing.xml" ]; then
    mapfile -t failed < <(python3 - "$reports/results-swift-testing.xml" <<'PY'
import re, sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("failure") is not None:
        print(re.escape(f"{case.get('classname')}/{case.get('name')}"))
PY
    )
    if [ ${#failed[@]} -ge 1 ] && [ ${#failed[@]} -le 3 ]; then
      status=0
      for t in "${failed[@]}"; do
        echo "scripts/sanitize.sh: failed under ThreadSanitizer, running it once more: $t"
        swift test --scratch-path "$tsan_scratch" --sanitize thread --skip-build --no-parallel --filter "^$t" >> "$reports/tests.log" 2>&1 || status=1
      done
    fi
  fi
  set -e
  grep -E "^(✘|✔ Test run|✘ Test run)" "$reports/tests.log" | tail -20
  if compgen -G "$reports/report*" > /dev/null; then
    for r in "$reports"/report*; do echo "== $r"; head -60 "$r"; done
    echo "scripts/sanitize.sh: ThreadSanitizer reported $(ls "$reports"/report* | wc -l) time(s); reports in $reports" >&2
    exit 1
  fi
  [ $status -eq 0 ] || { echo "scripts/sanitize.sh: the tests failed under ThreadSanitizer (log: $reports/tests.log)" >&2; exit 1; }
  echo "scripts/sanitize.sh: no ThreadSanitizer report ($(grep -E '^✔ Test ' "$reports/tests.log" | grep -vc '^✔ Test run with') tests)"
  unset TSAN_OPTIONS VOICEPIPE_TEST_BINARY
fi
if [ $fuzz = 1 ]; then
  bench/libfuzz --seconds "$seconds"
  bench/asan-runs.sh
fi
