#!/usr/bin/env python3
"""Turns bench/run's JSON lines into BENCHMARKS.md, followed by the per-area results in bench/results/."""
import glob, json, os, platform, subprocess, sys, datetime

path = sys.argv[1]
smoke = "--smoke" in sys.argv
rows = [json.loads(l) for l in open(path) if l.strip()]

def by(bench):
    return [r for r in rows if r["bench"] == bench]

def fmt(x, digits=0):
    return f"{x:,.{digits}f}"

out = []
out.append("# Benchmarks\n")
out.append("Produced by `bench/run` (release build) on this project's CI machine kind: 2 cores, shared and noisy, so the")
out.append("**ratios** against GStreamer doing the same work in the same run matter more than the absolute figures.")
cpu = ""
try:
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
except Exception:
    pass
out.append(f"\nLast run: {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores, {cpu}{' (smoke run: tiny inputs, figures meaningless)' if smoke else ''}.\n")

chain = by("chain")
if chain:
    out.append("## Pass-through chains (issue 2, 8)\n")
    out.append("Frames per second through N pass-through stages, 320-sample frames, source and sink included.")
    out.append("voicepipe: `voicepipe-bench chain --stages N` (fused: the runtime runs a linear chain of frame")
    out.append("processors in one task; unfused: one task per node, bounded queues of 32 between them).")
    out.append("GStreamer: `gst-launch-1.0 audiotestsrc num-buffers=N samplesperbuffer=320 ! identity ! ... ! fakesink`")
    out.append("(single thread) and the same with `queue !` before each `identity` (a thread per stage).\n")
    out.append("| stages | voicepipe fused | voicepipe unfused | GStreamer identity | GStreamer queue+identity | fused / identity | fused / queue |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for s in sorted({r["stages"] for r in chain}):
        get = lambda impl: next((r["frames_per_s"] for r in chain if r["stages"] == s and r["impl"] == impl), None)
        f, u, gi, gq = get("voicepipe"), get("voicepipe unfused"), get("gstreamer identity"), get("gstreamer queue+identity")
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "—"
        out.append(f"| {s} | {fmt(f) if f else '—'} | {fmt(u) if u else '—'} | {fmt(gi) if gi else '—'} | {fmt(gq) if gq else '—'} | {ratio(f, gi)} | {ratio(f, gq)} |")
    out.append("")

lat = by("latency")
if lat:
    out.append("## Per-hop latency\n")
    out.append("A frame every 1 ms through 16 pass-through stages; send-to-arrival time at the sink, divided by 17 hops.")
    out.append("Command: `voicepipe-bench latency --stages 16 --frames 5000 --interval-us 1000 [--no-fuse]`.\n")
    out.append("| runtime | chain p50 µs | chain p99 µs | per hop p50 µs | per hop p99 µs |")
    out.append("|---|---:|---:|---:|---:|")
    for r in lat:
        out.append(f"| {r['impl']} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | {r['per_hop_p50_us']:.2f} | {r['per_hop_p99_us']:.2f} |")
    out.append("")

dsp = by("dsp")
if dsp:
    out.append("## DSP throughput (issue 4, 8)\n")
    out.append("x-real-time of WAV 48 kHz → resample to 16 kHz → VAD → slicer → Opus 16 kb/s → null.")
    out.append("voicepipe: `voicepipe run bench/graphs/dsp-chain.yaml --set src.path=bench/out/speech48k-x20.wav` (the bundled sample at 48 kHz, 20 times);")
    out.append("GStreamer: `gst-launch-1.0 filesrc ! wavparse ! audioresample ! audio/x-raw,rate=16000 ! audioconvert ! opusenc bitrate=16000 ! fakesink`")
    out.append("(GStreamer does no VAD or slicing: it does less work).\n")
    out.append("| runtime | audio s | wall s | x real time |")
    out.append("|---|---:|---:|---:|")
    for r in dsp:
        out.append(f"| {r['impl']} | {r['audio_s']:.1f} | {r['seconds']:.2f} | {r['x_realtime']:.0f} |")
    v = next((r for r in dsp if r["impl"] == "voicepipe"), None)
    g = next((r for r in dsp if r["impl"] == "gstreamer"), None)
    if v and g:
        out.append(f"\nRatio voicepipe / GStreamer: **{v['x_realtime'] / g['x_realtime']:.2f}**.\n")

scale = by("scale")
if scale:
    out.append("## Many real-time pipelines in one process (issue 8)\n")
    out.append("N copies of `bench/graphs/recognizer-style.yaml` (file source at 1x → volume → VAD → slicer → Opus → null)")
    out.append("in one process: `voicepipe run bench/graphs/recognizer-style.yaml --instances N --stats`, CPU and RSS sampled")
    out.append("from /proc over the measurement window, drops summed from the `--stats` table.\n")
    out.append("Late frames: frames the file source delivered more than one frame length after their due time")
    out.append("(the process was too busy to wake it in time). RSS per added pipeline is the growth between rows.\n")
    out.append("| pipelines | CPU (cores) | CPU per pipeline | RSS MiB | RSS per pipeline KiB | RSS per added pipeline KiB | dropped frames | late frames |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    prev = None
    for r in scale:
        marginal = f"{(r['rss_kib'] - prev['rss_kib']) / (r['pipelines'] - prev['pipelines']):.0f}" if prev else "—"
        out.append(f"| {r['pipelines']} | {r['cpu_cores']:.2f} | {r['cpu_per_pipeline_pct']:.2f} % | {r['rss_kib'] / 1024:.1f} | {r['rss_per_pipeline_kib']:.0f} | {marginal} | {r['dropped']} | {r.get('late', 0)} |")
        prev = r
    ok = [r["pipelines"] for r in scale if r["dropped"] == 0 and r.get("late", 0) == 0]
    out.append(f"\nLargest N measured with no dropped and no late frames: **{max(ok)}**.\n" if ok else
               "\nNo N measured was free of late frames (see the closing notes of issue 8 for why); none dropped a frame.\n")

st = by("startup")
if st:
    out.append("## Start-up\n")
    out.append("Wall time of `voicepipe run bench/graphs/startup.yaml` (process start, graph load and validation, one")
    out.append("20 ms frame through to a sink, exit) against `gst-launch-1.0 audiotestsrc num-buffers=1 ! fakesink`.\n")
    out.append("| runtime | seconds |")
    out.append("|---|---:|")
    for r in st:
        out.append(f"| {r['impl']} | {r['seconds'] * 1000:.0f} ms |")
    out.append("")

for f in sorted(glob.glob("bench/results/*.md")):
    out.append("\n---\n")
    out.append(open(f).read().strip())
    out.append("")

print("\n".join(out))
