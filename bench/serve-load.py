#!/usr/bin/env python3
"""Load generator for `voicepipe serve`: N concurrent real-time sessions on the tencent-asr route, each
streaming the same flite speech at 1x, as Tencent clients do.

    bench/serve-load.py [--voicepipe .build/release/voicepipe] [--levels 1,2,4,8,12,16] [--out bench/results/serve.md]

For each level it starts a fresh server (pipelines/serve.yaml on a free port), opens the sessions at once,
and measures: every session's final transcript delivered (and right), drops inside the session graphs
(/metrics voicepipe_drops_total), end of speech -> final (p50 / p99), connect -> first result (start-up),
server CPU (utime+stime from /proc) and peak memory (VmHWM) per session. The largest N with every final
delivered and no drop is reported."""
import argparse, asyncio, json, os, re, socket, subprocess, sys, tempfile, time, urllib.request, wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_client as c  # noqa: E402

SENTENCES = ["please open the garage door", "turn on the kitchen light"]
APPID, SID, SKEY = "1250000001", "AKIDload", "load-test-key"


def make_speech(dir):
    parts, ends, t = [], [], 0.4
    for i, s in enumerate(SENTENCES):
        raw = os.path.join(dir, f"s{i}.wav")
        subprocess.run(["flite", "-voice", "slt", "-t", s, "-o", raw], check=True)
        out = os.path.join(dir, f"p{i}.wav")
        subprocess.run(["sox", raw, "-r", "16000", out, "pad", "0.4" if i == 0 else "0", "1.2"], check=True)
        parts.append(out)
    path = os.path.join(dir, "speech.wav")
    subprocess.run(["sox"] + parts + [path], check=True)
    # Ends of speech: the last sample above -40 dBFS of each part, on the joined timeline.
    offset = 0.0
    for p in parts:
        with wave.open(p) as w:
            n, rate, data = w.getnframes(), w.getframerate(), w.readframes(w.getnframes())
        samples = [int.from_bytes(data[i:i + 2], "little", signed=True) for i in range(0, len(data), 2)]
        last = max((i for i, v in enumerate(samples) if abs(v) > 328), default=0)
        ends.append(offset + last / rate)
        offset += n / rate
    return path, ends


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_hwm(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def session(port, audio, rate, ends):
    t0 = time.monotonic()
    ws = await c.WebSocket.connect(c.tencent_url(f"ws://127.0.0.1:{port}", APPID, SID, SKEY), timeout=30)
    first, finals, final_times, errors = None, [], [], []
    stream_start = None

    async def reader():
        nonlocal first
        while True:
            m = await ws.receive()
            if m is None:
                return
            msg = json.loads(m)
            if msg.get("code", 0) != 0:
                errors.append(msg)
            r = msg.get("result")
            if r is not None:
                if first is None:
                    first = time.monotonic() - t0
                if r.get("slice_type") == 2:
                    finals.append(r["voice_text_str"])
                    final_times.append(time.monotonic())

    task = asyncio.create_task(reader())
    stream_start = time.monotonic()
    await c.stream(ws, audio, rate, chunk_ms=40, pace=1.0)
    await ws.send_text(json.dumps({"type": "end"}))
    await asyncio.wait_for(task, 120)
    lat = [ft - (stream_start + e) for ft, e in zip(final_times, ends)]
    return {"first": first, "finals": finals, "latency": lat, "errors": errors}


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    drops = sum(float(v) for v in re.findall(r'^voicepipe_drops_total\{[^}]*\} (\S+)$', text, re.M))
    return drops


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


async def level(vp, n, audio, rate, ends, workdir):
    port = free_port()
    env = dict(os.environ, SERVE_PORT=str(port), SERVE_HOST="127.0.0.1", MAX_SESSIONS=str(max(n, 1)), WYOMING_PORT=str(free_port()),
               TENCENT_APPID=APPID, TENCENT_SECRET_ID=SID, TENCENT_SECRET_KEY=SKEY)
    server = subprocess.Popen([vp, "serve", "pipelines/serve.yaml", "--log-level", "warning"], env=env,
                              stdout=subprocess.PIPE, stderr=open(os.path.join(workdir, f"server-{n}.log"), "w"), text=True)
    server.stdout.readline()
    cpu0 = proc_cpu(server.pid)
    results = await asyncio.gather(*[session(port, audio, rate, ends) for _ in range(n)], return_exceptions=True)
    cpu = proc_cpu(server.pid) - cpu0
    hwm = proc_hwm(server.pid)
    drops = metrics(port)
    server.terminate()
    server.wait(timeout=60)
    ok = [r for r in results if isinstance(r, dict)]
    complete = [r for r in ok if len(r["finals"]) == len(SENTENCES) and not r["errors"]]
    right = [r for r in complete if all(any(w in f for w in s.split()[-2:]) for f, s in zip(r["finals"], SENTENCES))]
    lat = [x for r in ok for x in r["latency"]]
    firsts = [r["first"] for r in ok if r["first"] is not None]
    return {"n": n, "complete": len(complete), "right": len(right), "failed": n - len(ok), "drops": drops,
            "final_p50": pct(lat, 0.5), "final_p99": pct(lat, 0.99), "first_p50": pct(firsts, 0.5), "first_p99": pct(firsts, 0.99),
            "cpu_per_session_s": cpu / max(n, 1), "audio_s": len(audio) / 2 / rate, "hwm_mb": hwm}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--levels", default="1,2,4,8,12,16")
    ap.add_argument("--out", default="bench/results/serve.md")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="serve-load-")
    path, ends = make_speech(work)
    audio, rate = c.pcm(path)
    rows = []
    for n in [int(x) for x in a.levels.split(",")]:
        r = await level(a.voicepipe, n, audio, rate, ends, work)
        rows.append(r)
        print(json.dumps(r), flush=True)
        if r["complete"] < n or r["drops"] > 0:
            break
    best = max([r["n"] for r in rows if r["complete"] == r["n"] and r["drops"] == 0], default=0)
    timely = max([r["n"] for r in rows if r["complete"] == r["n"] and r["drops"] == 0 and r["final_p99"] <= 1.5], default=0)
    lines = ["# voicepipe serve under load (issue 14)", "",
             f"Command: `bench/serve-load.py --voicepipe {a.voicepipe} --levels {a.levels}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} cores). Each session streams {rows[0]['audio_s']:.1f} s of flite speech ({len(SENTENCES)} sentences) at 1x on the "
             "tencent-asr route (pipelines/serve.yaml: VAD, streaming slicer, embedded PocketSphinx), all sessions at once, a fresh server per level.", "",
             "| sessions | finals delivered | right | drops | end of speech → final p50 / p99 | connect → first result p50 / p99 | server CPU per session | server peak RSS |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['complete']}/{r['n']} | {r['right']} | {r['drops']:.0f} | {r['final_p50']*1000:.0f} / {r['final_p99']*1000:.0f} ms | "
                     f"{r['first_p50']*1000:.0f} / {r['first_p99']*1000:.0f} ms | {r['cpu_per_session_s']:.2f} s per {r['audio_s']:.1f} s of audio | {r['hwm_mb']:.0f} MB |")
    lines += ["", f"**Largest N with every final delivered and no drop: {best}. Largest N with that and end of speech → final p99 ≤ 1.5 s "
              f"(real time): {timely}.**", ""]
    open(a.out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
