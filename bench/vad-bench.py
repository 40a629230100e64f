#!/usr/bin/env python3
"""Segmentation benchmark: voicepipe's `vad` (engine speex and engine silero) against webrtcvad, on
labelled speech in pink and babble noise at 20, 10 and 5 dB SNR, in the same run.

    bench/vad-bench.py [--voicepipe .build/release/voicepipe] [--quick] [--out bench/results/vad.md]

Speech: flite sentences (voices slt and rms), espeak-ng sentences, and the human recordings of
Debian's pocketsphinx-testdata (LibriVox and "cards"). Each clip's reference speech frames come from
the clean clip (10 ms frames above -45 dB of the clip's loudest frame and above -60 dBFS, gaps under
150 ms filled); clips are placed with 1-2.5 s of silence between them (seeded), then noise is added
over the whole file at the SNR, measured over the speech frames. Pink noise comes from sox; babble
is twenty espeak-ng talkers (varied voice, pitch and rate) reading other text at once.

Every detector goes through the same hysteresis (voicepipe's VADStateMachine, start_ms 100,
stop_ms 300): voicepipe's VADs report it themselves (speech_start / speech_end media_ms),
webrtcvad's 30 ms decisions (aggressiveness 2) go through a Python copy of it. Metrics per
condition: frame-level precision, recall and F1 of speech, and the mean boundary error (ms) of
detected segments against the reference segment they overlap most.

Needs: flite, espeak-ng, sox, pocketsphinx-testdata, the voicepipe binary, the silero model
(scripts/install-onnx.sh) and webrtcvad in .deps/venv (scripts/install-python-deps.sh --bench).
"""
import argparse, array, json, math, os, random, subprocess, sys, tempfile, time, wave

RATE = 16000
FRAME_MS = 10
START_MS, STOP_MS = 100, 300
TESTDATA = "/usr/share/pocketsphinx/test/data"
FLITE = [
    "the weather is nice today", "please turn on the lights in the kitchen", "i would like a cup of coffee",
    "the meeting starts at ten o'clock", "call me when you get home", "open the door please",
    "how are you doing today", "my phone number is one two three four", "we need more information about the project",
    "can you help me find my keys",
]
ESPEAK = [
    "The quick brown fox jumps over the lazy dog.", "Please call me back when you get this message.",
    "Voice pipelines should be simple to build.", "It is going to rain this afternoon, take an umbrella.",
]
BABBLE = [
    "Four score and seven years ago our fathers brought forth on this continent a new nation.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little money in my purse.",
    "In a hole in the ground there lived a hobbit, not a nasty, dirty, wet hole.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "The sky above the port was the color of television, tuned to a dead channel.",
]


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, **kw)


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        a = array.array("h")
        a.frombytes(w.readframes(w.getnframes()))
        return list(a)


def write_wav(path, samples):
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE)
        w.writeframes(array.array("h", [max(-32768, min(32767, int(round(s)))) for s in samples]).tobytes())


def to16k(src, dst):
    sh("sox", src, "-D", "-r", str(RATE), "-c", "1", "-b", "16", dst)


def clips(tmp, quick):
    """(name, samples) of every speech clip."""
    out = []
    n = 0
    for voice in ["slt", "rms"]:
        for s in (FLITE[:4] if quick else FLITE):
            raw, f = f"{tmp}/f{n}.wav", f"{tmp}/f{n}k.wav"; n += 1
            sh("flite", "-voice", voice, "-t", s, "-o", raw); to16k(raw, f)
            out.append((f"flite-{voice}", read_wav(f)))
    for s in (ESPEAK[:2] if quick else ESPEAK):
        raw, f = f"{tmp}/e{n}.wav", f"{tmp}/e{n}k.wav"; n += 1
        sh("espeak-ng", "-v", "en-us", "-s", "160", "-w", raw, s); to16k(raw, f)
        out.append(("espeak-ng", read_wav(f)))
    human = sorted(os.path.join(TESTDATA, "librivox", x) for x in os.listdir(os.path.join(TESTDATA, "librivox")) if x.endswith(".wav"))
    human += sorted(os.path.join(TESTDATA, "cards", x) for x in os.listdir(os.path.join(TESTDATA, "cards")) if x.endswith(".wav"))
    for h in (human[:3] if quick else human):
        f = f"{tmp}/h{n}.wav"; n += 1
        to16k(h, f)
        out.append(("human", read_wav(f)))
    return out


def frame_energies(x):
    step = RATE * FRAME_MS // 1000
    return [10 * math.log10(max(1e-12, sum(v * v for v in x[i:i + step]) / max(1, len(x[i:i + step])) / 32768.0 ** 2))
            for i in range(0, len(x), step)]


