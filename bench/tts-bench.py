#!/usr/bin/env python3
"""Speech synthesis benchmark: piper (en_US-joe-medium, scripts/install-piper.sh), flite (slt) and
espeak-ng (en-us), each speaking the same sentences — numbers, names, questions — through `voicepipe run`
(text-source -> tts -> volume -> wav-sink, one process per engine), the audio transcribed by Whisper
(faster-whisper with a CTranslate2 model in .deps/whisper/ct2, tiny.en or `--whisper base`, beam 5).

    bench/tts-bench.py [--voicepipe .build/release/voicepipe] [--engines piper,flite,espeak-ng] [--whisper tiny.en|base]
                       [--out bench/results/tts.md]

Per engine:
- WER of Whisper's transcript of each sentence against the sentence (numbers written as words on both
  sides, so "7:30" and "seven thirty" are the same words);
- time to first audio: from `tts_start` (the text reached the node) to the first `volume` event behind it
  (the first 20 ms frame out of the node), p50 and max over the sentences; each sentence is sent alone
  (text-source interval_ms), so none waits behind another;
- RTF: synthesis time (tts_start to tts_end; the sink is a file, so frames leave as fast as they are made)
  over the audio's length, summed over the sentences;
- memory: the process's peak resident set (GNU time), and its wall time.
"""
import argparse, json, os, re, subprocess, sys, tempfile, wave

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = [
    "The meeting starts at 7:30 tomorrow morning.",
    "Please call Michael Johnson at the office.",
    "Can you turn on the lights in the kitchen?",
    "My flight number is 2417 and it leaves from gate 12.",
    "What is the weather like in Paris today?",
    "Sarah and David moved to Chicago last year.",
    "The package weighs 15 kilograms and costs 89 dollars.",
    "Would you like coffee or tea with your breakfast?",
    "Set a timer for 25 minutes, then remind me to stretch.",
    "Doctor Williams will see you on Tuesday afternoon.",
    "How many people live in Tokyo?",
    "The train to Boston was delayed by 40 minutes.",
    "Turn left at the second traffic light and keep going straight.",
    "Is Elizabeth coming to the party on Saturday night?",
    "We sold 350 tickets in the first hour.",
    "The quick brown fox jumps over the lazy dog.",
    "Your appointment with Doctor Patel is on Tuesday at 4 o'clock.",
    "Did you remember to buy milk, eggs and bread?",
    "Jennifer Lopez and Robert Brown signed the contract yesterday.",
    "The temperature will drop to 5 degrees below zero tonight.",
    "Where did you park the car this morning?",
    "Our team scored 3 goals in the last 10 minutes of the game.",
    "Please send the report to Catherine before Friday.",
    "Why is the sky blue during the day?",
    "The museum opens at 9 and closes at 6 in the evening.",
    "Thomas Anderson lives on the fourth floor of that building.",
    "How much does a ticket to London cost?",
    "Add 2 cups of flour and 1 cup of sugar to the bowl.",
    "Could you repeat the last sentence more slowly?",
    "The library has more than 20000 books about history.",
]
ENGINES = {
    "piper": "{ type: tts, engine: piper, rate: 16000 }",
    "flite": "{ type: tts, engine: flite, voice: slt, rate: 16000 }",
    "espeak-ng": "{ type: tts, engine: espeak-ng, voice: en-us, rate: 16000 }",
}
ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
ORDINALS = dict(enumerate("zeroth first second third fourth fifth sixth seventh eighth ninth tenth".split()))
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n):
    if n < 20: return ONES[n]
    if n < 100: return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if n < 1000: return ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + number_words(n % 100))
    if n < 1_000_000: return number_words(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " " + number_words(n % 1000))
    return " ".join(ONES[int(d)] for d in str(n))


def normalize(text):
    """Lower-case words, numbers as words ("7:30" -> seven thirty, "2417" -> two thousand four hundred seventeen)."""
    t = text.lower().replace("dr.", "doctor").replace("%", " percent")
    t = re.sub(r"\$(\d+)", r"\1 dollars", t)
    t = re.sub(r"(\d+):00\b", r"\1", t)
    t = re.sub(r"(\d),(\d{3})", r"\1\2", t)
    t = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: ORDINALS.get(int(m.group(1)), m.group(1)), t)
    t = re.sub(r"\d+", lambda m: " " + number_words(int(m.group())) + " ", t)
    t = re.sub(r"[^a-z' ]", " ", t)
    # "twenty-four" and "twenty four" are the same words; "o'clock" is not said by every engine.
    return [w for w in t.replace("-", " ").split() if w not in ("o'clock",)]


def edit_distance(r, h):
    prev = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        row = [i] + [0] * len(h)
        for j in range(1, len(h) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (r[i - 1] != h[j - 1]))
        prev = row
    return prev[-1]


