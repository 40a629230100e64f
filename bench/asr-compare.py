#!/usr/bin/env python3
"""The recognizer graph against PocketSphinx's own tools, on the same files and the same model:
`pocketsphinx_continuous` (its command-line recognizer) and GStreamer's `pocketsphinx` element.

    bench/asr-compare.py [--voicepipe .build/release/voicepipe] [--set vad.stop_ms=400 ...] [--label NAME]

Material: 14 flite sentences in two voices (slt, rms) with 1 s between them; six sentences spoken
in two halves with a 300 ms pause inside (must stay one utterance each); the human recordings of
Debian's pocketsphinx-testdata (LibriVox, "cards") with 1 s between them.

Per system: word error rate (flite; human), key words heard on the human recordings (the
transcription's words of four letters or more), utterances found, real-time factor (as fast as
possible, model loading excluded), and the time from the true end of each sentence (the clean
clip's last frame within 40 dB of its peak) to its final result with the audio paced at 1x
(voicepipe: file-source realtime; GStreamer: `identity sync=true`; pocketsphinx_continuous has no
paced file mode). voicepipe runs pipelines/recognizer-file.yaml with `--set` overrides.
"""
import argparse, array, json, os, re, statistics, subprocess, tempfile, time, wave

from textmetrics import wer, words

RATE = 16000
TESTDATA = "/usr/share/pocketsphinx/test/data"
SENTENCES = [
    "the weather is nice today", "please turn on the lights in the kitchen", "i would like a cup of coffee",
    "the meeting starts at ten o'clock", "call me when you get home", "open the door please",
    "how are you doing today", "my phone number is one two three four", "i want to go home",
    "we need more information about the project", "play some music", "can you help me find my keys",
    "thank you very much", "what time is it",
]
PAUSED = [
    ("please turn on the lights", "in the kitchen"), ("i would like a cup", "of coffee"),
    ("call me when", "you get home"), ("we need more information", "about the project"),
    ("can you help me", "find my keys"), ("the meeting starts", "at ten o'clock"),
]


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def read(path):
    with wave.open(path) as w:
        a = array.array("h"); a.frombytes(w.readframes(w.getnframes())); return list(a)


def write(path, x):
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE)
        w.writeframes(array.array("h", x).tobytes())


def speech_end(x):
    """Seconds to the end of the last 10 ms frame within 40 dB of the clip's loudest."""
    step = RATE // 100
    e = [sum(v * v for v in x[i:i + step]) / step for i in range(0, len(x) - step + 1, step)]
    peak = max(e)
    last = max(i for i, v in enumerate(e) if v > peak * 1e-4)
    return (last + 1) * step / RATE


def trimmed(x):
    """The clip without its leading and trailing silence (frames 40 dB below its peak)."""
    step = RATE // 100
    e = [sum(v * v for v in x[i:i + step]) / step for i in range(0, len(x) - step + 1, step)]
    peak = max(e)
    loud = [i for i, v in enumerate(e) if v > peak * 1e-4]
    return x[loud[0] * step:(loud[-1] + 1) * step]


def clip(tmp, name, text=None, voice=None, src=None):
    raw, out = f"{tmp}/{name}-raw.wav", f"{tmp}/{name}.wav"
    if text is not None:
        sh("flite", "-voice", voice, "-t", text, "-o", raw); src = raw
    sh("sox", src, "-D", "-r", str(RATE), "-c", "1", "-b", "16", out)
    return read(out)


