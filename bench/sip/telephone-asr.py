#!/usr/bin/env python3
"""Recognition on telephone audio: Whisper and PocketSphinx through voicepipe's recognizer graph, on the
material of bench/whisper-bench.py, once as recorded (16 kHz) and once through each telephone channel.

    bench/sip/telephone-asr.py [--voicepipe .build/debug/voicepipe] [--smoke] [--out FILE]

Channels (what a `sip` route's graph receives; the route decodes the codec and converts to the graph's
rate, 16 kHz here, with the same speexdsp converter that `file-source`'s `rate: 16000` uses):
  wideband   the 16 kHz recording itself;
  8k         resampled to 8 kHz only (sox), nothing else: what losing 4-8 kHz alone costs;
  8k-band    8 kHz and band-limited to 300-3400 Hz (sox `sinc 300-3400`, the telephone band of G.712);
  pcmu       8k-band, then G.711 µ-law encoded and decoded (Python's audioop, the ITU tables);
  pcma       the same with A-law;
  g722       16 kHz band-limited to 50-7000 Hz, then G.722 at 64 kbit/s encoded and decoded with
             spandsp (libspandsp.so.2, the library the `sip` route loads for G.722).
The narrowband channels are 8 kHz files that the graph's file-source converts to 16 kHz (`rate: 16000`).

Engines: `engine: whisper` (Whisper tiny.en, .deps/whisper/models/ggml-tiny.en.bin, threads 2,
beam_size 1) and `engine: pocketsphinx` (Debian's en-us model), in the graph of
bench/whisper-bench.py (file-source, volume, vad stop_ms 350, slicer, asr), as fast as possible.

Word error rate as bench/whisper-bench.py counts it (same normalization of case, punctuation and
numbers), per material and pooled over all material (edits summed over reference words summed).

`--pocketsphinx-model DIR` adds `engine: pocketsphinx` with `model_dir: DIR` as a third engine (for an
acoustic model of another sample rate or front-end).
"""
import argparse, audioop, ctypes, datetime, importlib.util, json, os, subprocess, sys, tempfile, wave

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHANNELS = ["wideband", "8k", "8k-band", "pcmu", "pcma", "g722"]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path):
    with wave.open(path) as w:
        return w.getframerate(), w.readframes(w.getnframes())


def write(path, rate, pcm):
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate); w.writeframes(pcm)


def sox(*args):
    subprocess.run(["sox", "-V1", *args], check=True)