def run_engine(voicepipe, engine, texts, tmp, interval_ms):
    text_file = os.path.join(tmp, "sentences.txt")
    with open(text_file, "w") as f:
        f.write("\n".join(texts) + "\n")
    wav = os.path.join(tmp, f"{engine}.wav")
    graph = os.path.join(tmp, f"{engine}.yaml")
    with open(graph, "w") as f:
        f.write(f"""version: 1
name: tts-bench-{engine}
nodes:
  text: {{ type: text-source, path: "{text_file}", interval_ms: {interval_ms} }}
  tts: {ENGINES[engine]}
  vol: {{ type: volume, interval_ms: 20 }}
  wav: {{ type: wav-sink, path: "{wav}" }}
  out: {{ type: jsonl-sink, path: "-" }}
links:
  - text -> tts.text
  - tts -> vol -> wav
  - tts.events -> out
  - vol.events -> out
""")
    r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", voicepipe, "run", graph], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{engine}: voicepipe failed: {r.stderr[-2000:]}")
    m = re.search(r"TIME ([\d.]+) (\d+)", r.stderr)
    wall, rss_kb = float(m.group(1)), int(m.group(2))
    events = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    starts = [e for e in events if e["event"] == "tts_start"]
    ends = [e for e in events if e["event"] == "tts_end"]
    if len(starts) != len(texts) or len(ends) != len(texts):
        sys.exit(f"{engine}: {len(starts)} tts_start, {len(ends)} tts_end for {len(texts)} texts")
    volumes = [e["ts"] for e in events if e["event"] == "volume"]
    # A text's first audio: the first volume event after its tts_start and after the previous text's
    # tts_end (that text's last frames may still be leaving when this one starts).
    first = []
    for i, s in enumerate(starts):
        after = max(s["ts"], ends[i - 1]["ts"] if i > 0 else 0)
        later = [t for t in volumes if t > after]
        first.append((later[0] - s["ts"]) * 1000 if later else float("nan"))
    synth = sum(e["ts"] - s["ts"] for s, e in zip(starts, ends))
    durations = [e["duration_ms"] for e in ends]
    # Cut the file into the sentences (their audio follows each other).
    with wave.open(wav) as w:
        rate = w.getframerate()
        audio = w.readframes(w.getnframes())
    pieces, offset = [], 0
    for i, d in enumerate(durations):
        n = d * rate // 1000 * 2
        path = os.path.join(tmp, f"{engine}-{i}.wav")
        with wave.open(path, "wb") as w:
            # 300 ms of silence around each sentence, the same for every engine (Whisper misses a first
            # word that starts at the file's first sample).
            pad = b"\0\0" * (rate * 3 // 10)
            w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate); w.writeframes(pad + audio[offset:offset + n] + pad)
        offset += n
        pieces.append(path)
    return {"wall": wall, "rss_mb": rss_kb / 1024, "first_ms": first, "rtf": synth / (sum(durations) / 1000),
            "audio_s": sum(durations) / 1000, "pieces": pieces}


WHISPER = "tiny.en"


def transcribe(files):
    from faster_whisper import WhisperModel
    model = WhisperModel(os.path.join(ROOT, ".deps/whisper/ct2", WHISPER), device="cpu", compute_type="int8", cpu_threads=2)
    out = []
    for f in files:
        segments, _ = model.transcribe(f, beam_size=5, language="en")
        out.append(" ".join(s.text.strip() for s in segments))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=os.path.join(ROOT, ".build/release/voicepipe"))
    ap.add_argument("--engines", default="piper,flite,espeak-ng")
    ap.add_argument("--interval-ms", type=int, default=5000)
    ap.add_argument("--whisper", default="tiny.en", help="the CTranslate2 model in .deps/whisper/ct2: tiny.en or base")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/tts.md"))
    a = ap.parse_args()
    global WHISPER
    WHISPER = a.whisper
    if not os.path.exists(a.voicepipe):
        a.voicepipe = os.path.join(ROOT, ".build/debug/voicepipe")
    build = "release" if "/release/" in a.voicepipe else "debug"
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in a.engines.split(","):
            r = run_engine(a.voicepipe, engine, SENTENCES, tmp, a.interval_ms)
            heard = transcribe(r["pieces"])
            errors = sum(edit_distance(normalize(s), normalize(h)) for s, h in zip(SENTENCES, heard))
            words = sum(len(normalize(s)) for s in SENTENCES)
            r["wer"] = errors / words
            r["heard"] = heard
            results[engine] = r
            first = sorted(r["first_ms"])
            print(f"{engine}: WER {r['wer']:.3f}, first audio p50 {first[len(first) // 2]:.0f} ms max {first[-1]:.0f} ms, "
                  f"RTF {r['rtf']:.3f}, peak RSS {r['rss_mb']:.0f} MB, {r['audio_s']:.1f} s of audio in {r['wall']:.1f} s", flush=True)
    lines = [f"| engine | WER | first audio p50 / max (ms) | RTF | peak RSS (MB) |", "|---|---|---|---|---|"]
    for engine, r in results.items():
        first = sorted(r["first_ms"])
        lines.append(f"| {engine} | {r['wer']:.3f} | {first[len(first) // 2]:.0f} / {first[-1]:.0f} | {r['rtf']:.3f} | {r['rss_mb']:.0f} |")
    lines.append("")
    lines.append(f"{len(SENTENCES)} sentences, {sum(len(normalize(s)) for s in SENTENCES)} words, heard by Whisper {WHISPER}; {build} build; "
                 f"`bench/tts-bench.py --voicepipe {os.path.relpath(a.voicepipe, ROOT)} --whisper {WHISPER}`.")
    lines.append("")
    lines.append("What Whisper heard where it differs from the sentence:")
    lines.append("")
    for engine, r in results.items():
        for s, h in zip(SENTENCES, r["heard"]):
            if normalize(s) != normalize(h):
                lines.append(f"- {engine}: \"{s}\" → \"{h}\"")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
