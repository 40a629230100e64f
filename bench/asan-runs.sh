#!/usr/bin/env bash
# voicepipe itself under AddressSanitizer, on the paths that drive C libraries with real media:
#   bench/asan-runs.sh
# Builds `voicepipe` with -sanitize=address (and libFuzzer's coverage, so that it shares bench/libfuzz's
# build directory, .build-libfuzzer), then runs, each checked for its result as well as for sanitizer
# reports:
#   1. pipelines/recognizer-file.yaml with PocketSphinx on samples/sentences.wav (transcripts);
#   2. the same graph on every file of bench/fuzz-corpus/ffmpeg (FFmpeg: MP3, FLAC, Vorbis, Opus, AAC, AIFF);
#   3. two intercom processes talking over loopback RTP, Opus with the WebRTC canceller, then AAC with speexdsp's;
#   4. `voicepipe serve` with four Wyoming sessions at once (PocketSphinx decoders made and used in parallel),
#      a client sending garbage and one hanging up mid-stream, then a drain on SIGTERM.
# A sanitizer report, a wrong result or a non-zero exit fails the run. Logs: .build-libfuzzer/asan-runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/sanitizer-flags.sh
source bench/sanitizer-flags.sh
scratch=$sanitizer_scratch
flags=("${sanitizer_flags[@]}")
echo "bench/asan-runs: building voicepipe with AddressSanitizer ($scratch)"
swift build --scratch-path "$scratch" --product voicepipe "${flags[@]}" 2>&1 | grep -E "error|complete!" || true
bin="$(swift build --scratch-path "$scratch" --show-bin-path "${flags[@]}")/voicepipe"
[ -x "$bin" ] || { echo "bench/asan-runs: the build failed (no $bin)" >&2; exit 1; }
python=.deps/venv/bin/python3
[ -x "$python" ] || python=python3
logs="$scratch/asan-runs"
rm -rf "$logs"; mkdir -p "$logs"
# Leaks are not checked here: libraries keep process-lifetime allocations, and Swift's packed pointers
# hide references from LeakSanitizer (bench/lsan.supp). halt_on_error: the first report ends the process.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:allocator_may_return_null=1:suppressions=$PWD/bench/asan.supp"
# Swift's crash handler reads the crashed stack, which AddressSanitizer would report instead of the crash.
export SWIFT_BACKTRACE=enable=no
failures=0
fail() { echo "bench/asan-runs: FAILED: $*" >&2; failures=$((failures + 1)); }
check_log() {  # name, log file
  if grep -q "ERROR: AddressSanitizer\|runtime error:\|SUMMARY: .*Sanitizer" "$2"; then
    fail "$1: sanitizer report"; grep -A25 "ERROR: AddressSanitizer\|runtime error:" "$2" | head -40 >&2
  fi
}

# 1. The recognizer on the bundled sample.
if ASR=pocketsphinx "$bin" run pipelines/recognizer-file.yaml --quiet >"$logs/recognizer.out" 2>"$logs/recognizer.err"; then
  words=$(grep -oi "garage\|kitchen\|weather\|lights\|door" "$logs/recognizer.out" | wc -l)
  [ "$words" -gt 0 ] || fail "recognizer: no expected word in the transcripts ($(head -c 300 "$logs/recognizer.out"))"
else
  fail "recognizer: exit $?"
fi
check_log recognizer "$logs/recognizer.err"
echo "bench/asan-runs: recognizer done"

