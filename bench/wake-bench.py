#!/usr/bin/env python3
"""Wake word benchmark for the `wake` node: detection rate on synthesized wake phrases in pink noise
at 10 dB SNR, and false accepts per hour on speech and noise without the phrase.

    bench/wake-bench.py [--voicepipe .build/debug/voicepipe] [--hours 2] [--threshold T] [--configs ...] [--out bench/results/wake.md]

Positives: "hey jarvis" and "alexa" from flite (voices slt, rms, awb, kal; duration stretch 0.8, 1.0,
1.25) and espeak-ng (en-us, en, en-us+f3, en+m3; 140, 175, 210 words per minute), 24 per word, each
2.5 s from the next, in pink noise at 10 dB below the phrase's speech level. A detection of the
right word within 1.5 s after the phrase ends counts.
Negatives: half speech (Debian's license texts read by the same eight voices, in order, plus the
LibriVox recordings of pocketsphinx-testdata), half noise (pink, brown and white at -50 to -20 dBFS in
one-minute pieces), `--hours` long in all. Every `wake` event there is a false accept. Both files go
through `file-source -> wake (words hey_jarvis, alexa; refractory_ms 2000)`, once per configuration
(`--configs`), with `threshold` only when `--threshold` is given (else each engine's default).
"""
import argparse, glob, json, os, subprocess, tempfile, wave
import numpy as np

RATE = 16000
PHRASES = {"hey_jarvis": "hey jarvis", "alexa": "alexa", "hey_mycroft": "hey mycroft", "okay_nabu": "okay nabu"}
WORDS = {w: PHRASES[w] for w in ["hey_jarvis", "alexa"]}
FLITE = [(v, s) for v in ["slt", "rms", "awb", "kal"] for s in [0.8, 1.0, 1.25]]
ESPEAK = [(v, s) for v in ["en-us", "en", "en-us+f3", "en+m3"] for s in [140, 175, 210]]


def read(path):
    with wave.open(path) as w:
        r, ch = w.getframerate(), w.getnchannels()
        a = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
    if ch > 1: a = a[::ch]
    if r != RATE: a = np.interp(np.arange(0, len(a), r / RATE), np.arange(len(a)), a).astype(np.float32)
    return a


def say(engine, voice, speed, text, tmp):
    p = os.path.join(tmp, "say.wav")
    if engine == "flite":
        subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={speed}", "-t", text, "-o", p], check=True)
    else:
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", p, text], check=True)
    a = read(p)
    loud = np.nonzero(np.abs(a) > 0.02 * np.abs(a).max())[0]
    return a[loud[0]:loud[-1] + 1]


def pink(n, seed):
    rng = np.random.default_rng(seed)
    f = np.fft.rfft(rng.standard_normal(n))
    f /= np.sqrt(np.maximum(np.arange(len(f)), 1))
    x = np.fft.irfft(f, n)
    return x / np.sqrt(np.mean(x ** 2))


def write(path, x):
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE)
        w.writeframes(np.clip(x, -32768, 32767).astype(np.int16).tobytes())


