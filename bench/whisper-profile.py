#!/usr/bin/env python3
"""Where a Whisper final's time goes: `voicepipe run` of a recognizer graph under `perf record` (sampled call
stacks, DWARF unwinding), each sample put in one bucket by its stack.

    bench/whisper-profile.py [--voicepipe .build/release/voicepipe] [--graph pipelines/recognizer-file.yaml]
                             [--input samples/sentences.wav] [--freq 999] [--paced] [--busy N]
                             [--out bench/results/whisper-profile.md]

Buckets, the first that matches from the leaf up: Whisper's encoder (whisper_encode_internal), its decoder
(whisper_decode_internal: every token's pass), the log-mel spectrogram (log_mel_spectrogram /
whisper_pcm_to_mel), the rest of whisper_full (sampling, timestamps, the language and token bookkeeping),
the VAD node, the other nodes of the graph (file source, volume, slicer, asr's own Swift code, the sink),
Swift's runtime and concurrency, the kernel (on behalf of the process), and anything else (the dynamic
loader, model loading, libc). The encoder and decoder rows are also split by the ggml kernel at the leaf.

Needs perf (linux-perf) and a kernel that lets this user sample its own processes (perf_event_paranoid <= 2).
"""
import argparse, collections, os, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (bucket, substrings of a frame's symbol that put a sample in it), checked from the leaf frame up for the
# whisper buckets (the innermost whisper function that calls ggml decides), then the others.
WHISPER = [("encoder", ("whisper_encode_internal",)), ("decoder", ("whisper_decode_internal",)),
           ("log-mel spectrogram", ("log_mel_spectrogram", "whisper_pcm_to_mel")),
           ("whisper_full, the rest (sampling, timestamps)", ("whisper_full", "whisper_process_logits", "whisper_exp_compute_token_level"))]
# Checked after the whisper buckets (a decoder's buffers are made inside whisper_init_state, not in a decoding).
LOADING = ("whisper_model_load", "whisper_init", "vp_whisper_model_load", "vp_whisper_state_new", "whisper_kv_cache_init", "warm_up")
NODES = [("VAD node", ("VADNode", "speex_preprocess", "SpeexVAD", "Silero", "7VADNode")),
         ("slicer node", ("Slicer",)), ("file source, volume, sink", ("FileSource", "VolumeNode", "JSONL", "Jsonl")),
         ("asr node (Swift around whisper.cpp)", ("WhisperEngine", "WhisperDecoderPool", "ASRNode", "ASREndpointer"))]


def bucket(frames):
    """frames: [(symbol, dso)] from the leaf to the root."""
    for name, keys in WHISPER:
        if any(any(k in sym for k in keys) for sym, _ in frames):
            return name
    if any(any(k in sym for k in LOADING) for sym, _ in frames):
        return "model loading, decoder buffers, the load's warm-up"
    for name, keys in NODES:
        if any(any(k in sym for k in keys) for sym, _ in frames):
            return name
    leaf_sym, leaf_dso = frames[0] if frames else ("", "")
    if "kernel.kallsyms" in leaf_dso:
        return "kernel"
    if any(("libswift_Concurrency" in d or "libswiftCore" in d or "libdispatch" in d or "libFoundation" in d) for _, d in frames[:3]):
        return "Swift runtime, concurrency, Foundation"
    if "ld-linux" in leaf_dso:
        return "dynamic loader (start-up)"
    return "other (libc, start-up, unattributed)"


def parse(script_text):
    """Samples of `perf script` output: (comm, [(sym, dso)])."""
    samples, cur, head = [], [], None
    for line in script_text.splitlines():
        if not line.strip():
            if head is not None:
                samples.append((head, cur))
            head, cur = None, []
            continue
        if not line.startswith((" ", "\t")):
            head = line.split()[0]
            continue
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        rest = parts[1]
        sym, _, dso = rest.rpartition(" (")
        cur.append((sym or rest, dso.rstrip(")")))
    if head is not None:
        samples.append((head, cur))
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--graph", default="pipelines/recognizer-file.yaml")
    ap.add_argument("--input", default="human", help="a 16 kHz mono WAV, or `human`: the 5 LibriVox and 5 \"cards\" clips of "
                    "Debian's pocketsphinx-testdata, 1 s of silence after each (about 45 s)")
    ap.add_argument("--freq", type=int, default=999, help="samples per second per CPU")
    ap.add_argument("--paced", action="store_true", help="read the file at 1x (file-source realtime: true)")
    ap.add_argument("--busy", type=int, default=0, help="competing busy processes during the run")
    ap.add_argument("--out", default="bench/results/whisper-profile.md")
    a = ap.parse_args()
    command = "bench/whisper-profile.py " + " ".join(sys.argv[1:])
    work = tempfile.mkdtemp(prefix="whisper-profile-")
    graph = os.path.join(ROOT, a.graph)
    if a.paced:
        text = open(graph).read()
        assert "realtime: false" in text, "the graph's file-source has no 'realtime: false' to turn on"
        graph = os.path.join(work, "graph.yaml")
        open(graph, "w").write(text.replace("realtime: false", "realtime: true"))
    data = os.path.join(work, "perf.data")
    if a.input == "human":
        d = "/usr/share/pocketsphinx/test/data"
        clips = [os.path.join(d, "librivox", f) for f in sorted(os.listdir(os.path.join(d, "librivox"))) if f.endswith(".wav")]
        clips += [os.path.join(d, "cards", f"00{i}.wav") for i in range(1, 6)]
        parts = []
        for i, clip in enumerate(clips):
            part = os.path.join(work, f"c{i}.wav")
            subprocess.run(["sox", clip, "-r", "16000", "-c", "1", "-b", "16", part, "pad", "0", "1"], check=True)
            parts.append(part)
        wav = os.path.join(work, "human.wav")
        subprocess.run(["sox"] + parts + [wav], check=True)
        a.input = "human (pocketsphinx-testdata: 5 LibriVox, 5 cards clips)"
    else:
        wav = os.path.abspath(os.path.join(ROOT, a.input))
    env = dict(os.environ, INPUT=wav)
    load_before = float(open("/proc/loadavg").read().split()[0])
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        started = time.monotonic()
        run = subprocess.run(["perf", "record", "-F", str(a.freq), "--call-graph", "dwarf,16384", "-o", data, "--",
                              os.path.abspath(os.path.join(ROOT, a.voicepipe)), "run", graph, "--log-level", "debug"],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
    finally:
        for b in busy:
            b.kill()
            b.wait()
    if run.returncode != 0:
        sys.exit(f"whisper-profile: perf record / voicepipe run failed ({run.returncode}): {run.stderr[-2000:]}")
    decodes = [l.split("whisper: ", 1)[1] for l in run.stderr.splitlines()
               if "whisper: utterance" in l and ("decoded in" in l or "turned down" in l or "said over" in l)]
    partials = sum(1 for l in run.stdout.splitlines() if '"final":false' in l)
    finals = [l for l in run.stdout.splitlines() if '"final":true' in l]
    script = subprocess.run(["perf", "script", "--no-inline", "-i", data, "-F", "comm,tid,ip,sym,dso"],
                            capture_output=True, text=True).stdout
    samples = parse(script)
    counts = collections.Counter()
    leaves = {"encoder": collections.Counter(), "decoder": collections.Counter()}
    for comm, frames in samples:
        b = bucket(frames)
        counts[b] += 1
        if b in leaves and frames:
            leaves[b][frames[0][0].split("(")[0]] += 1
    total = sum(counts.values())
    cpu_s = total / a.freq
    L = ["# Where a Whisper final's time goes: a sampled profile of `voicepipe run`", "",
         f"Command: `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} shared cores, "
         f"load average before {load_before:.2f}{f', {a.busy} competing busy process(es)' if a.busy else ''}; "
         f"binary {a.voicepipe} built {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(os.path.getmtime(os.path.join(ROOT, a.voicepipe))))}). "
         f"`perf record -F {a.freq} --call-graph dwarf,16384 -- voicepipe run {a.graph}` with INPUT={a.input}"
         f"{' read at 1x' if a.paced else ' read as fast as possible'}; {total} samples ≈ {cpu_s:.2f} s of CPU in "
         f"{wall:.2f} s of wall time (perf's own start-up included). Each sample goes in the first bucket its call stack "
         "matches (see the script's header); the share is of all the process's samples, threads together.", "",
         "| bucket | samples | CPU s | share |", "|---|---:|---:|---:|"]
    for name, n in counts.most_common():
        L.append(f"| {name} | {n} | {n / a.freq:.2f} | {100 * n / total:.1f}% |")
    L.append("")
    L.append(f"Whisper's own compute (encoder, decoder, log-mel, whisper_full's sampling): "
             f"{100 * sum(counts.get(k, 0) for k, _ in WHISPER) / total:.1f}% of the process's CPU; encoder / decoder "
             f"{counts.get('encoder', 0) / max(1, counts.get('decoder', 0)):.1f} : 1. The encoder row includes each decoder "
             "thread's warm-up (1 s of silence at 64 frames, once per thread at start).")
    L.append("")
    for part in ("encoder", "decoder"):
        n = counts.get(part, 0)
        if not n:
            continue
        top = ", ".join(f"{sym} {100 * c / n:.0f}%" for sym, c in leaves[part].most_common(5))
        L.append(f"- {part}: at the leaf {top}.")
    L += ["", f"Finals: {len(finals)}, partials shown: {partials}; per utterance, from the debug log (a final's tries that a check "
          "turned down follow it):", ""]
    L += [f"- {d}" for d in decodes]
    L.append("")
    os.makedirs(os.path.dirname(os.path.abspath(os.path.join(ROOT, a.out))), exist_ok=True)
    open(os.path.join(ROOT, a.out), "w").write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
