#!/usr/bin/env python3
"""Whisper in voicepipe on recordings of people: the encoder sized to the utterance (`audio_ctx: auto`)
against the whole 30 s window (`audio_ctx: full`) and against faster-whisper on the same weights and the
same thread count, as fast as possible and paced at 1x, on an idle machine and again with competing
busy processes (`--load N`: N processes spinning at normal priority for the whole run).

Material: Asterisk's English prompts (Debian's asterisk-core-sounds-en-wav: one professional speaker,
8 kHz, resampled to 16 kHz, each with its transcript) and the five LibriVox sentences of Debian's
pocketsphinx-testdata (16 kHz, with their transcripts): one file, each sentence followed by 1.5 s of
silence, recognized by `voicepipe run` with file-source -> vad (stop_ms 350) -> asr.

Measured:
- decode time per utterance: voicepipe's `decode_ms` on each final (the decoding itself, every retry
  included), faster-whisper's `transcribe()` on exactly the span of that final (start_ms..end_ms);
- speed: the sum of those over all utterances, and the ratio faster-whisper / voicepipe;
- end of speech -> final, paced: from the VAD's speech_end event to the final (wall clock, each line
  stamped as it arrives), and from the true end of speech (the sentence's last sample) to the final;
- word error rate against the transcripts, and between voicepipe and faster-whisper;
- the checks that sent a decoding back to a larger context (the node's counters, from --stats).
"""
import argparse, array, gzip, json, os, re, statistics, subprocess, sys, tempfile, threading, time, wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from textmetrics import edit_distance, words  # noqa: E402

RATE = 16000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = "/usr/share/pocketsphinx/test/data/librivox"
VENV_PYTHON = os.path.join(ROOT, ".deps/venv/bin/python3")
MODEL = os.path.join(ROOT, ".deps/whisper/models/ggml-tiny.en.bin")
CT2 = os.path.join(ROOT, ".deps/whisper/ct2/tiny.en")
GAP_S = 1.5


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1, path
        a = array.array("h"); a.frombytes(w.readframes(w.getnframes()))
    return a


def trim(a, floor=300):
    """Without leading and trailing near-silence (10 ms frames whose peak is under `floor`)."""
    frames = [max(abs(x) for x in a[i:i + 160]) if a[i:i + 160] else 0 for i in range(0, len(a), 160)]
    voiced = [i for i, p in enumerate(frames) if p >= floor]
    if not voiced: return a
    return a[max(0, voiced[0] - 5) * 160:min(len(a), (voiced[-1] + 6) * 160)]