# 2. Every compressed seed through FFmpeg into the same graph.
for f in bench/fuzz-corpus/ffmpeg/*; do
  name=$(basename "$f")
  if ! INPUT="$f" ASR=pocketsphinx "$bin" run pipelines/recognizer-file.yaml --quiet \
       --set mic.type=file-source >"$logs/$name.out" 2>"$logs/$name.err"; then
    # The graph wants 16 kHz mono; a seed in another format is refused with a message, which is fine.
    grep -q "16 kHz\|16000\|resample" "$logs/$name.err" || fail "ffmpeg $name: exit without a format message"
  fi
  check_log "ffmpeg $name" "$logs/$name.err"
done
echo "bench/asan-runs: compressed input done"

# 3. Intercom over loopback, both ways.
sox -n -r 48000 -c 1 -b 16 "$logs/a.wav" synth 3 sine 300-1500 vol 0.4
sox -n -r 48000 -c 1 -b 16 "$logs/b.wav" synth 3 sine 1400-400 vol 0.4
for combo in "opus webrtc" "aac speex"; do
  set -- $combo
  for side in a b; do
    if [ $side = a ]; then local_port=5606 peer_port=5608; else local_port=5608 peer_port=5606; fi
    PEER=127.0.0.1 LOCAL_PORT=$local_port PEER_PORT=$peer_port CODEC=$1 AEC=$2 \
      "$bin" run pipelines/intercom.yaml --quiet --set mic.type=file-source --set mic.path="$logs/$side.wav" \
      --set mic.realtime=true --set spk.type=wav-sink --set spk.path="$logs/$side-hears-$1.wav" \
      >"$logs/intercom-$1-$side.out" 2>"$logs/intercom-$1-$side.err" &
    eval "pid_$side=\$!"
  done
  sleep 5
  kill -INT "$pid_a" "$pid_b" 2>/dev/null || true
  for side in a b; do
    eval "pid=\$pid_$side"
    wait "$pid" || fail "intercom $1 $side: exit $?"
    check_log "intercom $1 $side" "$logs/intercom-$1-$side.err"
    heard=$(sox "$logs/$side-hears-$1.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
    awk -v r="${heard:-0}" 'BEGIN { exit !(r > 0.05) }' || fail "intercom $1 $side heard nothing (RMS ${heard:-none})"
  done
done
echo "bench/asan-runs: intercom done"

# 4. serve: concurrent Wyoming sessions, hostile clients, drain.
SERVE_PORT=18390 WYOMING_PORT=18391 SERVE_HOST=127.0.0.1 "$bin" serve pipelines/serve.yaml \
  >"$logs/serve.out" 2>"$logs/serve.err" &
serve=$!
for _ in $(seq 1 100); do
  (exec 3<>/dev/tcp/127.0.0.1/18391) 2>/dev/null && break
  sleep 0.2
done
sox samples/sentences.wav -r 16000 -c 1 -b 16 "$logs/speech16k.wav" trim 0 6
clients=()
for i in 1 2 3 4; do
  "$python" Tests/Fixtures/wyoming_asr_client.py 127.0.0.1 18391 "$logs/speech16k.wav" >"$logs/client-$i.out" 2>&1 &
  clients+=($!)
done
# Garbage, and a session cut off mid-stream.
printf 'this is not wyoming\n{"type": 7}\n\xff\xfe\n' | timeout 5 bash -c 'cat > /dev/tcp/127.0.0.1/18391' 2>/dev/null || true
printf '{"type":"audio-start","data":{"rate":16000,"width":2,"channels":1}}\n{"type":"audio-chunk","data":{"rate":16000,"width":2,"channels":1},"payload_length":64000}\n' \
  | timeout 5 bash -c 'cat > /dev/tcp/127.0.0.1/18391' 2>/dev/null || true
for c in "${clients[@]}"; do wait "$c" || true; done
for i in 1 2 3 4; do
  grep -q "^transcript .*[a-z]" "$logs/client-$i.out" || fail "serve: client $i got no transcript ($(tail -c 300 "$logs/client-$i.out"))"
done
kill -TERM "$serve"
wait "$serve" || fail "serve: exit $? after SIGTERM"
check_log serve "$logs/serve.err"
echo "bench/asan-runs: serve done"

if [ $failures -gt 0 ]; then
  echo "bench/asan-runs: $failures failure(s); logs in $logs" >&2
  exit 1
fi
echo "bench/asan-runs: no sanitizer report; recognizer, $(ls bench/fuzz-corpus/ffmpeg | wc -l) compressed files, intercom (Opus+WebRTC AEC, AAC+speex AEC), serve (4 concurrent Wyoming sessions, 2 hostile clients, drain)"