def build(tmp, name, parts):
    """Concatenates clips (samples) with 1 s gaps after 0.5 s; returns the file and the true ends (s)."""
    x, ends, t = [0] * (RATE // 2), [], 0.5
    for p in parts:
        ends.append(t + speech_end(p))
        x += p + [0] * RATE
        t += (len(p) + RATE) / RATE
    path = f"{tmp}/{name}.wav"
    write(path, x)
    return path, ends


def keywords(ref, hyp):
    keys = [w for w in words(ref) if len(w) >= 4]
    heard = words(hyp)
    found = 0
    for k in keys:
        if k in heard:
            heard.remove(k); found += 1
    return found, len(keys)


# --- systems: each returns (finals [(wall_s or None, text)], wall seconds) ---

def voicepipe(binary, wav, realtime, sets):
    args = [binary, "run", "pipelines/recognizer-file.yaml", "--quiet", "--set", f"mic.realtime={'true' if realtime else 'false'}"]
    for s in sets:
        args += ["--set", s]
    t0 = time.monotonic()
    out = subprocess.run(args, check=True, capture_output=True, text=True, env={**os.environ, "INPUT": wav}).stdout
    wall = time.monotonic() - t0
    finals = [(e["ts"], e["text"]) for e in map(json.loads, out.splitlines())
              if e.get("event") == "transcript" and e.get("final") and e.get("text")]
    return finals, wall


def continuous(wav):
    t0 = time.monotonic()
    out = subprocess.run(["pocketsphinx_continuous", "-infile", wav, "-logfn", "/dev/null"],
                         check=True, capture_output=True, text=True).stdout
    return [(None, l.strip()) for l in out.splitlines() if l.strip()], time.monotonic() - t0


def gstreamer(wav, realtime):
    sync = "identity sync=true ! " if realtime else ""
    cmd = ["gst-launch-1.0", "-m", "filesrc", f"location={wav}", "!", "wavparse", "!", "audioconvert", "!",
           "audioresample", "!"] + (["identity", "sync=true", "!"] if realtime else []) + ["pocketsphinx", "!", "fakesink"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
    finals, base = [], None
    for line in p.stdout:
        now = time.monotonic()
        if "pocketsphinx," not in line:
            continue
        m = re.search(r"timestamp=\(guint64\)(\d+)", line)
        hyp = re.search(r'hypothesis=\(string\)"?((?:[^";\\]|\\.)*)', line)
        text = hyp.group(1).replace("\\ ", " ").strip() if hyp else ""
        if "final=(boolean)false" in line and m and base is None and int(m.group(1)) < 2 ** 63:
            base = now - int(m.group(1)) / 1e9
        if "final=(boolean)true" in line and text:
            finals.append((now, text))
    p.wait()
    wall = time.monotonic() - t0
    base = base if base is not None else t0
    return [(t - base, s) for t, s in finals], wall


def latencies(finals, ends):
    """For each true end, the first final after it (and before the next sentence's end)."""
    out = []
    times = sorted(t for t, _ in finals if t is not None)
    for i, e in enumerate(ends):
        limit = ends[i + 1] if i + 1 < len(ends) else float("inf")
        after = [t for t in times if e - 0.2 < t < limit]
        if after:
            out.append(after[0] - e)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--set", action="append", default=[], help="override for pipelines/recognizer-file.yaml")
    ap.add_argument("--label", default=None)
    ap.add_argument("--systems", default="voicepipe,continuous,gstreamer")
    a = ap.parse_args()
    systems = a.systems.split(",")
    vp = os.path.abspath(a.voicepipe)
    with tempfile.TemporaryDirectory() as tmp:
        sets = {}
        for voice in ["slt", "rms"]:
            parts = [clip(tmp, f"{voice}{i}", s, voice) for i, s in enumerate(SENTENCES)]
            sets[voice] = (*build(tmp, voice, parts), " ".join(SENTENCES), len(SENTENCES))
        paused = []
        for i, (a1, a2) in enumerate(PAUSED):
            # flite pads each clip with silence: trim the halves so the pause is 300 ms exactly.
            paused.append(trimmed(clip(tmp, f"p{i}a", a1, "slt")) + [0] * int(0.3 * RATE) + trimmed(clip(tmp, f"p{i}b", a2, "slt")))
        sets["pause"] = (*build(tmp, "pause", paused), " ".join(f"{x} {y}" for x, y in PAUSED), len(PAUSED))
        human_files = sorted(f"{TESTDATA}/librivox/{f}" for f in os.listdir(f"{TESTDATA}/librivox") if f.endswith(".wav"))
        refs = {}
        for line in open(f"{TESTDATA}/librivox/transcription"):
            m = re.match(r"<s> (.*) </s> \((.*)\)", line.strip())
            if m: refs[m.group(2)] = m.group(1)
        cards = sorted(f"{TESTDATA}/cards/{f}" for f in os.listdir(f"{TESTDATA}/cards") if f.endswith(".wav"))
        for line in open(f"{TESTDATA}/cards/cards.transcription"):
            m = re.match(r"<s> (.*?)\s*</s> \((.*)\)", line.strip())
            if m: refs[m.group(2)] = m.group(1)
        hparts = [clip(tmp, f"h{i}", src=f) for i, f in enumerate(human_files + cards)]
        href = " ".join(refs[os.path.basename(f)[:-4]] for f in human_files + cards)
        sets["human"] = (*build(tmp, "human", hparts), href, len(hparts))

        label = a.label or ("voicepipe " + " ".join(a.set) if a.set else "voicepipe (defaults)")
        rows = []
        for system in systems:
            res = {}
            for name, (wav, ends, ref, n) in sets.items():
                if system == "voicepipe":
                    fast, wall = voicepipe(vp, wav, False, a.set)
                    paced, _ = voicepipe(vp, wav, True, a.set) if name != "human" else (None, 0)
                elif system == "continuous":
                    fast, wall = continuous(wav); paced = None
                else:
                    fast, wall = gstreamer(wav, False)
                    paced, _ = gstreamer(wav, True) if name != "human" else (None, 0)
                hyp = " ".join(t for _, t in fast)
                audio = len(read(wav)) / RATE
                res[name] = dict(wer=wer(ref, hyp), utts=len(fast), n=n, rtf=wall / audio, hyp=hyp,
                                 kw=keywords(ref, hyp), lat=latencies(paced, ends) if paced else [])
                print(f"{system:>10} {name:>5}: WER {res[name]['wer']:.3f} utterances {len(fast)}/{n} "
                      f"RTF {wall / audio:.3f} keywords {res[name]['kw'][0]}/{res[name]['kw'][1]}"
                      + (f" latency median {statistics.median(res[name]['lat']) * 1000:.0f} ms max {max(res[name]['lat']) * 1000:.0f} ms"
                         f" ({len(res[name]['lat'])} of {n})" if res[name]["lat"] else ""), flush=True)
                if name == "human":
                    print(f"            heard: {hyp}")
            rows.append((label if system == "voicepipe" else {"continuous": "pocketsphinx_continuous", "gstreamer": "GStreamer pocketsphinx"}[system], res))
        print()
        print("| system | WER flite (slt / rms) | utterances (28 sentences) | 300 ms pauses kept whole | WER human | key words human | RTF | end of sentence → final, median / max ms |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, r in rows:
            lat = r["slt"]["lat"] + r["rms"]["lat"]
            lat_s = f"{statistics.median(lat) * 1000:.0f} / {max(lat) * 1000:.0f}" if lat else "—"
            rtf = statistics.mean([r[k]["rtf"] for k in ("slt", "rms", "human")])
            print(f"| {label} | {r['slt']['wer']:.3f} / {r['rms']['wer']:.3f} | {r['slt']['utts'] + r['rms']['utts']} | "
                  f"{r['pause']['utts']} utterances for 6 | {r['human']['wer']:.3f} | {r['human']['kw'][0]}/{r['human']['kw'][1]} | "
                  f"{rtf:.3f} | {lat_s} |")


if __name__ == "__main__":
    main()