def reference_frames(x):
    """Speech frames of a clean clip: loud enough relative to its peak and absolutely, small gaps filled."""
    e = frame_energies(x)
    peak = max(e)
    speech = [v > peak - 45 and v > -60 for v in e]
    gap = 150 // FRAME_MS
    i = 0
    while i < len(speech):
        if not speech[i]:
            j = i
            while j < len(speech) and not speech[j]:
                j += 1
            if 0 < i and j < len(speech) and j - i < gap:
                for k in range(i, j):
                    speech[k] = True
            i = j
        else:
            i += 1
    return speech


def assemble(items, seed):
    """Concatenates clips with silences; returns samples and the reference frame labels."""
    rnd = random.Random(seed)
    samples, labels = [0] * RATE, [False] * (1000 // FRAME_MS)
    for _, x in items:
        ref = reference_frames(x)
        step = RATE * FRAME_MS // 1000
        pad = (-len(x)) % step
        samples += x + [0] * pad
        labels += ref[: (len(x) + pad) // step]
        gap = int(rnd.uniform(1.0, 2.5) * 1000 / FRAME_MS)
        samples += [0] * (gap * step)
        labels += [False] * gap
    return samples, labels


def noise_pink(tmp, seconds):
    f = f"{tmp}/pink.wav"
    sh("sox", "-n", "-r", str(RATE), "-c", "1", "-b", "16", f, "synth", f"{seconds:.2f}", "pinknoise", "vol", "0.3")
    return read_wav(f)


def noise_babble(tmp, seconds, talkers=20):
    """Multi-talker babble: `talkers` espeak-ng voices (varied voice, pitch and rate) reading at once."""
    variants = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5"]
    langs = ["en-us", "en", "en-gb"]
    rnd = random.Random(5)
    total = [0.0] * int(seconds * RATE)
    for k in range(talkers):
        v = f"{langs[k % 3]}+{variants[k % len(variants)]}"
        raw, f = f"{tmp}/b{k}.wav", f"{tmp}/b{k}k.wav"
        text = " ".join(BABBLE[(k + j) % len(BABBLE)] for j in range(6))
        sh("espeak-ng", "-v", v, "-p", str(rnd.randint(25, 75)), "-s", str(rnd.randint(130, 185)), "-w", raw, text); to16k(raw, f)
        x = read_wav(f)
        off = rnd.randrange(len(x))
        for i in range(len(total)):
            total[i] += x[(i + off) % len(x)]
    return total


def mix(speech, labels, noise, snr):
    step = RATE * FRAME_MS // 1000
    sp = [v for i, v in enumerate(speech) if i // step < len(labels) and labels[i // step]]
    ps = sum(v * v for v in sp) / max(1, len(sp))
    pn = sum(v * v for v in noise[: len(speech)]) / len(speech)
    g = math.sqrt(ps / (pn * 10 ** (snr / 10)))
    return [s + g * noise[i % len(noise)] for i, s in enumerate(speech)]


class Hysteresis:
    """Python copy of voicepipe's VADStateMachine (block decisions -> segments in samples)."""

    def __init__(self):
        self.start, self.stop = START_MS * RATE // 1000, STOP_MS * RATE // 1000
        self.in_speech, self.run_start, self.last_end, self.segments = False, None, 0, []

    def observe(self, speech, a, b):
        if speech:
            if self.in_speech:
                self.last_end = b
            else:
                s = self.run_start if self.run_start is not None else a
                self.run_start = s
                if b - s >= self.start:
                    self.in_speech, self.last_end, self.run_start = True, b, None
                    self.segments.append([s, None])
        else:
            self.run_start = None
            if self.in_speech and b - self.last_end >= self.stop:
                self.in_speech = False
                self.segments[-1][1] = self.last_end

    def finish(self):
        if self.in_speech:
            self.segments[-1][1] = self.last_end
        return [(a / RATE * 1000, b / RATE * 1000) for a, b in self.segments]


def run_webrtc(samples, venv_python, tmp):
    f = f"{tmp}/webrtc-in.raw"
    with open(f, "wb") as fh:
        fh.write(array.array("h", [max(-32768, min(32767, int(round(s)))) for s in samples]).tobytes())
    code = (
        "import sys, webrtcvad\n"
        "v = webrtcvad.Vad(2); d = open(sys.argv[1], 'rb').read(); n = 480 * 2\n"
        "print(''.join('1' if v.is_speech(d[i:i+n], 16000) else '0' for i in range(0, len(d) - n + 1, n)))\n"
    )
    t0 = time.perf_counter()
    bits = subprocess.run([venv_python, "-c", code, f], check=True, capture_output=True, text=True).stdout.strip()
    elapsed = time.perf_counter() - t0
    h = Hysteresis()
    for k, b in enumerate(bits):
        h.observe(b == "1", k * 480, (k + 1) * 480)
    return h.finish(), elapsed


def run_voicepipe(binary, wav, engine, tmp):
    graph = f"{tmp}/vad-{engine}.yaml"
    with open(graph, "w") as g:
        g.write(
            "version: 1\nname: vad-bench\nnodes:\n"
            f"  src: {{ type: file-source, path: \"{wav}\" }}\n"
            f"  vad: {{ type: vad, engine: {engine}, start_ms: {START_MS}, stop_ms: {STOP_MS} }}\n"
            "  out: { type: jsonl-sink, path: \"-\" }\n"
            "  sink: { type: null-sink }\n"
            "links:\n  - src -> vad -> sink\n  - vad.events -> out\n"
        )
    t0 = time.perf_counter()
    out = subprocess.run([binary, "run", graph, "--quiet"], check=True, capture_output=True, text=True).stdout
    elapsed = time.perf_counter() - t0
    segs, start = [], None
    for line in out.splitlines():
        e = json.loads(line)
        if e.get("event") == "speech_start":
            start = e["media_ms"]
        elif e.get("event") == "speech_end" and start is not None:
            segs.append((start, e["media_ms"])); start = None
    return segs, elapsed


def score(segs, labels):
    det = [False] * len(labels)
    for a, b in segs:
        for k in range(int(a // FRAME_MS), min(len(labels), int(math.ceil(b / FRAME_MS)))):
            det[k] = True
    tp = sum(1 for d, r in zip(det, labels) if d and r)
    fp = sum(1 for d, r in zip(det, labels) if d and not r)
    fn = sum(1 for d, r in zip(det, labels) if not d and r)
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    # Reference segments, and each detected segment's boundary error against its best overlap.
    ref, k = [], 0
    while k < len(labels):
        if labels[k]:
            j = k
            while j < len(labels) and labels[j]:
                j += 1
            ref.append((k * FRAME_MS, j * FRAME_MS)); k = j
        else:
            k += 1
    errs = []
    for a, b in segs:
        best = max(ref, key=lambda s: min(b, s[1]) - max(a, s[0]), default=None)
        if best and min(b, best[1]) > max(a, best[0]):
            errs.append((abs(a - best[0]) + abs(b - best[1])) / 2)
    return p, r, f1, (sum(errs) / len(errs) if errs else float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--quick", action="store_true", help="fewer clips and conditions (a smoke run)")
    ap.add_argument("--out", default=None, help="write the Markdown table here too")
    args = ap.parse_args()
    venv_python = os.path.abspath(".deps/venv/bin/python3")
    with tempfile.TemporaryDirectory() as tmp:
        items = clips(tmp, args.quick)
        speech, labels = assemble(items, seed=3)
        seconds = len(speech) / RATE
        noises = {"pink": noise_pink(tmp, seconds + 1), "babble": noise_babble(tmp, seconds + 1)}
        conditions = [("clean", None, None)] + [(n, n, s) for n in (["pink"] if args.quick else ["pink", "babble"])
                                                for s in ([10] if args.quick else [20, 10, 5])]
        rows = []
        for name, noise, snr in conditions:
            x = speech if noise is None else mix(speech, labels, noises[noise], snr)
            wav = f"{tmp}/mix-{name}-{snr}.wav"
            write_wav(wav, x)
            for engine in ["speex", "silero", "webrtcvad"]:
                if engine == "webrtcvad":
                    segs, t = run_webrtc(x, venv_python, tmp)
                else:
                    segs, t = run_voicepipe(args.voicepipe, wav, engine, tmp)
                p, r, f1, berr = score(segs, labels)
                rows.append((name if snr is None else f"{name} {snr} dB", engine, p, r, f1, berr, len(segs), t))
                print(f"{rows[-1][0]:>14} {engine:>9}: P {p:.3f} R {r:.3f} F1 {f1:.3f} boundary {berr:6.0f} ms "
                      f"segments {len(segs)} ({t:.2f} s)", flush=True)
        truth_segments = sum(1 for k in range(len(labels)) if labels[k] and (k == 0 or not labels[k - 1]))
        lines = [f"Audio: {seconds:.0f} s, {len(items)} clips ({sum(1 for n, _ in items if n == 'human')} human), "
                 f"{truth_segments} reference speech segments (10 ms frames; start_ms {START_MS}, stop_ms {STOP_MS} for every detector).", "",
                 "| condition | detector | precision | recall | F1 | boundary error, ms | segments | run time, s |",
                 "|---|---|---:|---:|---:|---:|---:|---:|"]
        for c, e, p, r, f1, b, n, t in rows:
            lines.append(f"| {c} | {e} | {p:.3f} | {r:.3f} | {f1:.3f} | {b:.0f} | {n} | {t:.2f} |")
        table = "\n".join(lines)
        print(table)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(table + "\n")


if __name__ == "__main__":
    main()
