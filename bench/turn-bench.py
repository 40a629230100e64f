#!/usr/bin/env python3
"""End-of-turn benchmark: `vad` with `turn_model: smart-turn` against the VAD alone at stop_ms 350
and 600, on the same audio in one run (one graph, the VADs side by side on one file source).

    bench/turn-bench.py [--voicepipe .build/debug/voicepipe] [--out bench/results/turn.md]

Material: sentences read by people (the LibriVox recordings of Debian's pocketsphinx-testdata) and
synthesized (flite voices slt, rms, awb; espeak-ng en-us). Each sentence appears twice: whole
("complete"), and with a pause of 300, 500, 700 or 900 ms (in turn) inserted at the word gap nearest
its middle ("paused": the first half is an unfinished sentence). Items are separated by 4 s of
silence; a quiet pink noise floor (50 dB below the speech) runs under the whole file.

Metrics per detector: false cut-offs (a paused item whose turn ended inside the pause) and the mean
end-of-turn delay (from the true end of speech to the moment the detector decided the turn was
over: speech_end media_ms + silence_ms), over all items, and split by material.
"""
import argparse, array, json, os, random, subprocess, sys, tempfile, wave

RATE = 16000
TESTDATA = "/usr/share/pocketsphinx/test/data/librivox"
SENTENCES = [
    "what is the weather like in paris today", "please turn on the lights in the kitchen",
    "i would like a cup of coffee with milk", "set a timer for ten minutes please",
    "can you tell me how to get to the station", "remind me to call my mother tomorrow morning",
    "play some music by the beatles in the living room", "how long does it take to drive to london",
]
PAUSES = [300, 500, 700, 900]
DETECTORS = {
    "vad350": "{ type: vad, engine: silero, stop_ms: 350 }",
    "vad600": "{ type: vad, engine: silero, stop_ms: 600 }",
    "turn200": "{ type: vad, engine: silero, stop_ms: 200, turn_model: smart-turn, max_pause_ms: 2000 }",
    "turn300": "{ type: vad, engine: silero, stop_ms: 300, turn_model: smart-turn, max_pause_ms: 2000 }",
    "turn300_t08": "{ type: vad, engine: silero, stop_ms: 300, turn_model: smart-turn, max_pause_ms: 2000, turn_threshold: 0.8 }",
    "scaled1000": "{ type: vad, engine: silero, stop_ms: 100, turn_model: smart-turn, turn_policy: scaled, max_pause_ms: 1000 }",
    "scaled1000_min100": "{ type: vad, engine: silero, stop_ms: 100, turn_model: smart-turn, turn_policy: scaled, min_pause_ms: 100, max_pause_ms: 1000 }",
    "scaled1500": "{ type: vad, engine: silero, stop_ms: 100, turn_model: smart-turn, turn_policy: scaled, max_pause_ms: 1500 }",
}


def read_wav(path):
    with wave.open(path) as w:
        rate, ch = w.getframerate(), w.getnchannels()
        a = array.array("h"); a.frombytes(w.readframes(w.getnframes()))
    if ch > 1: a = array.array("h", a[::ch])
    if rate != RATE:
        out = array.array("h")
        step = rate / RATE
        for i in range(int(len(a) / step)): out.append(a[int(i * step)])
        a = out
    return list(a)


def synth(tool, voice, text, tmp):
    path = os.path.join(tmp, "s.wav")
    if tool == "flite":
        subprocess.run(["flite", "-voice", voice, "-t", text, "-o", path], check=True)
    else:
        subprocess.run(["espeak-ng", "-v", voice, "-w", path + ".raw.wav", text], check=True)
        subprocess.run(["sox", path + ".raw.wav", "-r", "16000", "-c", "1", path], check=True)
    return read_wav(path)


def frames_db(x, ms=10):
    n = RATE * ms // 1000
    out = []
    for i in range(0, len(x) - n + 1, n):
        s = sum(v * v for v in x[i:i + n]) / n
        out.append(10 * __import__("math").log10(s + 1e-9))
    return out


def trim(x):
    db = frames_db(x); peak = max(db)
    on = [i for i, d in enumerate(db) if d > peak - 40]
    return x[on[0] * 160:(on[-1] + 1) * 160]