class G722:
    """spandsp's G.722 codec at 64 kbit/s, as the `sip` route loads it."""
    def __init__(self):
        self.lib = ctypes.CDLL(os.environ.get("VOICEPIPE_SPANDSP", "libspandsp.so.2"))
        for f in ("g722_encode_init", "g722_decode_init"):
            getattr(self.lib, f).restype = ctypes.c_void_p
            getattr(self.lib, f).argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        for f in ("g722_encode", "g722_decode"):
            getattr(self.lib, f).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        for f in ("g722_encode_free", "g722_decode_free"):
            getattr(self.lib, f).argtypes = [ctypes.c_void_p]

    def round_trip(self, pcm):
        n = len(pcm) // 2
        enc, dec = self.lib.g722_encode_init(None, 64000, 0), self.lib.g722_decode_init(None, 64000, 0)
        coded = ctypes.create_string_buffer(n // 2 + 2)
        k = self.lib.g722_encode(enc, coded, pcm, n)
        out = ctypes.create_string_buffer(4 * k + 8)
        m = self.lib.g722_decode(dec, out, coded.raw[:k], k)
        self.lib.g722_encode_free(enc); self.lib.g722_decode_free(dec)
        return out.raw[:2 * m]


def channel(src, name, tmp, g722):
    """The file `src` (16 kHz) as heard through channel `name`: a WAV file."""
    if name == "wideband":
        return src
    base = os.path.join(tmp, os.path.basename(src)[:-4])
    out = f"{base}-{name}.wav"
    if name == "8k":
        sox(src, "-r", "8000", "-b", "16", out)
    elif name == "8k-band":
        sox(src, "-r", "8000", "-b", "16", out, "sinc", "300-3400")
    elif name in ("pcmu", "pcma"):
        rate, pcm = read(channel(src, "8k-band", tmp, g722))
        if name == "pcmu":
            pcm = audioop.ulaw2lin(audioop.lin2ulaw(pcm, 2), 2)
        else:
            pcm = audioop.alaw2lin(audioop.lin2alaw(pcm, 2), 2)
        write(out, rate, pcm)
    elif name == "g722":
        sox(src, "-r", "16000", "-b", "16", f"{base}-g722-in.wav", "sinc", "50-7000")
        rate, pcm = read(f"{base}-g722-in.wav")
        write(out, rate, g722.round_trip(pcm))
    else:
        raise ValueError(f"unknown channel {name!r}; expected one of {', '.join(CHANNELS)}")
    return out


def graph(tmp, engine, asr):
    path = f"{tmp}/{engine}.yaml"
    with open(path, "w") as f:
        f.write(f"""version: 1
name: telephone-asr-{engine}
nodes:
  mic:    {{ type: file-source, path: "${{INPUT}}", realtime: false, frame_ms: 20, rate: 16000 }}
  volume: {{ type: volume, interval_ms: 100 }}
  vad:    {{ type: vad, stop_ms: 350 }}
  slicer: {{ type: slicer, mode: utterance, slice_ms: 600, delivery: stream }}
  asr:    {{ type: asr, {asr} }}
  out:    {{ type: jsonl-sink, path: "-" }}
links:
  - mic -> volume -> vad -> slicer -> asr
  - asr.events -> out
""")
    return path


def build(wb, vp):
    """The binary; the source commit only when it is this checkout's."""
    if vp.startswith(ROOT + "/"):
        return wb.describe_build(vp)
    built = datetime.datetime.fromtimestamp(os.path.getmtime(vp)).strftime("%Y-%m-%d %H:%M")
    return f"{'release' if '/release/' in vp else 'debug'} build `{vp}` built {built}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--voicepipe", default=os.path.join(ROOT, ".build/debug/voicepipe"))
    ap.add_argument("--smoke", action="store_true", help="two flite sentences, one voice")
    ap.add_argument("--channels", default=",".join(CHANNELS))
    ap.add_argument("--pocketsphinx-model", help="also pocketsphinx with this acoustic model directory")
    ap.add_argument("--out", help="write the Markdown report here too")
    args = ap.parse_args()
    channels = args.channels.split(",")
    for c in channels:
        if c not in CHANNELS:
            sys.exit(f"telephone-asr: unknown channel {c!r}; expected some of {', '.join(CHANNELS)}")
    if not os.access(args.voicepipe, os.X_OK):
        sys.exit(f"telephone-asr: {args.voicepipe} is not an executable (swift build --product voicepipe)")
    wb = load("whisper_bench", os.path.join(ROOT, "bench/whisper-bench.py"))
    ac = wb.load_compare()
    engines = [("pocketsphinx", "engine: pocketsphinx")]
    if os.path.exists(wb.GGML_MODEL):
        engines.insert(0, ("whisper", f"engine: whisper, model: \"{wb.GGML_MODEL}\", threads: {wb.THREADS}, beam_size: 1"))
    else:
        print(f"telephone-asr: {wb.GGML_MODEL} missing (scripts/install-whisper.sh): PocketSphinx only", file=sys.stderr)
    if args.pocketsphinx_model:
        engines.append(("pocketsphinx-model", f"engine: pocketsphinx, model_dir: \"{os.path.abspath(args.pocketsphinx_model)}\""))
    g722 = G722() if "g722" in channels else None

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(ROOT)
        materials = wb.materials(ac, tmp, args.smoke)
        graphs = {e: graph(tmp, e, asr) for e, asr in engines}
        # results[engine][channel][material] = (edits, reference words, texts)
        results = {e: {c: {} for c in channels} for e, _ in engines}
        for m in materials:
            ref = " ".join(m["refs"])
            for c in channels:
                wav = channel(m["wav"], c, tmp, g722)
                for e, _ in engines:
                    try:
                        out, _, wall, cpu, _ = wb.child([args.voicepipe, "run", graphs[e], "--quiet"],
                                                        env={**os.environ, "INPUT": wav}, timeout=300 + 6 * m["audio_s"])
                    except wb.ChildFailed as err:
                        sys.exit(f"telephone-asr: {e} on {m['key']} through {c}: {err}")
                    events = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
                    texts = [x.get("text", "") for x in events if x.get("event") == "transcript" and x.get("final")]
                    r = wb.normalize(ref)
                    edits = wb.edit_distance(r, wb.normalize(" ".join(texts)))
                    results[e][c][m["key"]] = (edits, len(r), texts)
                    print(f"{e:18} {c:9} {m['key']:16} WER {100 * edits / max(1, len(r)):5.1f} %  ({wall:.1f} s)", file=sys.stderr, flush=True)

    keys = [m["key"] for m in materials]
    lines = [f"# Recognition on telephone audio (issue 41)", "",
             f"Command: `bench/sip/telephone-asr.py {' '.join(sys.argv[1:])}`; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"{build(wb, os.path.abspath(args.voicepipe))}; load average at the end {os.getloadavg()[0]:.2f}.", "",
             "Word error rate (%), pooled over the material, then per material:", "",
             "| engine | " + " | ".join(channels) + " |", "|---|" + "---:|" * len(channels)]
    for e, _ in engines:
        row = []
        for c in channels:
            edits = sum(results[e][c][k][0] for k in keys); n = sum(results[e][c][k][1] for k in keys)
            row.append(f"{100 * edits / max(1, n):.1f}")
        lines.append(f"| {e} | " + " | ".join(row) + " |")
    lines += ["", "| engine | material | " + " | ".join(channels) + " |", "|---|---|" + "---:|" * len(channels)]
    for e, _ in engines:
        for k in keys:
            lines.append(f"| {e} | {k} | " + " | ".join(f"{100 * results[e][c][k][0] / max(1, results[e][c][k][1]):.1f}" for c in channels) + " |")
    lines += ["", "## Transcripts", ""]
    for k in keys:
        lines.append(f"**{k}**")
        for e, _ in engines:
            for c in channels:
                lines.append(f"- {e}, {c}: " + " / ".join(results[e][c][k][2]))
        lines.append("")
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
