#!/usr/bin/env python3
"""Replays end-of-turn policies offline on Smart Turn's answers, to compare policies without a run each.

    bench/turn-replay.py [--voicepipe .build/debug/voicepipe] [--stop-ms 100] [--out FILE]

One voicepipe run on bench/turn-bench.py's material (the same sentences, whole and with a 300-900 ms
pause) records: the VAD alone at stop_ms 350 and 600 (the baselines), a VAD at `--stop-ms` for the
segmentation (where each silence ends), and a `turn_model: smart-turn` VAD that asks the model at every
silence of `--stop-ms` and never ends a turn before 2 s of silence (min_pause_ms = max_pause_ms = 2000),
so that every item is one turn and every answer is logged (`--log-level debug`: "vad: smart-turn
probability P for the speech that ended at media_ms T"). Then each policy - a wait W(p) after the model's
answer p - is replayed: a turn ends at the first silence longer than max(stop_ms, W(p)).

The replay is exact for the first decision in each item; after a false cut-off the real node would start a
new turn, whose model input differs (the replay keeps the whole item), which moves only the delay of the
items already counted as cut off. Compare its `scaled` row with bench/turn-bench.py's for the same setting.
"""
import argparse, array, bisect, importlib.util, json, os, re, subprocess, sys, tempfile, wave

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("turn_bench", os.path.join(here, "turn-bench.py"))
tb = importlib.util.module_from_spec(spec); spec.loader.exec_module(tb)
RATE = tb.RATE


def ms(samples): return samples * 1000 / RATE


def record(voicepipe, wav, stop, tmp, engine="silero"):
    detectors = {
        "vad350": f"{{ type: vad, engine: {engine}, stop_ms: 350 }}",
        "vad600": f"{{ type: vad, engine: {engine}, stop_ms: 600 }}",
        "segments": f"{{ type: vad, engine: {engine}, stop_ms: {stop} }}",
        "answers": f"{{ type: vad, engine: {engine}, stop_ms: {stop}, turn_model: smart-turn, turn_policy: scaled, min_pause_ms: 2000, max_pause_ms: 2000 }}",
    }
    events, graph = os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "replay.yaml")
    with open(graph, "w") as g:
        g.write(f"version: 1\nname: turn-replay\nnodes:\n  src: {{ type: file-source, path: \"{wav}\" }}\n")
        for name, s in detectors.items(): g.write(f"  {name}: {s}\n")
        g.write(f"  out: {{ type: jsonl-sink, path: \"{events}\" }}\n  drop: {{ type: null-sink }}\nlinks:\n")
        for name in detectors: g.write(f"  - src -> {name} -> drop\n  - {name}.events -> out\n")
    r = subprocess.run([voicepipe, "run", graph, "--log-level", "debug"], capture_output=True, text=True)
    if r.returncode != 0: sys.exit(f"voicepipe failed ({r.returncode}): {r.stderr[-800:]}")
    answers = [(int(m.group(2)), float(m.group(1))) for m in
               re.finditer(r"node=answers .*?probability ([0-9.e-]+) for the speech that ended at media_ms (\d+)", r.stderr)]
    ev = [json.loads(l) for l in open(events)]
    starts = sorted(e["media_ms"] for e in ev if e.get("node") == "segments" and e.get("event") == "speech_start")
    ends = {n: [(e["media_ms"], e["media_ms"] + e["silence_ms"]) for e in ev if e.get("node") == n and e.get("event") == "speech_end"]
            for n in ("vad350", "vad600")}
    return answers, starts, ends


def summary(cut, paused, delays):
    d = sorted(delays)
    return dict(cut=cut, paused=paused, mean=sum(d) / len(d), p90=d[int(0.9 * (len(d) - 1))])


def replay(items, answers, starts, stop, wait):
    cut = paused = 0; delays = []
    for it in items:
        lo, hi = ms(it["start"]), ms(it["end"]) + 3500
        mine = [(e, p) for e, p in answers if lo <= e < hi]
        ended = None
        for e, p in mine:
            i = bisect.bisect_right(starts, e)
            silence = starts[i] - e if i < len(starts) else float("inf")
            w = max(stop, wait(p))
            if silence > w: ended = (e, e + w); break
        if it["paused"]:
            paused += 1
            cut += bool(ended and ended[0] < ms(it["p1"]))
        if ended and ended[0] >= ms(it["end"]) - 300: final = ended
        elif mine: e, p = mine[-1]; final = (e, e + max(stop, wait(p)))
        else: continue
        delays.append(final[1] - ms(it["end"]))
    return summary(cut, paused, delays)


def baseline(items, ends):
    cut = paused = 0; delays = []
    for it in items:
        lo, hi = ms(it["start"]), ms(it["end"]) + 3500
        mine = [e for e in ends if lo <= e[0] < hi]
        if it["paused"]: paused += 1; cut += any(e[0] < ms(it["p1"]) for e in mine)
        final = [e for e in mine if e[0] >= ms(it["end"]) - 300]
        if final: delays.append(final[-1][1] - ms(it["end"]))
    return summary(cut, paused, delays)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/debug/voicepipe")
    ap.add_argument("--stop-ms", type=int, default=100)
    ap.add_argument("--out")
    ap.add_argument("--engine", default="silero", help="the VAD under every detector: silero or speex")
    ap.add_argument("--material", default=",".join(tb.KINDS), help="comma-separated: " + ", ".join(tb.ALL_KINDS))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="turn-replay-")
    wav, items = tb.build(tmp, args.material.split(","))
    answers, starts, ends = record(args.voicepipe, wav, args.stop_ms, tmp, args.engine)
    subsets = [("all", items), ("recordings", [it for it in items if tb.recorded(it["kind"])]),
               ("synthesized (flite, espeak-ng)", [it for it in items if not tb.recorded(it["kind"])])]
    lines = [f"`bench/turn-replay.py --stop-ms {args.stop_ms} --engine {args.engine} --material {args.material}`: {len(answers)} model answers, "
             f"{len(items)} items ({len(items) // 2} sentences whole and paused)."]
    for title, sub in subsets:
        if not sub: continue
        rows = [(f"VAD alone, stop {n[3:]} ms (measured)", baseline(sub, ends[n])) for n in ("vad350", "vad600")]
        for cap in (800, 900, 1000, 1100, 1200, 1500, 2000):
            for gamma in (1, 1.5, 2, 3):
                name = f"wait = {cap}·(1 − p)" + ("" if gamma == 1 else f"^{gamma}")
                rows.append((name, replay(sub, answers, starts, args.stop_ms, lambda p, c=cap, g=gamma: c * (1 - p) ** g)))
        for t in (0.5, 0.7, 0.9):
            for cap in (1500, 2000):
                rows.append((f"threshold {t}, else wait {cap}", replay(sub, answers, starts, args.stop_ms, lambda p, t=t, c=cap: 0 if p >= t else c)))
        lines += ["", f"### {title}: {len(sub) // 2} sentences", "",
                  "| policy | false cut-offs | mean delay ms | p90 delay ms |", "|---|---|---:|---:|"]
        for name, r in rows:
            lines.append(f"| {name} | {r['cut']}/{r['paused']} | {r['mean']:.0f} | {r['p90']:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f: f.write(text)


if __name__ == "__main__":
    main()