def split_point(x):
    """The middle of the quietest 10 ms run (a word gap) nearest the middle of the sentence."""
    db = frames_db(x); peak = max(db)
    quiet = [i for i, d in enumerate(db) if d < peak - 30 and len(db) * 0.25 < i < len(db) * 0.75]
    if not quiet:
        quiet = sorted(range(int(len(db) * 0.3), int(len(db) * 0.7)), key=lambda i: db[i])[:1]
    mid = len(db) / 2
    return min(quiet, key=lambda i: abs(i - mid)) * 160


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/debug/voicepipe")
    ap.add_argument("--out", default="bench/results/turn.md")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="turn-bench-")
    material = []
    for f in sorted(os.listdir(TESTDATA)):
        if f.endswith(".wav"): material.append(("people", trim(read_wav(os.path.join(TESTDATA, f)))))
    for voice in ["slt", "rms", "awb"]:
        for s in SENTENCES: material.append(("flite", trim(synth("flite", voice, s, tmp))))
    for s in SENTENCES: material.append(("espeak-ng", trim(synth("espeak", "en-us", s, tmp))))
    audio, items, k = [0] * RATE, [], 0
    for kind, x in material:
        # Complete.
        start = len(audio); audio += x
        items.append(dict(kind=kind, paused=False, start=start, end=len(audio))); audio += [0] * (4 * RATE)
        # Paused.
        cut = split_point(x); pause = PAUSES[k % len(PAUSES)]; k += 1
        start = len(audio); audio += x[:cut]; p0 = len(audio); audio += [0] * (pause * RATE // 1000); p1 = len(audio)
        audio += x[cut:]
        items.append(dict(kind=kind, paused=True, pause=pause, start=start, p0=p0, p1=p1, end=len(audio))); audio += [0] * (4 * RATE)
    # A pink noise floor 50 dB under the loudest speech, so silence is never digital zero.
    noise = os.path.join(tmp, "noise.wav")
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", noise, "synth", str(len(audio) / RATE), "pinknoise", "vol", "0.003"], check=True)
    n = read_wav(noise)
    mixed = array.array("h", (max(-32768, min(32767, a + b)) for a, b in zip(audio, n + [0] * len(audio))))
    wav = os.path.join(tmp, "turns.wav")
    with wave.open(wav, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE); w.writeframes(mixed.tobytes())
    events = os.path.join(tmp, "events.jsonl")
    graph = os.path.join(tmp, "turns.yaml")
    with open(graph, "w") as g:
        g.write("version: 1\nname: turn-bench\nnodes:\n")
        g.write(f"  src: {{ type: file-source, path: \"{wav}\" }}\n")
        for name, spec in DETECTORS.items(): g.write(f"  {name}: {spec}\n")
        g.write(f"  out: {{ type: jsonl-sink, path: \"{events}\" }}\n  drop: {{ type: null-sink }}\nlinks:\n")
        for name in DETECTORS: g.write(f"  - src -> {name} -> drop\n  - {name}.events -> out\n")
    subprocess.run([args.voicepipe, "run", graph], check=True)
    ends = {name: [] for name in DETECTORS}
    for line in open(events):
        e = json.loads(line)
        if e.get("event") == "speech_end" and e["node"] in ends:
            ends[e["node"]].append((e["media_ms"], e["media_ms"] + e["silence_ms"], e.get("reason"), e.get("probability")))
    def ms(s): return s * 1000 / RATE
    rows = []
    for name in DETECTORS:
        stats = {}
        for it in items:
            lo, hi = ms(it["start"]), ms(it["end"]) + 3500
            mine = [e for e in ends[name] if lo <= e[0] < hi]
            cut = it["paused"] and any(e[0] < ms(it["p1"]) for e in mine)
            final = [e for e in mine if e[0] >= ms(it["end"]) - 300]
            delay = (final[-1][1] - ms(it["end"])) if final else None
            for key in ("all", it["kind"]):
                s = stats.setdefault(key, dict(paused=0, cut=0, delays=[], missed=0, by_model=0))
                if it["paused"]: s["paused"] += 1; s["cut"] += cut
                if delay is None: s["missed"] += 1
                else: s["delays"].append(delay)
                if final and final[-1][2] == "turn_model": s["by_model"] += 1
        rows.append((name, stats))
    lines = ["# End of turn: Smart Turn v3.2 against the VAD alone", "",
             f"`bench/turn-bench.py`, one run: {len(items)} items ({len(items) // 2} sentences, each whole and with a "
             "300/500/700/900 ms pause at its middle word gap), 4 s apart, pink noise 50 dB down. All detectors are "
             "`vad engine: silero` on the same file source; `turnNNN` = `stop_ms: NNN, turn_model: smart-turn, "
             "max_pause_ms: 2000` (`_t08`: `turn_threshold: 0.8`); `scaledNNNN` = `stop_ms: 100, turn_model: smart-turn, "
             "turn_policy: scaled, max_pause_ms: NNNN` (the model's probability p, asked once at 100 ms of silence, sets the "
             "pause to wait out: max_pause_ms·(1 − p); `_min100`: `min_pause_ms: 100`). Delay = end-of-turn decision (speech_end media_ms + silence_ms) minus the true end "
             "of speech, in media time.", "",
             "| detector | material | false cut-offs (paused items) | mean delay ms | p90 delay ms | ended by the model | missed |",
             "|---|---|---|---|---|---|---|"]
    for name, stats in rows:
        for key in ["all", "people", "flite", "espeak-ng"]:
            s = stats.get(key)
            if not s: continue
            d = sorted(s["delays"])
            mean = sum(d) / len(d) if d else float("nan")
            p90 = d[int(0.9 * (len(d) - 1))] if d else float("nan")
            lines.append(f"| {name} | {key} | {s['cut']}/{s['paused']} ({100 * s['cut'] / max(1, s['paused']):.0f} %) | "
                         f"{mean:.0f} | {p90:.0f} | {s['by_model']} | {s['missed']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f: f.write(text)


if __name__ == "__main__":
    main()