def material(tmp, limit):
    items = []
    text_file = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
    folder = "/usr/share/asterisk/sounds/en"
    if not os.path.exists(text_file):
        sys.exit(f"no {text_file}: apt-get install asterisk-core-sounds-en-wav")
    for line in gzip.open(text_file, "rt", encoding="utf-8", errors="replace"):
        if line.startswith(";") or ":" not in line: continue
        key, text = (s.strip() for s in line.split(":", 1))
        if "[" in text or len(words(text)) < 5: continue
        src = os.path.join(folder, key + ".wav")
        if not os.path.exists(src): continue
        dst = os.path.join(tmp, "p.wav")
        subprocess.run(["sox", src, "-r", str(RATE), "-c", "1", "-b", "16", dst], check=True)
        a = trim(read_wav(dst))
        if len(a) <= 12 * RATE: items.append(("prompts", text, a))
    if os.path.isdir(TESTDATA):
        refs = {}
        for line in open(os.path.join(TESTDATA, "transcription")):
            m = re.match(r"<s> (.*) </s> \((.*)\)", line.strip())
            if m: refs[m.group(2)] = m.group(1)
        for name, text in sorted(refs.items()):
            items.append(("librivox", text, trim(read_wav(os.path.join(TESTDATA, name + ".wav")))))
    if limit: items = items[:max(0, limit - 5)] + [i for i in items if i[0] == "librivox"]
    audio, spans = array.array("h", [0] * RATE), []
    for kind, text, a in items:
        start = len(audio); audio.extend(a); spans.append(dict(kind=kind, text=text, start=start, end=len(audio)))
        audio.extend([0] * int(GAP_S * RATE))
    path = os.path.join(tmp, "material.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE); w.writeframes(audio.tobytes())
    return path, spans


GRAPH = """version: 1
name: whisper-ctx-bench
nodes:
  src: {{ type: file-source, path: "{wav}", realtime: {paced} }}
  vad: {{ type: vad, stop_ms: 350 }}
  asr: {{ type: asr, engine: whisper, model: "{model}", threads: {threads}, decoders: 1, audio_ctx: {ctx} }}
  out: {{ type: jsonl-sink, path: "-" }}
links:
  - src -> vad -> asr
  - asr.events -> out
  - vad.events -> out
"""


def run_voicepipe(binary, tmp, wav, ctx, threads, paced, model=MODEL, tag=""):
    graph = os.path.join(tmp, f"g-{ctx}-{paced}{tag}.yaml")
    open(graph, "w").write(GRAPH.format(wav=wav, model=model, threads=threads, ctx=ctx, paced="true" if paced else "false"))
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "run", graph, "--stats", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []
    threading.Thread(target=lambda: err.extend(p.stderr), daemon=True).start()
    events = []
    for line in p.stdout:
        try: e = json.loads(line)
        except ValueError: continue
        e["_wall"] = time.monotonic() - t0
        events.append(e)
    p.wait()
    stderr = "".join(err)
    if p.returncode != 0: sys.exit(f"voicepipe run failed ({p.returncode}): {stderr[-2000:]}")
    counters = {k: int(v) for k, v in re.findall(r"(whisper_[a-z_]+)\D+(\d+)", stderr)}
    return events, counters, time.monotonic() - t0


def faster_whisper(python, wav, spans, threads, compute):
    script = r"""
import json, sys, time, wave, numpy as np
from faster_whisper import WhisperModel
model_dir, wav, threads, compute = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
spans = json.loads(sys.stdin.read())
m = WhisperModel(model_dir, device="cpu", compute_type=compute, cpu_threads=threads)
with wave.open(wav) as w: a = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
m.transcribe(a[:16000], language="en", beam_size=1)
out = []
for s, e in spans:
    x = a[s * 16:e * 16]
    t = time.monotonic()
    segs, _ = m.transcribe(x, language="en", beam_size=1, temperature=0.0, condition_on_previous_text=False, vad_filter=False)
    text = " ".join(seg.text.strip() for seg in segs)
    out.append(dict(text=text, ms=(time.monotonic() - t) * 1000))
print(json.dumps(out))
"""
    p = subprocess.run([python, "-c", script, CT2, wav, str(threads), compute], input=json.dumps(spans), capture_output=True, text=True)
    if p.returncode != 0: sys.exit(f"faster-whisper failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def finals_of(events):
    return [e for e in events if e.get("event") == "transcript" and e.get("final")]


def assign(finals, spans):
    """For each material span, the finals whose media span overlaps it, joined."""
    out = []
    for s in spans:
        s0, s1 = s["start"] * 1000 // RATE, s["end"] * 1000 // RATE
        mine = [f for f in finals if f["start_ms"] < s1 and f["end_ms"] > s0]
        out.append(" ".join(f.get("text", "") for f in mine))
    return out


def wer_total(refs, hyps):
    n = sum(len(words(r)) for r in refs)
    return sum(edit_distance(words(r), words(h)) for r, h in zip(refs, hyps)) / max(1, n)


def pct(values, q):
    if not values: return float("nan")
    v = sorted(values); return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def spin(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def models(args):
    """--models: (label, path) of the other ggml files run with audio_ctx auto beside the default model."""
    out = []
    for item in [x for x in args.models.split(",") if x]:
        label, _, path = item.partition("=")
        out.append((label, os.path.abspath(path)))
    return out


def measure(args, tmp, wav, spans, load):
    spinners = spin(load)
    try:
        time.sleep(1.0 if load else 0)
        r = {"_load": f"{os.getloadavg()[0]:.1f} at the start"}
        for ctx in args.contexts.split(","):
            events, counters, wall = run_voicepipe(args.voicepipe, tmp, wav, ctx, args.threads, paced=False)
            r[ctx] = dict(events=events, finals=finals_of(events), counters=counters, wall=wall)
        for label, path in models(args):
            events, counters, wall = run_voicepipe(args.voicepipe, tmp, wav, "auto", args.threads, paced=False, model=path, tag=label)
            r["auto " + label] = dict(events=events, finals=finals_of(events), counters=counters, wall=wall)
        utt = [(f["start_ms"], f["end_ms"]) for f in r["auto"]["finals"]]
        for compute in args.compute.split(","):
            r["fw-" + compute] = dict(results=faster_whisper(args.python, wav, utt, args.threads, compute))
        if not args.no_paced:
            events, counters, wall = run_voicepipe(args.voicepipe, tmp, wav, "auto", args.threads, paced=True)
            r["paced"] = dict(events=events, finals=finals_of(events), counters=counters, wall=wall)
        r["_load"] += f", {os.getloadavg()[0]:.1f} at the end"
        return r
    finally:
        for p in spinners: p.kill()


def report(args, spans, runs):
    refs = [s["text"] for s in spans]
    L = [f"# Whisper: the encoder sized to the utterance, against the whole window and faster-whisper", "",
         f"Command: `bench/whisper-ctx-bench.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
         f"{os.cpu_count()} cores, binary {args.voicepipe}). Model: Whisper tiny.en (ggml f16 for voicepipe; the same weights in "
         f"CTranslate2's format for faster-whisper), greedy, {args.threads} thread(s) per decoding for both, one decoding at a time for both (voicepipe `decoders: 1`: "
         f"its default runs finals side by side, which makes each one's decode_ms longer and their sum no measure of speed). Material: "
         f"{sum(1 for s in spans if s['kind'] == 'prompts')} Asterisk prompts and {sum(1 for s in spans if s['kind'] == 'librivox')} "
         f"LibriVox sentences, {sum((s['end'] - s['start']) for s in spans) / RATE:.0f} s of speech.", ""]
    for load, r in runs:
        L.append(f"## {'No competing process started by the benchmark' if load == 0 else f'{load} competing busy process(es)'} (load average {r.get('_load', '?')})")
        L.append("")
        L.append("| system | utterances | decode per utterance p50 / p95 (ms) | sum (s) | speed vs this system | WER vs transcripts | WER vs faster-whisper (" + args.compute.split(",")[0] + ") |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        fw0 = r["fw-" + args.compute.split(",")[0]]["results"]
        fw_texts = [x["text"] for x in fw0]
        auto_sum = sum(f.get("decode_ms", 0) for f in r["auto"]["finals"]) / 1000
        rows = []
        for ctx in args.contexts.split(","):
            fin = r[ctx]["finals"]
            ms = [f.get("decode_ms", 0) for f in fin]
            hyp = assign(fin, spans)
            vs_fw = wer_total(fw_texts, [f.get("text", "") for f in r["auto"]["finals"]]) if ctx == "auto" else float("nan")
            rows.append((f"voicepipe audio_ctx {ctx}", len(fin), ms, sum(ms) / 1000, wer_total(refs, hyp), vs_fw))
        for label, _ in models(args):
            fin = r["auto " + label]["finals"]
            ms = [f.get("decode_ms", 0) for f in fin]
            c = r["auto " + label]["counters"]
            rows.append((f"voicepipe audio_ctx auto, {label} (retries {c.get('whisper_retries', 0)}, loops cut {c.get('whisper_loops_cut', 0)})",
                         len(fin), ms, sum(ms) / 1000, wer_total(refs, assign(fin, spans)),
                         wer_total(fw_texts, [f.get("text", "") for f in fin]) if len(fin) == len(fw_texts) else float("nan")))
        for compute in args.compute.split(","):
            res = r["fw-" + compute]["results"]
            ms = [x["ms"] for x in res]
            # Map faster-whisper's per-utterance texts back onto the material spans.
            fake = [dict(start_ms=f["start_ms"], end_ms=f["end_ms"], text=x["text"]) for f, x in zip(r["auto"]["finals"], res)]
            rows.append((f"faster-whisper {compute}", len(res), ms, sum(ms) / 1000, wer_total(refs, assign(fake, spans)), float("nan")))
        for name, n, ms, total, wer, vs in rows:
            L.append(f"| {name} | {n} | {pct(ms, .5):.0f} / {pct(ms, .95):.0f} | {total:.2f} | {total / auto_sum if auto_sum else float('nan'):.2f}× auto's time | "
                     f"{wer:.3f} | {'' if vs != vs else f'{vs:.3f}'} |")
        L.append("")
        for compute in args.compute.split(","):
            fw_sum = sum(x["ms"] for x in r["fw-" + compute]["results"]) / 1000
            L.append(f"- voicepipe (auto) decodes {fw_sum / auto_sum:.2f}× as fast as faster-whisper {compute} on the same utterances "
                     f"({auto_sum:.2f} s against {fw_sum:.2f} s).")
            for label, _ in models(args):
                m_sum = sum(f.get("decode_ms", 0) for f in r["auto " + label]["finals"]) / 1000
                if m_sum:
                    L.append(f"- voicepipe (auto, {label}) decodes {fw_sum / m_sum:.2f}× as fast as faster-whisper {compute} "
                             f"({m_sum:.2f} s against {fw_sum:.2f} s; its own utterances, cut by the same VAD).")
        c = r["auto"]["counters"]
        guards = ", ".join(f"{k[len('whisper_guard_'):]}: {v}" for k, v in sorted(c.items()) if k.startswith("whisper_guard_")) or "none"
        L.append(f"- Checks that sent a decoding back to a larger context (as fast as possible, auto): "
                 f"{c.get('whisper_retries', 0)} of {len(r['auto']['finals'])} finals "
                 f"({guards}); sentences said over and cut to their first copy: {c.get('whisper_loops_cut', 0)}; "
                 f"unsure twice, the second kept instead of the whole window: {c.get('whisper_unsure_kept', 0)}; "
                 f"{c.get('whisper_full_window_retries', 0)} went on to the whole window. Partials skipped: {c.get('whisper_partials_skipped', 0)}.")
        if "full" in r and "auto" in r:
            # Where the sized context and the whole window heard a sentence differently: what the WER gap is made of.
            for ref, a, f in zip(refs, assign(r["auto"]["finals"], spans), assign(r["full"]["finals"], spans)):
                if words(a) != words(f):
                    L.append(f"- auto and full differ: \"{ref}\" → auto \"{a.strip()}\" ({edit_distance(words(ref), words(a))} errors), "
                             f"full \"{f.strip()}\" ({edit_distance(words(ref), words(f))} errors)")
        if "paced" in r:
            ev = r["paced"]["events"]
            ends = [e for e in ev if e.get("event") == "speech_end"]
            fin = r["paced"]["finals"]
            lat, true_lat, queued = [], [], []
            for f in fin:
                # The speech_end the final belongs to: the first at or after its end in media time.
                e = next((e for e in ends if e.get("media_ms", e.get("end_ms", 0)) >= f["end_ms"] - 400), None)
                if e: lat.append((f["_wall"] - e["_wall"]) * 1000)
                span = next((s for s in spans if s["start"] * 1000 // RATE < f["end_ms"] and s["end"] * 1000 // RATE > f["start_ms"]), None)
                if span: true_lat.append(f["_wall"] * 1000 - span["end"] * 1000 / RATE)
                queued.append(f.get("queued_ms", 0))
            hyp = assign(fin, spans)
            L.append(f"- Paced at 1x (auto): speech_end → final p50 **{pct(lat, .5):.0f} ms**, p95 {pct(lat, .95):.0f} ms "
                     f"({len(lat)} finals); true end of speech → final p50 {pct(true_lat, .5):.0f} ms, p95 {pct(true_lat, .95):.0f} ms "
                     f"(includes the VAD's 350 ms hang-over and process start-up for the first); queued p50 {pct(queued, .5):.0f} ms; "
                     f"WER {wer_total(refs, hyp):.3f}.")
        L.append("")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--python", default=VENV_PYTHON)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compute", default="int8,float32", help="faster-whisper compute types, comma-separated")
    ap.add_argument("--loads", default="0,1", help="competing busy processes per round, comma-separated")
    ap.add_argument("--limit", type=int, default=0, help="at most this many sentences (0: all)")
    ap.add_argument("--contexts", default="auto,full", help="voicepipe audio_ctx values to run, comma-separated (auto first)")
    ap.add_argument("--no-paced", action="store_true")
    ap.add_argument("--models", default="", help="LABEL=PATH,...: other ggml models (quantized files) run with audio_ctx auto beside "
                    "the default, e.g. q8_0=.deps/whisper/models/ggml-tiny.en-q8_0.bin")
    ap.add_argument("--out", default="bench/results/whisper-ctx.md")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="whisper-ctx-")
    wav, spans = material(tmp, args.limit)
    runs = [(int(n), measure(args, tmp, wav, spans, int(n))) for n in args.loads.split(",")]
    text = report(args, spans, runs)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
