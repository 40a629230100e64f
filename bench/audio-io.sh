#!/usr/bin/env bash
# Capture benchmarks for alsa-source and pulse-source against the private PulseAudio daemon.
#
#   swift build                          # or: swift build -c release && VOICEPIPE=.build/release/voicepipe
#   source scripts/pulse-env.sh start
#   bench/audio-io.sh                    # prints a Markdown table
#
# 1. Loop latency: a 100 ms tone burst is written into a running `pacat` playback stream (10 ms
#    buffer) on the null sink; the graph `mic (frame_ms 10) -> volume (interval_ms 10) -> jsonl`
#    reports the level; the time from the write to the first `volume` line above -30 dBFS on
#    stdout is the loop latency (playback + sink + monitor + capture + graph + stdout). The same
#    loop with `pacat -r` (10 ms) as the recorder is the reference; the difference is what the
#    capture node and graph add over a plain libpulse reader.
# 2. CPU per capture stream: user+system CPU of `voicepipe run` capturing 16 kHz mono in 20 ms
#    frames into a null-sink for 10 s, against `tone-source` (realtime) -> null-sink as baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
VOICEPIPE="${VOICEPIPE:-.build/debug/voicepipe}"
[ -n "${PULSE_SERVER:-}" ] || { echo "run: source scripts/pulse-env.sh start" >&2; exit 1; }
export VOICEPIPE
python3 - <<'PY'
import os, subprocess, threading, time, json, math, struct, tempfile, statistics

vp = os.environ["VOICEPIPE"]
tmp = tempfile.mkdtemp()
RATE = 16000
CHUNK = RATE // 100  # 10 ms
silence = b"\0" * CHUNK * 2
burst = b"".join(struct.pack("<h", int(12000 * math.sin(2 * math.pi * 1000 * i / RATE))) for i in range(CHUNK * 10))

class Player:
    """A pacat playback stream fed with paced 10 ms chunks; inject() queues a burst."""
    def __init__(self):
        self.p = subprocess.Popen(["pacat", "--playback", "--raw", "--format=s16le", f"--rate={RATE}", "--channels=1",
                                   "--latency-msec=10", "-d", "vp_null"], stdin=subprocess.PIPE)
        self.pending = []
        self.lock = threading.Lock()
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True); self.t.start()
    def run(self):
        nxt = time.monotonic()
        while not self.stop:
            with self.lock:
                chunk = self.pending.pop(0) if self.pending else silence
            self.p.stdin.write(chunk); self.p.stdin.flush()
            nxt += 0.01
            time.sleep(max(0, nxt - time.monotonic()))
    def inject(self):
        with self.lock:
            self.pending = [burst[i:i + CHUNK * 2] for i in range(0, len(burst), CHUNK * 2)]
        return time.monotonic()
    def close(self):
        self.stop = True; self.t.join(); self.p.kill(); self.p.wait()

def loop_latency(reader_cmd, detect, runs=15):
    player = Player()
    rec = subprocess.Popen(reader_cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    hits = []
    state = {"t0": None}
    def reader():
        for item in detect(rec.stdout):
            if state["t0"] is not None:
                hits.append(item - state["t0"]); state["t0"] = None
    th = threading.Thread(target=reader, daemon=True); th.start()
    time.sleep(1.5)
    for _ in range(runs):
        time.sleep(0.1)  # align the injection to the player's chunk boundary loosely
        state["t0"] = None
        t = player.inject()
        state["t0"] = t
        time.sleep(0.5)
    rec.kill(); rec.wait(); player.close()
    return [h * 1000 for h in hits]

def detect_jsonl(stream):
    for line in stream:
        now = time.monotonic()
        try: e = json.loads(line)
        except Exception: continue
        if e.get("event") == "volume" and e.get("db", -100) > -30:
            yield now

def detect_raw(stream):
    while True:
        b = stream.read(CHUNK * 2 // 2)  # 5 ms reads
        if not b: return
        now = time.monotonic()
        peak = max(abs(v) for v in struct.unpack(f"<{len(b)//2}h", b)) if len(b) >= 2 else 0
        if peak > 3000: yield now

def graph(source, frame_ms, extra=""):
    path = os.path.join(tmp, f"{source}-{frame_ms}.yaml")
    with open(path, "w") as f:
        f.write(f"""version: 1
nodes:
  mic: {{ type: {source}, rate: 16000, channels: 1, frame_ms: {frame_ms}{extra} }}
  vol: {{ type: volume, interval_ms: {frame_ms} }}
  out: {{ type: jsonl-sink, path: "-" }}
  sink: {{ type: null-sink }}
links:
  - mic -> vol -> sink
  - vol.events -> out
""")
    return path

def summary(xs):
    xs = sorted(xs)
    if not xs: return "n/a"
    return f"{statistics.median(xs):.0f} (min {xs[0]:.0f}, max {xs[-1]:.0f}, n={len(xs)})"

rows = []
ref = loop_latency(["pacat", "--record", "--raw", "--format=s16le", f"--rate={RATE}", "--channels=1", "--latency-msec=10", "-d", "vp_null.monitor"], detect_raw)
rows.append(("pacat -r (reference, 10 ms)", summary(ref)))
for src in ["pulse-source", "alsa-source"]:
    lat = loop_latency([vp, "run", "-q", graph(src, 10, ", latency_ms: 20")] if False else [vp, "run", graph(src, 10, ", latency_ms: 20")], detect_jsonl)
    rows.append((f"{src} (frame_ms 10, latency_ms 20)", summary(lat)))
print("| recorder | loop latency, ms: median (min, max) |\n|---|---|")
for r in rows: print(f"| {r[0]} | {r[1]} |")

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f: parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

def cpu_run(path, seconds=10):
    p = subprocess.Popen([vp, "run", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    c0 = cpu_seconds(p.pid); t0 = time.monotonic()
    time.sleep(seconds)
    c1 = cpu_seconds(p.pid); t1 = time.monotonic()
    p.terminate(); p.wait()
    return 100 * (c1 - c0) / (t1 - t0)

def cpu_graph(source):
    path = os.path.join(tmp, f"cpu-{source}.yaml")
    extra = ", wave: silence" if source == "tone-source" else ""
    with open(path, "w") as f:
        f.write(f"""version: 1
nodes:
  mic: {{ type: {source}, rate: 16000, channels: 1, frame_ms: 20{extra} }}
  sink: {{ type: null-sink }}
links:
  - mic -> sink
""")
    return path

print("\n| source -> null-sink, 16 kHz mono, 20 ms frames | CPU, % of one core (10 s) |\n|---|---|")
for src in ["tone-source", "pulse-source", "alsa-source"]:
    print(f"| {src}{' (baseline, paced)' if src == 'tone-source' else ''} | {cpu_run(cpu_graph(src)):.2f} |")
PY
