#!/usr/bin/env python3
"""End-of-turn benchmark: `vad` with `turn_model: smart-turn` against the VAD alone at stop_ms 350
and 600, on the same audio in one run (one graph, the VADs side by side on one file source).

    bench/turn-bench.py [--voicepipe .build/debug/voicepipe] [--out bench/results/turn.md]

Material (`--material`, any of):
- people: the LibriVox sentences of Debian's pocketsphinx-testdata (5);
- prompts: Asterisk's English prompts, recorded by one speaker (Debian's asterisk-core-sounds-en-wav,
  8 kHz, resampled by sox): the 91 that are one sentence of 7 words or more and at most 8 s long;
- flite (voices slt, rms, awb) and espeak-ng (en-us), synthesized from 8 sentences;
- prompts-es, prompts-fr, prompts-it, prompts-ru (not in the default): Asterisk's prompts in Spanish,
  French, Italian and Russian, chosen the same way (asterisk-core-sounds-LANG-wav).
"people" and "prompts" together are the recordings. Each sentence appears twice: whole ("complete"), and
with a pause of 300, 500, 700 or 900 ms (in turn) inserted at the quiet 10 ms nearest its middle ("paused").
Items are separated by 4 s of silence; a quiet pink noise floor (50 dB below the speech) runs under the
whole file.

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
    "default": "{ type: vad, engine: silero, turn_model: smart-turn }",
    "scaled1000": "{ type: vad, engine: silero, turn_model: smart-turn, turn_policy: scaled, max_pause_ms: 1000 }",
    "scaled1500": "{ type: vad, engine: silero, turn_model: smart-turn, turn_policy: scaled }",
    "scaled2000": "{ type: vad, engine: silero, turn_model: smart-turn, turn_policy: scaled, max_pause_ms: 2000 }",
    "threshold300": "{ type: vad, engine: silero, stop_ms: 300, turn_model: smart-turn, max_pause_ms: 2000 }",
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


KINDS = ["people", "prompts", "flite", "espeak-ng"]
# Asterisk's prompts in other languages, each from one speaker (Debian's asterisk-core-sounds-LANG-wav).
LANGUAGES = ["es", "fr", "it", "ru"]
ALL_KINDS = KINDS + [f"prompts-{lang}" for lang in LANGUAGES]


def recorded(kind): return kind == "people" or kind.startswith("prompts")


def prompts(tmp, lang="en", min_words=7, max_seconds=8):
    """Asterisk's prompts in `lang` (Debian's asterisk-core-sounds-LANG-wav, 8 kHz; English: one speaker):
    those whose transcript is one sentence of at least `min_words` words and that last at most
    `max_seconds` (Smart Turn hears the last 8 s), resampled to 16 kHz by sox."""
    import gzip, re
    text_file = f"/usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
    folder = f"/usr/share/asterisk/sounds/{lang}"
    if not os.path.exists(text_file) or not os.path.isdir(folder):
        sys.exit(f"no {text_file} or {folder}: install Debian's asterisk-core-sounds-{lang}-wav, or leave "
                 f"{'prompts' if lang == 'en' else 'prompts-' + lang} out of --material")
    found = []
    for line in gzip.open(text_file, "rt", encoding="utf-8", errors="replace"):
        if line.startswith(";") or ":" not in line: continue
        key, text = (s.strip() for s in line.split(":", 1))
        if "[" in text or re.search(r"[.?!]", text.rstrip(".?!")) or len(text.split()) < min_words: continue
        src = os.path.join(folder, key + ".wav")
        if not os.path.exists(src): continue
        dst = os.path.join(tmp, "prompt.wav")
        subprocess.run(["sox", src, "-r", str(RATE), "-c", "1", "-b", "16", dst], check=True)
        x = trim(read_wav(dst))
        if len(x) <= max_seconds * RATE: found.append(x)
    return found


def material(tmp, kinds=KINDS):
    """The sentences of each kind asked for, as (kind, samples)."""
    found = []
    if "people" in kinds:
        for f in sorted(os.listdir(TESTDATA)):
            if f.endswith(".wav"): found.append(("people", trim(read_wav(os.path.join(TESTDATA, f)))))
    if "prompts" in kinds:
        found += [("prompts", x) for x in prompts(tmp)]
    for lang in LANGUAGES:
        if f"prompts-{lang}" in kinds: found += [(f"prompts-{lang}", x) for x in prompts(tmp, lang)]
    if "flite" in kinds:
        for voice in ["slt", "rms", "awb"]:
            for s in SENTENCES: found.append(("flite", trim(synth("flite", voice, s, tmp))))
    if "espeak-ng" in kinds:
        for s in SENTENCES: found.append(("espeak-ng", trim(synth("espeak", "en-us", s, tmp))))
    return found


def build(tmp, kinds=KINDS):
    """One file: each sentence whole, then with a pause at its middle word gap, 4 s apart, over a pink
    noise floor 50 dB under the loudest speech. Returns the file and the items (sample positions)."""
    audio, items = [0] * RATE, []
    for k, (kind, x) in enumerate(material(tmp, kinds)):
        start = len(audio); audio += x
        items.append(dict(kind=kind, paused=False, start=start, end=len(audio))); audio += [0] * (4 * RATE)
        cut = split_point(x); pause = PAUSES[k % len(PAUSES)]
        start = len(audio); audio += x[:cut]; p0 = len(audio); audio += [0] * (pause * RATE // 1000); p1 = len(audio)
        audio += x[cut:]
        items.append(dict(kind=kind, paused=True, pause=pause, start=start, p0=p0, p1=p1, end=len(audio))); audio += [0] * (4 * RATE)
    noise = os.path.join(tmp, "noise.wav")
    subprocess.run(["sox", "-n", "-r", str(RATE), "-c", "1", "-b", "16", noise, "synth", str(len(audio) / RATE), "pinknoise", "vol", "0.003"], check=True)
    n = read_wav(noise)
    mixed = array.array("h", (max(-32768, min(32767, a + b)) for a, b in zip(audio, n + [0] * len(audio))))
    path = os.path.join(tmp, "turns.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE); w.writeframes(mixed.tobytes())
    return path, items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/debug/voicepipe")
    ap.add_argument("--out", default="bench/results/turn.md")
    ap.add_argument("--material", default=",".join(KINDS), help="comma-separated: " + ", ".join(ALL_KINDS))
    ap.add_argument("--detectors", default=",".join(DETECTORS), help="comma-separated, from: " + ", ".join(DETECTORS))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="turn-bench-")
    wanted = args.detectors.split(",")
    for name in wanted:
        if name not in DETECTORS: sys.exit(f"unknown detector {name}: choose from {', '.join(DETECTORS)}")
    detectors = {name: DETECTORS[name] for name in wanted}
    wav, items = build(tmp, args.material.split(","))
    events = os.path.join(tmp, "events.jsonl")
    graph = os.path.join(tmp, "turns.yaml")
    with open(graph, "w") as g:
        g.write("version: 1\nname: turn-bench\nnodes:\n")
        g.write(f"  src: {{ type: file-source, path: \"{wav}\" }}\n")
        for name, spec in detectors.items(): g.write(f"  {name}: {spec}\n")
        g.write(f"  out: {{ type: jsonl-sink, path: \"{events}\" }}\n  drop: {{ type: null-sink }}\nlinks:\n")
        for name in detectors: g.write(f"  - src -> {name} -> drop\n  - {name}.events -> out\n")
    subprocess.run([args.voicepipe, "run", graph], check=True)
    ends = {name: [] for name in detectors}
    for line in open(events):
        e = json.loads(line)
        if e.get("event") == "speech_end" and e["node"] in ends:
            ends[e["node"]].append((e["media_ms"], e["media_ms"] + e["silence_ms"], e.get("reason"), e.get("probability")))
    def ms(s): return s * 1000 / RATE
    rows = []
    for name in detectors:
        stats = {}
        for it in items:
            lo, hi = ms(it["start"]), ms(it["end"]) + 3500
            mine = [e for e in ends[name] if lo <= e[0] < hi]
            cut = it["paused"] and any(e[0] < ms(it["p1"]) for e in mine)
            final = [e for e in mine if e[0] >= ms(it["end"]) - 300]
            delay = (final[-1][1] - ms(it["end"])) if final else None
            for key in ("all", it["kind"]) + (("recordings",) if recorded(it["kind"]) else ()):
                s = stats.setdefault(key, dict(paused=0, cut=0, delays=[], missed=0, by_model=0))
                if it["paused"]: s["paused"] += 1; s["cut"] += cut
                if delay is None: s["missed"] += 1
                else: s["delays"].append(delay)
                if final and final[-1][2] == "turn_model": s["by_model"] += 1
        rows.append((name, stats))
    lines = ["# End of turn: Smart Turn v3.2 against the VAD alone", "",
             f"`bench/turn-bench.py --material {args.material}`, one run: {len(items)} items ({len(items) // 2} sentences, "
             "each whole and with a 300/500/700/900 ms pause at its middle word gap), 4 s apart, pink noise 50 dB down. "
             "All detectors are `vad engine: silero` on the same file source:", ""] + \
            [f"- `{name}`: `{spec}`" for name, spec in detectors.items()] + ["",
             "With a turn model, `stop_ms` defaults to 100 (when the model is asked), `turn_policy` to `threshold` "
             "(p ≥ 0.5 ends the turn, else it waits up to `max_pause_ms`) and `max_pause_ms` to 1500; with `turn_policy: "
             "scaled` the model's probability p sets the pause to wait out, max_pause_ms·(1 − p). "
             "Delay = end-of-turn decision (speech_end media_ms + silence_ms) minus the true end of speech, in media "
             "time. A false cut-off is a paused item whose turn ended inside the pause.", "",
             "| detector | material | false cut-offs (paused items) | mean delay ms | p90 delay ms | ended by the model | missed |",
             "|---|---|---|---|---|---|---|"]
    for name, stats in rows:
        for key in ["all", "recordings"] + ALL_KINDS:
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
