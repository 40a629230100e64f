#!/usr/bin/env bash
# Start-up: wall time of `voicepipe run bench/graphs/startup.yaml --quiet` (process start, graph load and
# validation, one 20 ms frame through to a sink, exit) against GStreamer doing the same
# (`gst-launch-1.0 -q audiotestsrc num-buffers=1 samplesperbuffer=320 ! fakesink`), best of N runs each,
# alternating, in several rounds, and the ratio per round.
#
#   bench/startup.sh [--binary .build-release/release/voicepipe] [--rounds 3] [--runs 10]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.build/debug/voicepipe rounds=3 runs=10
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) bin="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    *) echo "bench/startup.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench/startup.sh: no $bin (build it first, e.g. swift build -c release --scratch-path .build-release --product voicepipe)" >&2; exit 1; }
command -v gst-launch-1.0 >/dev/null || { echo "bench/startup.sh: gst-launch-1.0 is missing (apt-get install gstreamer1.0-tools)" >&2; exit 1; }
python3 - "$bin" "$rounds" "$runs" <<'PY'
import subprocess, sys, time
vp, rounds, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cmds = {"voicepipe": [vp, "run", "bench/graphs/startup.yaml", "--quiet"],
        "gstreamer": ["gst-launch-1.0", "-q", "audiotestsrc", "num-buffers=1", "samplesperbuffer=320", "!", "fakesink"]}
libs = len([l for l in subprocess.run(["ldd", vp], capture_output=True, text=True).stdout.splitlines() if "=>" in l or "ld-linux" in l])
print(f"{vp}: ldd lists {libs} libraries")
print("| round | voicepipe ms | GStreamer ms | ratio |")
print("|---|---:|---:|---:|")
for r in range(1, rounds + 1):
    best = {k: float("inf") for k in cmds}
    for _ in range(runs):
        for k, c in cmds.items():
            t0 = time.perf_counter()
            p = subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            t1 = time.perf_counter()
            if p.returncode != 0: sys.exit(f"{k} failed ({p.returncode}): {p.stderr.decode()[-400:]}")
            best[k] = min(best[k], t1 - t0)
    print(f"| {r} | {best['voicepipe'] * 1000:.1f} | {best['gstreamer'] * 1000:.1f} | {best['voicepipe'] / best['gstreamer']:.2f} |")
PY