def wakes(voicepipe, wav, tmp, threshold, extra=""):
    events = os.path.join(tmp, "events.jsonl")
    graph = os.path.join(tmp, "wake.yaml")
    with open(graph, "w") as g:
        g.write(f"""version: 1
name: wake-bench
nodes:
  src: {{ type: file-source, path: "{wav}" }}
  wake: {{ type: wake, words: [{", ".join(WORDS)}], {f"threshold: {threshold}, " if threshold is not None else ""}refractory_ms: 2000{", " + extra if extra else ""} }}
  drop: {{ type: null-sink }}
  out: {{ type: jsonl-sink, path: "{events}" }}
links:
  - src -> wake -> drop
  - wake.events -> out
""")
    subprocess.run([voicepipe, "run", graph], check=True)
    return [e for e in map(json.loads, open(events)) if e.get("event") == "wake"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/debug/voicepipe")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--out", default="bench/results/wake.md")
    ap.add_argument("--words", default="hey_jarvis,alexa", help=f"wake words to measure, of {', '.join(PHRASES)}")
    ap.add_argument("--configs", default="default=;openWakeWord with the node's settings=engine: openwakeword;"
                    "openWakeWord's own step, no noise suppression=engine: openwakeword, hop_ms: 80, denoise: false",
                    help="NAME=wake parameters;... each measured on the same material")
    args = ap.parse_args()
    configs = [tuple(c.split("=", 1)) for c in args.configs.split(";") if c]
    global WORDS
    WORDS = {w: PHRASES[w] for w in args.words.split(",")}
    tmp = tempfile.mkdtemp(prefix="wake-bench-")
    # Positives.
    gap = int(2.5 * RATE)
    pieces, truth = [np.zeros(RATE, np.float32)], []
    at = RATE
    for word, text in WORDS.items():
        for engine, table in [("flite", FLITE), ("espeak", ESPEAK)]:
            for voice, speed in table:
                a = say(engine, voice, speed, text, tmp)
                a = a / np.sqrt(np.mean(a ** 2)) * 3000
                pieces += [a, np.zeros(gap, np.float32)]
                truth.append(dict(word=word, engine=engine, voice=voice, speed=speed, end_ms=(at + len(a)) * 1000 // RATE))
                at += len(a) + gap
    clean = np.concatenate(pieces)
    noisy = clean + pink(len(clean), 1) * 3000 / 10 ** (10 / 20)
    pos = os.path.join(tmp, "positives.wav"); write(pos, noisy)
    hits_by = {}
    for name, extra in configs:
        found = wakes(args.voicepipe, pos, tmp, args.threshold, extra)
        hits_by[name] = [any(e["word"] == t["word"] and t["end_ms"] - 300 <= e["media_ms"] <= t["end_ms"] + 1500 for e in found)
                         for t in truth]
    # Negatives: speech and noise.
    total = int(args.hours * 3600 * RATE)
    texts = [open(p).read() for p in ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2",
                                       "/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/GFDL-1.3"]]
    paragraphs = [p.replace("\n", " ") for t in texts for p in t.split("\n\n") if len(p.split()) > 5]
    speech, n, k = [], 0, 0
    voices = [("flite", v, 1.0) for v in ["slt", "rms", "awb", "kal"]] + [("espeak", v, 175) for v in ["en-us", "en", "en-us+f3", "en+m3"]]
    for f in sorted(glob.glob("/usr/share/pocketsphinx/test/data/librivox/*.wav")):
        a = read(f); speech.append(a); n += len(a)
    while n < total // 2:
        engine, voice, speed = voices[k % len(voices)]
        a = say(engine, voice, speed, paragraphs[k % len(paragraphs)][:600], tmp)
        a = a / max(1.0, np.sqrt(np.mean(a ** 2))) * 3000 * (0.3 + 0.7 * ((k * 37) % 10) / 10)
        speech += [a, np.zeros(RATE // 2, np.float32)]
        n += len(a) + RATE // 2
        k += 1
    speech = np.concatenate(speech)[:total // 2]
    speech_s = len(speech) / RATE
    noise, m, j = [], 0, 0
    while m < total - len(speech):
        kind = j % 3
        x = pink(60 * RATE, 100 + j) if kind == 0 else (np.cumsum(np.random.default_rng(j).standard_normal(60 * RATE)) if kind == 1 else np.random.default_rng(j).standard_normal(60 * RATE))
        if kind == 1: x = x - np.convolve(x, np.ones(1600) / 1600, mode="same"); x /= np.sqrt(np.mean(x ** 2))
        level = 10 ** ((-50 + (j * 7) % 31) / 20) * 32767
        noise.append((x * level).astype(np.float32)); m += len(x); j += 1
    noise = np.concatenate(noise)[:total - len(speech)]
    neg = os.path.join(tmp, "negatives.wav"); write(neg, np.concatenate([speech, noise]))
    hours = total / RATE / 3600
    lines = ["# Wake words (`wake`: microWakeWord and openWakeWord models on TensorFlow Lite)", "",
             f"`bench/wake-bench.py --hours {args.hours}" + (f" --threshold {args.threshold}" if args.threshold is not None else "") + "`, one run. " + f"Positives: {len(truth)} synthesized phrases in pink noise at "
             f"10 dB SNR. Negatives: {speech_s / 3600:.2f} h of speech without the phrase (license texts read by eight "
             f"synthetic voices, LibriVox sentences) and {(hours - speech_s / 3600):.2f} h of pink, brown and white noise. "
             "Each configuration of `wake` below runs on the same files.", ""]
    for name, extra in configs:
        hits = hits_by[name]
        started = os.times()
        false = wakes(args.voicepipe, neg, tmp, args.threshold, extra)
        done = os.times()
        cpu = (done.children_user + done.children_system - started.children_user - started.children_system) / 60
        fa_speech = sum(1 for e in false if e["media_ms"] < speech_s * 1000)
        lines += [f"## {name}" + (f" (`{extra}`)" if extra else " (the node's defaults)"), "",
                  "| word | engine | detected |", "|---|---|---|"]
        for word in WORDS:
            for engine in ["flite", "espeak"]:
                sel = [h for h, t in zip(hits, truth) if t["word"] == word and t["engine"] == engine]
                lines.append(f"| {word} | {engine} | {sum(sel)}/{len(sel)} ({100 * sum(sel) / len(sel):.0f} %) |")
        lines.append(f"| all | | {sum(hits)}/{len(hits)} ({100 * sum(hits) / len(hits):.0f} %) |")
        lines += ["", f"False accepts: {len(false)} in {hours:.2f} h = **{len(false) / hours:.2f} per hour** "
                  f"({fa_speech} in speech, {len(false) - fa_speech} in noise)" + (f": {', '.join(sorted(set(e['word'] for e in false)))}" if false else "") + ".",
                  "", f"CPU for the negatives: {cpu:.1f} min ({hours * 60 / max(cpu, 1e-9):.0f}x real time on one core).",
                  "", "Missed: " + (", ".join(f"{t['word']} {t['engine']} {t['voice']} {t['speed']}" for h, t in zip(hits, truth) if not h) or "none") + ".", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f: f.write(text)


if __name__ == "__main__":
    main()
