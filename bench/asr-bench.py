#!/usr/bin/env python3
"""PocketSphinx figures for the asr node: real-time factor, word error rate, and the time from
end of speech to the final transcript with a file source paced in real time.

    python3 bench/asr-bench.py [--voicepipe .build/release/voicepipe]

Needs flite and sox. Speech is made with flite at run time; nothing is downloaded.
"""
import argparse, json, os, statistics, subprocess, tempfile, time

from textmetrics import edit_distance, words

SENTENCES = [
    "the weather is nice today",
    "please turn on the lights in the kitchen",
    "i would like a cup of coffee",
    "the meeting starts at ten o'clock",
    "call me when you get home",
    "open the door please",
    "how are you doing today",
    "my phone number is one two three four",
    "i want to go home",
    "we need more information about the project",
    "play some music",
    "can you help me find my keys",
    "thank you very much",
    "what time is it",
]
GAP_S, LEAD_S = 1.0, 0.5


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def speak(sentences, voice, out, tmp):
    """Returns the [start, end] media seconds of each sentence in `out`."""
    parts, spans, t = [], [], LEAD_S
    for i, s in enumerate(sentences):
        raw, part = f"{tmp}/{voice}{i}.wav", f"{tmp}/{voice}p{i:03d}.wav"
        sh("flite", "-voice", voice, "-t", s, "-o", raw)
        sh("sox", raw, "-r", "16000", "-c", "1", "-b", "16", part, "pad", str(LEAD_S if i == 0 else 0), str(GAP_S))
        d = float(sh("soxi", "-D", raw))
        spans.append((t, t + d))
        t += d + GAP_S
        parts.append(part)
    sh("sox", *parts, "-r", "16000", "-c", "1", "-b", "16", out)
    return spans


def graph(path, realtime, tmp, name):
    g = f"""version: 1
name: {name}
nodes:
  src: {{ type: file-source, path: "{path}", realtime: {str(realtime).lower()} }}
  vad: {{ type: vad, stop_ms: 600 }}
  asr: {{ type: asr, engine: pocketsphinx }}
  out: {{ type: jsonl-sink, path: "-" }}
links:
  - src -> vad -> asr
  - asr.events -> out
  - vad.events -> out
"""
    p = f"{tmp}/{name}.yaml"
    open(p, "w").write(g)
    return p


def run(vp, yaml):
    t0 = time.monotonic()
    r = subprocess.run([vp, "run", yaml], check=True, capture_output=True, text=True)
    wall = time.monotonic() - t0
    return wall, [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--repeat", type=int, default=3, help="copies of the sentence set in the real-time factor input")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="asr-bench-")
    vp = os.path.abspath(a.voicepipe)

    # Model loading, measured on 0.2 s of silence.
    sh("sox", "-n", "-r", "16000", "-c", "1", "-b", "16", f"{tmp}/silence.wav", "trim", "0", "0.2")
    loads = [run(vp, graph(f"{tmp}/silence.wav", False, tmp, "load"))[0] for _ in range(3)]
    load = statistics.median(loads)
    print(f"startup + model load (median of 3): {load:.3f} s")

    for voice in ["slt", "rms"]:
        wav = f"{tmp}/{voice}.wav"
        spans = speak(SENTENCES, voice, wav, tmp)
        audio_s = float(sh("soxi", "-D", wav))

        # Word error rate and utterance count, as fast as possible.
        wall, events = run(vp, graph(wav, False, tmp, f"wer-{voice}"))
        finals = [e for e in events if e["event"] == "transcript" and e["final"]]
        finished = next(e["text"] for e in events if e["event"] == "finished")
        ref = words(" ".join(SENTENCES))
        errors = edit_distance(ref, words(finished))
        print(f"{voice}: {len(finals)} utterances for {len(SENTENCES)} sentences; WER {errors}/{len(ref)} = {errors / len(ref):.3f}")
        for s, f in zip(SENTENCES, finals):
            if words(s) != words(f["text"]):
                print(f"   said: {s!r}  heard: {f['text']!r}")

        # Real-time factor: the sentence set repeated, decoded as fast as possible.
        long = f"{tmp}/{voice}-long.wav"
        sh("sox", *([wav] * a.repeat), long)
        long_s = float(sh("soxi", "-D", long))
        wall, _ = run(vp, graph(long, False, tmp, f"rtf-{voice}"))
        print(f"{voice}: {long_s:.1f} s of audio in {wall:.2f} s wall ({wall - load:.2f} s after load): "
              f"RTF {(wall - load) / long_s:.3f}")

        # End of speech -> final transcript, file source paced at 1x.
        wall, events = run(vp, graph(wav, True, tmp, f"latency-{voice}"))
        finals = [e for e in events if e["event"] == "transcript" and e["final"]]
        ends = [e for e in events if e["event"] == "speech_end"]
        lat = [f["ts"] - span[1] for f, span in zip(finals, spans)]
        vad_lat = [f["ts"] - e["media_ms"] / 1000 for f, e in zip(finals, ends)]
        print(f"{voice}: end of speech -> final: median {statistics.median(lat) * 1000:.0f} ms, "
              f"max {max(lat) * 1000:.0f} ms (vad speech_end media time -> final: median {statistics.median(vad_lat) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
