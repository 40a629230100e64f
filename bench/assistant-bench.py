#!/usr/bin/env python3
"""The voice loop, measured: pipelines/assistant.yaml on a real PulseAudio server with a simulated room.

Two null sinks stand for the room: the assistant plays on `spk`; an echo path (sox reading
spk.monitor: a delay, a low-pass and reverberation, as a loudspeaker heard by a microphone) plays
into `room`, where the person's recorded speech is played too (paplay); the assistant's microphone
is room.monitor. What the assistant plays (speaker.out) is its echo canceller's reference.

Trials, each in one running assistant:
  echo   the person asks; the answer plays through the echo path to its end. Counted: barge-ins and
         interruptions (should be 0), transcripts heard while the answer played (its own words).
  barge  the person asks; 1.5 s into the answer the person speaks over it. Counted: interruptions,
         and the delay from the onset of that speech (the VAD's media time on the capture clock)
         to the interruption.
Latency: questions with a short answer; the `latency` events of the graph, p50 / p95 per stage.

    bench/assistant-bench.py [--trials 20] [--latency 20] [--asr pocketsphinx|whisper] [--stop-ms 350]
                             [--out bench/results/assistant.md]

Needs: a built voicepipe (.build/release or .build/debug), flite, sox, paplay, pactl; PulseAudio started
by scripts/pulse-env.sh (the script starts it when it is not running).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUESTIONS = [
    "What is the weather like today?", "Can you tell me a joke?", "How far away is the moon?",
    "What time does the store open?", "Please set a timer for ten minutes.", "Who wrote the first computer program?",
    "How do I make a cup of tea?", "What is the capital of France?", "Turn on the lights in the kitchen.",
    "How many days are there in a leap year?",
]
VOICES = ["slt", "rms", "awb", "kal"]
INTERRUPTIONS = ["Stop. Tell me something else instead.", "Wait, that is not what I asked.", "No, no. Cancel that please."]
LONG_ANSWER = ("The weather today is sunny with a light breeze from the west. Later this evening some clouds will come in "
               "from the sea, and tomorrow it may rain a little in the morning before it clears up again.")
SHORT_ANSWER = "Sure. Here is what I found."


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def voicepipe():
    for c in ("release", "debug"):
        p = os.path.join(ROOT, ".build", c, "voicepipe")
        if os.path.exists(p):
            return p
    sys.exit("assistant-bench: build voicepipe first (swift build -c release)")


def say(text, voice, path):
    raw = path + ".raw.wav"
    sh("flite", "-voice", voice, "-t", text, "-o", raw)
    sh("sox", raw, "-r", "16000", "-c", "1", path)
    os.remove(raw)


def pulse_env():
    out = subprocess.run(["bash", "-c", f"cd {ROOT} && source scripts/pulse-env.sh start >/dev/null 2>&1 && env"],
                         capture_output=True, text=True, check=True).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {k: v for k, v in env.items() if k.startswith(("PULSE", "ALSA"))}


class Room:
    """spk and room null sinks and the echo path between them."""

    def __init__(self, env):
        self.env = {**os.environ, **env}
        self.modules = []
        for name in ("spk", "room"):
            r = subprocess.run(["pactl", "load-module", "module-null-sink", f"sink_name={name}", "rate=16000", "channels=1"],
                               capture_output=True, text=True, env=self.env)
            if r.returncode == 0:
                self.modules.append(r.stdout.strip())
        # The loudspeaker heard by the microphone: 40 ms of air and converters, a small loudspeaker's
        # low-pass, a room's reverberation, 6 dB down.
        self.echo = subprocess.Popen(["sox", "-q", "-t", "pulseaudio", "spk.monitor", "-t", "pulseaudio", "room",
                                      "lowpass", "3400", "highpass", "200", "reverb", "40", "50", "60", "gain", "-6",
                                      "delay", "0.04"], env=self.env, stderr=subprocess.DEVNULL)

    def play(self, path):
        return subprocess.Popen(["paplay", "-d", "room", path], env=self.env)

    def close(self):
        self.echo.terminate()
        for m in self.modules:
            subprocess.run(["pactl", "unload-module", m], env=self.env, capture_output=True)


class Chat:
    def __init__(self, port, answer):
        self.p = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "chat-server.py"), "--port", str(port),
                                   "--answer", answer], stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def close(self):
        self.p.terminate()


class Assistant:
    """pipelines/assistant.yaml running, its events read as they come."""

    def __init__(self, env, port, asr, stop_ms, events_path, extra=()):
        self.events = []
        self.lock = threading.Lock()
        args = [voicepipe(), "run", os.path.join(ROOT, "pipelines", "assistant.yaml"),
                "--set", "mic.type=pulse-source", "--set", "mic.device=room.monitor",
                "--set", "speaker.type=pulse-sink", "--set", "speaker.device=spk",
                "--set", f"chat.url=http://127.0.0.1:{port}", "--set", f"asr.engine={asr}",
                "--set", f"vad.stop_ms={stop_ms}"] + [x for kv in extra for x in ("--set", kv)]
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  env={**os.environ, **env}, cwd=ROOT)
        self.t0 = time.time()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            e["wall"] = time.time()
            with self.lock:
                self.events.append(e)

    def since(self, i, name=None):
        with self.lock:
            return [e for e in self.events[i:] if name is None or e["event"] == name]

    def mark(self):
        with self.lock:
            return len(self.events)

    def wait(self, i, name, timeout):
        end = time.time() + timeout
        while time.time() < end:
            got = self.since(i, name)
            if got:
                return got[0]
            time.sleep(0.02)
        return None

    def close(self):
        self.p.send_signal(2)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


def leading_silence(path):
    """Seconds before the first sample louder than -40 dBFS."""
    import wave
    import array
    with wave.open(path) as w:
        rate = w.getframerate()
        data = array.array("h", w.readframes(w.getnframes()))
    for i, x in enumerate(data):
        if abs(x) > 328:
            return i / rate
    return 0.0


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    f = int(k)
    return xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)


def answer_words(answer):
    return {w.strip(".,").lower() for w in answer.split() if len(w.strip(".,")) > 3}


def trials(args, env, tmp):
    chat = Chat(args.port, LONG_ANSWER)
    room = Room(env)
    a = Assistant(env, args.port, args.asr, args.stop_ms, None, args.set)
    time.sleep(3)
    rng = random.Random(7)
    rows = {"echo": [], "barge": []}
    words = answer_words(LONG_ANSWER)
    try:
        for n in range(args.trials * 2):
            kind = "echo" if n % 2 == 0 else "barge"
            q = os.path.join(tmp, f"q{n}.wav")
            say(rng.choice(QUESTIONS), rng.choice(VOICES), q)
            i = a.mark()
            room.play(q).wait()
            start = a.wait(i, "playback_start", 20)
            if start is None:
                rows[kind].append({"answered": False})
                continue
            row = {"answered": True}
            if kind == "barge":
                time.sleep(1.5)
                b = os.path.join(tmp, f"b{n}.wav")
                say(rng.choice(INTERRUPTIONS), rng.choice(VOICES), b)
                j = a.mark()
                played_at = time.time()
                room.play(b).wait()
                cut = a.wait(j, "interrupted", 3)
                row["interrupted"] = cut is not None
                if cut:
                    # From the first sound of the interruption (paplay's start plus the file's leading
                    # silence; the sound server's latency included) to the sink's interrupted event.
                    row["stop_ms"] = (cut["wall"] - played_at - leading_silence(b)) * 1000
                    # In the process: from the onset as the VAD heard it (its speech_start's ts less the
                    # speech it had heard) to the sink's interrupted.
                    starts = [e for e in a.since(j, "speech_start") if e["ts"] <= cut["ts"]]
                    if starts:
                        s0 = starts[-1]
                        row["stop_in_process_ms"] = (cut["ts"] - s0["ts"]) * 1000 + s0.get("speech_ms", 0)
                time.sleep(4)   # the person's turn is answered: let it play out a little
                a.wait(a.mark(), "never", 0)
                # Wait for the second answer to finish before the next trial.
                time.sleep(9)
            else:
                time.sleep(10.5)   # the whole answer, about 9.5 s, plays through the echo path
                during = a.since(i)
                row["barge_ins"] = len([e for e in during if e["event"] == "barge_in"])
                row["barge_in_at"] = [round(e["ts"] - start["ts"], 2) for e in during if e["event"] == "barge_in"]
                row["interrupted"] = any(e["event"] == "interrupted" for e in during)
                heard = [e.get("text", "") for e in during if e["event"] == "transcript" and e.get("final")
                         and e["ts"] > start["ts"]]
                row["own_words"] = sum(1 for t in heard for w in t.split() if w.strip(".,?").lower() in words)
                row["transcripts"] = heard
            rows[kind].append(row)
            print(kind, row, file=sys.stderr, flush=True)
    finally:
        a.close()
        room.close()
        chat.close()
    return rows


def latency(args, env, tmp):
    chat = Chat(args.port + 1, SHORT_ANSWER)
    room = Room(env)
    a = Assistant(env, args.port + 1, args.asr, args.stop_ms, None, args.set)
    time.sleep(3)
    rng = random.Random(11)
    got = []
    try:
        for n in range(args.latency):
            q = os.path.join(tmp, f"l{n}.wav")
            say(QUESTIONS[n % len(QUESTIONS)], VOICES[n % len(VOICES)], q)
            i = a.mark()
            room.play(q).wait()
            e = a.wait(i, "latency", 15)
            if e:
                got.append(e)
                print("latency", {k: e.get(k) for k in ("total_ms", "endpoint_ms", "asr_ms", "respond_ms", "tts_ms", "playback_ms")},
                      file=sys.stderr, flush=True)
            time.sleep(3 + rng.random())
    finally:
        a.close()
        room.close()
        chat.close()
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--latency", type=int, default=20)
    ap.add_argument("--asr", default="pocketsphinx")
    ap.add_argument("--stop-ms", type=int, default=350)
    ap.add_argument("--port", type=int, default=8093)
    ap.add_argument("--set", action="append", default=[], help="ID.KEY=VALUE passed to voicepipe run")
    ap.add_argument("--out")
    args = ap.parse_args()
    env = pulse_env()
    with tempfile.TemporaryDirectory() as tmp:
        rows = trials(args, env, tmp) if args.trials else {"echo": [], "barge": []}
        lat = latency(args, env, tmp) if args.latency else []
    lines = [f"# The voice loop (pipelines/assistant.yaml): asr {args.asr}, vad stop_ms {args.stop_ms}", "",
             f"Command: `bench/assistant-bench.py --trials {args.trials} --latency {args.latency} --asr {args.asr} --stop-ms {args.stop_ms}"
             + "".join(f" --set {kv}" for kv in args.set) + "`",
             f"Binary: {voicepipe()}", ""]
    echo = [r for r in rows["echo"] if r.get("answered")]
    barge = [r for r in rows["barge"] if r.get("answered")]
    if rows["echo"] or rows["barge"]:
        lines += ["## Echo and barge-in (answer played through a simulated loudspeaker echo path)", "",
                  "| trials | answered | barge-ins / interruptions | own words transcribed | stop after the first sound of the interruption, ms p50 / p95 / max | stop after the onset the VAD heard, ms p50 / p95 |",
                  "|---|---|---|---|---|---|"]
        lines.append(f"| echo only: {len(rows['echo'])} | {len(echo)} | {sum(r['barge_ins'] for r in echo)} / "
                     f"{sum(1 for r in echo if r['interrupted'])} | {sum(r['own_words'] for r in echo)} | — | — |")
        stops = [r["stop_ms"] for r in barge if "stop_ms" in r]
        inproc = [r["stop_in_process_ms"] for r in barge if "stop_in_process_ms" in r]
        lines.append(f"| person speaks over it: {len(rows['barge'])} | {len(barge)} | {sum(1 for r in barge if r['interrupted'])} interrupted | — | "
                     f"{pct(stops, .5):.0f} / {pct(stops, .95):.0f} / {max(stops) if stops else float('nan'):.0f} | {pct(inproc, .5):.0f} / {pct(inproc, .95):.0f} |")
        lines.append("")
    if lat:
        lines += ["## Voice-to-voice latency (end of speech → first answer sample leaving the loudspeaker)", "",
                  f"{len(lat)} turns of {args.latency}; a local chat server answering at once.", "",
                  "| stage | p50 ms | p95 ms |", "|---|---|---|"]
        for k in ("total_ms", "endpoint_ms", "asr_ms", "respond_ms", "tts_ms", "playback_ms"):
            xs = [e[k] for e in lat if isinstance(e.get(k), (int, float))]
            lines.append(f"| {k[:-3]} | {pct(xs, .5):.0f} | {pct(xs, .95):.0f} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
