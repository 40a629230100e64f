#!/usr/bin/env python3
"""Threads per Whisper decoding, 1 against 2 (and `decoders`), on the same recording in alternating runs, so a
shared machine's changing load falls on every setting alike.

    bench/whisper-threads.py [--voicepipe .build/release/voicepipe] [--busy 1] [--rounds 3]
                             [--settings 'threads: 1;threads: 2;threads: 1, decoders: 1']

Each run: `voicepipe run` of pipelines/recognizer-file.yaml (as fast as possible) on the pocketsphinx-testdata
human clips (45 s; see bench/whisper-profile.py) with the asr parameters of one setting, `--log-level debug`;
reported per setting: wall time (median over the rounds) and the sum of the finals' decode_ms and queued_ms.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def human(work):
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
    return wav


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--busy", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settings", default="threads: 1;threads: 2;threads: 1, decoders: 1")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="whisper-threads-")
    wav = human(work)
    base = open(os.path.join(ROOT, "pipelines/recognizer-file.yaml")).read()
    assert "engine: whisper, fallback: pocketsphinx" in base
    settings = [s.strip() for s in a.settings.split(";") if s.strip()]
    graphs = []
    for i, s in enumerate(settings):
        g = os.path.join(work, f"g{i}.yaml")
        open(g, "w").write(base.replace("engine: whisper, fallback: pocketsphinx", f"engine: whisper, {s}"))
        graphs.append(g)
    load_before = float(open("/proc/loadavg").read().split()[0])
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    results = {s: [] for s in settings}
    try:
        time.sleep(1.0 if busy else 0)
        for r in range(a.rounds):
            for s, g in zip(settings, graphs):
                t0 = time.monotonic()
                p = subprocess.run([os.path.join(ROOT, a.voicepipe), "run", g], cwd=ROOT, env=dict(os.environ, INPUT=wav),
                                   capture_output=True, text=True)
                wall = time.monotonic() - t0
                if p.returncode != 0:
                    sys.exit(f"whisper-threads: voicepipe run failed: {p.stderr[-1500:]}")
                finals = [json.loads(l) for l in p.stdout.splitlines() if '"final":true' in l]
                results[s].append((wall, sum(f.get("decode_ms", 0) for f in finals), sum(f.get("queued_ms", 0) for f in finals),
                                   " ".join(f.get("text", "") for f in finals)))
    finally:
        for b in busy:
            b.kill()
            b.wait()
    load_after = float(open("/proc/loadavg").read().split()[0])
    L = ["| asr setting | wall, median (runs) | decode_ms summed, median | queued_ms summed, median | same words in every run |",
         "|---|---:|---:|---:|---|"]
    for s in settings:
        rs = results[s]
        L.append(f"| `{s}` | {statistics.median(x[0] for x in rs):.2f} s ({', '.join(f'{x[0]:.1f}' for x in rs)}) | "
                 f"{statistics.median(x[1] for x in rs) / 1000:.2f} s | {statistics.median(x[2] for x in rs) / 1000:.2f} s | "
                 f"{'yes' if len(set(x[3] for x in rs)) == 1 else 'no'} |")
    head = (f"`bench/whisper-threads.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} cores, {a.busy} competing busy process(es), load average {load_before:.2f} before, {load_after:.2f} after; "
            f"{a.rounds} rounds, settings alternating)")
    text = head + "\n\n" + "\n".join(L) + "\n"
    if a.out:
        open(a.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
