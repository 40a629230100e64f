#!/usr/bin/env python3
"""`voicepipe serve` with Whisper (pipelines/serve-whisper.yaml) against PocketSphinx
(pipelines/serve-recognizer.yaml) on one worker: memory and threads per session, and how many
real-time sessions one worker keeps within --budget (1.5 s unless told) from the VAD's speech_end to final.

    bench/serve-whisper.py [--voicepipe .build-release/release/voicepipe] [--levels 1,2,4,8,12,16,24]
                           [--memory-levels 1,10,50] [--sweeps ENGINE:START,...] [--whisper-params 'threads: 1']
                           [--budget 1.0] [--busy 1] [--out bench/results/serve-whisper.md] [--smoke]

Every measurement starts a fresh server (a serve configuration written to a temporary directory: one
`websocket` route, /ws/recognize, on the engine's graph) and talks to it as clients do: binary
16 kHz s16le in, JSON events out.

- Memory: the server's VmRSS idle (before any session), then with N sessions open and streaming flite
  speech at 1x, sampled every 100 ms once every session's recognizer is running, and VmHWM; the
  server's threads (/proc/PID/status) at the same moments; then the clients drop their connections
  and, 3 s later, VmRSS, threads, the sessions /metrics still counts and the server's CPU.
- Churn: rounds of complete sessions on one server; VmRSS and threads after each round.
- Real time: N sessions each stream a few flite sentences with pauses at 1x, started together (as
  bench/serve-load.py does) or spread over the clip; the VAD's speech_end event -> final (the issue's
  definition) and the true end of speech -> final (the last sample above -40 dBFS of each sentence, on
  the sender's clock), p50 / p95 / max, finals delivered and right (word error rate 0), drops
  (/metrics voicepipe_drops_total), errors, server threads. A sweep stops at the first level that
  misses: every final delivered and right, no drop, no error, speech_end -> final p95 under --budget.

--smoke: 1 and 2 sessions, one sentence, whisper's sweep only; writes bench/out/serve-whisper.md.
"""
import argparse, asyncio, json, os, re, socket, subprocess, sys, tempfile, time, urllib.request, wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_client as c  # noqa: E402
from textmetrics import wer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = {"whisper": "pipelines/serve-whisper.yaml", "pocketsphinx": "Tests/Fixtures/serve-pocketsphinx.yaml"}
# Variants: an engine's graph with more asr parameters (a copy in the temporary directory).
VARIANTS = {"whisper-no-partials": ("whisper", "partial_interval_ms: 10000")}
EXTRA = {}  # engine -> asr parameters added to every graph of that engine (--whisper-params)
# Sentences both engines get word for word from flite's voice alone (checked on tiny.en and en-us).
SENTENCES = ["please open the garage door", "what is the weather like tomorrow",
             "close the window in the bedroom", "remind me to buy milk"]
BUDGET_S = 1.5


class Client(c.WebSocket):
    """serve_client's WebSocket with masking done on whole integers: fifty sessions of 40 ms frames
    from one Python process would otherwise take a good part of a core away from the server."""

    def _frame(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        key = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little") if n else b""
        return head + mask + masked


# ---------------------------------------------------------------- speech

def make_speech(dir, sentences, pause_s=1.2, lead_s=0.4):
    """flite sentences joined with pauses; returns the 16 kHz PCM, its rate and each sentence's end of
    speech (seconds from the start of the clip)."""
    parts, ends, offset = [], [], 0.0
    for i, s in enumerate(sentences):
        raw = os.path.join(dir, f"s{i}.wav")
        subprocess.run(["flite", "-voice", "slt", "-t", s, "-o", raw], check=True)
        out = os.path.join(dir, f"p{i}.wav")
        subprocess.run(["sox", raw, "-r", "16000", out, "pad", str(lead_s) if i == 0 else "0", str(pause_s)], check=True)
        with wave.open(out) as w:
            n, rate, data = w.getnframes(), w.getframerate(), w.readframes(w.getnframes())
        loud = [i for i in range(0, len(data), 2) if abs(int.from_bytes(data[i:i + 2], "little", signed=True)) > 328]
        ends.append(offset + (loud[-1] // 2 if loud else 0) / rate)
        offset += n / rate
        parts.append(out)
    path = os.path.join(dir, "speech.wav")
    subprocess.run(["sox"] + parts + [path], check=True)
    audio, rate = c.pcm(path)
    return audio, rate, ends


# ---------------------------------------------------------------- server

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def status(pid):
    """VmRSS, VmHWM (MB) and Threads of a process."""
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024
            elif k == "Threads":
                out[k] = int(v)
    except FileNotFoundError:
        pass
    return out


def loadavg():
    """The 1-minute load average: how busy the shared machine was."""
    return float(open("/proc/loadavg").read().split()[0])


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    drops = sum(float(v) for v in re.findall(r'^voicepipe_drops_total\{[^}]*\} (\S+)$', text, re.M))
    errors = sum(float(v) for v in re.findall(r'^voicepipe_errors_total\{[^}]*\} (\S+)$', text, re.M))
    active = sum(float(v) for v in re.findall(r'^voicepipe_sessions_active(?:\{[^}]*\})? (\S+)$', text, re.M))
    return drops, errors, active


def graph_for(label, workdir):
    """The graph file of an engine or variant: the engine's file, or a copy in workdir with the
    variant's and --whisper-params' asr parameters added."""
    engine, params = (label, "") if label in GRAPHS else VARIANTS[label]
    params = ", ".join(p for p in (EXTRA.get(engine, ""), params) if p)
    path = os.path.join(ROOT, GRAPHS[engine])
    if not params:
        return path
    text = open(path).read()
    assert f"engine: {engine} }}" in text
    copy = os.path.join(workdir, f"serve-{label}.yaml")
    open(copy, "w").write(text.replace(f"engine: {engine} }}", f"engine: {engine}, {params} }}"))
    return copy


class Server:
    """`voicepipe serve` on a free port with one websocket route on the engine's graph."""

    def __init__(self, vp, engine, workdir, tag):
        self.port = free_port()
        self.log = os.path.join(workdir, f"server-{tag}.log")
        config = os.path.join(workdir, f"serve-{tag}.yaml")
        with open(config, "w") as f:
            f.write(f"listen: {{ host: 127.0.0.1, port: {self.port} }}\n"
                    "max_sessions: 200\n"
                    "drain_grace_s: 5\n"
                    "routes:\n"
                    "  - name: raw\n"
                    "    path: /ws/recognize\n"
                    "    protocol: websocket\n"
                    f"    graph: {graph_for(engine, workdir)}\n"
                    "    idle_timeout_ms: 120000\n")
        self.process = subprocess.Popen([vp, "serve", config, "--log-level", "warning"], cwd=ROOT, stdout=subprocess.PIPE,
                                        stderr=open(self.log, "w"), text=True)
        line = self.process.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"voicepipe serve did not start ({line.strip()!r}); see {self.log}")
        self.pid = self.process.pid
        self.url = f"ws://127.0.0.1:{self.port}/ws/recognize"

    def stop(self):
        """SIGTERM; returns the exit code (None when it had to be killed) and the log's last notable lines."""
        self.process.terminate()
        try:
            rc = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            rc = None
        lines = [l for l in open(self.log).read().splitlines() if l.strip()]
        notable = [l for l in lines if re.search(r"crash|fatal|error|Signal", l, re.I)]
        return rc, (notable or lines)[-5:]


# ---------------------------------------------------------------- sessions

class Session:
    def __init__(self):
        self.connected = self.asr_ready = self.sending_done = self.closed = None
        self.stream_start = None
        # finals: (arrival, text, end_ms, decode_ms, queued_ms); speech_ends: (arrival, media_ms) of the VAD's events
        self.finals, self.empty_finals, self.errors, self.speech_ends = [], 0, [], []
        self.sent_s = 0.0
        self.failure = None


async def run_session(url, audio, rate, delay_s=0.0, stop=None, session=None):
    """One client: connect after delay_s and stream at 1x; without `stop`, the clip once, then end and
    collect the finals until the server closes; with it, the clip again and again until `stop` is
    set, then drop the connection."""
    s = session or Session()
    await asyncio.sleep(delay_s)
    try:
        ws = await Client.connect(url, timeout=120)
    except Exception as e:  # noqa: BLE001 (reported, not raised: one refused session is a result)
        s.failure = f"connect: {e}"
        return s
    s.connected = time.monotonic()

    async def reader():
        while True:
            m = await ws.receive()
            if m is None:
                return
            if not isinstance(m, str):
                continue
            e = json.loads(m)
            if s.asr_ready is None and e.get("node") == "asr":
                s.asr_ready = time.monotonic()
            if e.get("event") == "speech_end" and e.get("node") == "vad":
                s.speech_ends.append((time.monotonic(), e.get("media_ms", 0)))
            elif e.get("event") == "transcript" and e.get("final"):
                if e.get("text", "").strip():
                    s.finals.append((time.monotonic(), e["text"], e.get("end_ms"), e.get("decode_ms"), e.get("queued_ms")))
                else:
                    s.empty_finals += 1
            elif e.get("event") == "error":
                s.errors.append(e)

    task = asyncio.create_task(reader())
    step = rate * 2 * 40 // 1000
    s.stream_start = time.monotonic()
    try:
        sent = 0
        while True:
            for i in range(0, len(audio), step):
                await ws.send_binary(audio[i:i + step])
                sent += min(step, len(audio) - i)
                s.sent_s = sent / 2 / rate
                delay = s.stream_start + s.sent_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if stop is not None and stop.is_set():
                    break
            if stop is None or stop.is_set():
                break
        s.sending_done = time.monotonic()
        if stop is not None:
            # Memory runs: drop the connection, as a client that goes away does.
            ws.writer.close()
            task.cancel()
            s.closed = time.monotonic()
            return s
        await ws.send_text(json.dumps({"type": "end"}))
        await asyncio.wait_for(task, 300)
        s.closed = time.monotonic()
    except Exception as e:  # noqa: BLE001
        s.failure = f"{type(e).__name__}: {e}"
        task.cancel()
    return s


def speech_end_for(session, end_ms):
    """Arrival of the VAD's last speech_end at or before a final's end (its utterance's end), or None."""
    ends = [t for t, m in session.speech_ends if end_ms is None or m <= end_ms]
    return ends[-1] if ends else None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


# ---------------------------------------------------------------- memory and threads

async def memory_level(vp, engine, n, audio, rate, workdir, hold_s):
    """A fresh server; idle RSS and threads; then n sessions streaming at 1x until every one has had an
    event from its recognizer (graph built, decoder created, running) and hold_s more; samples every
    100 ms; then every client disconnects."""
    server = Server(vp, engine, workdir, f"mem-{engine}-{n}")
    await asyncio.sleep(1.0)
    idle = status(server.pid)
    stop = asyncio.Event()
    sessions = [Session() for _ in range(n)]
    tasks = [asyncio.create_task(run_session(server.url, audio, rate, stop=stop, session=s)) for s in sessions]
    samples, all_open_at, deadline = [], None, time.monotonic() + 180 + 2 * n
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        st = status(server.pid)
        active = sum(1 for s in sessions if s.asr_ready and not s.sending_done and not s.failure)
        samples.append((time.monotonic(), active, st))
        if all_open_at is None and active == n:
            all_open_at = time.monotonic()
        if all_open_at is not None and time.monotonic() - all_open_at >= hold_s:
            break
        if all(t.done() for t in tasks):
            break
    window = [st for t, a, st in samples if all_open_at is not None and t >= all_open_at and a == n and st]
    peak_active = max((a for _, a, _ in samples), default=0)
    if not window:  # never all at once: the samples with the most sessions active
        window = [st for _, a, st in samples if a == peak_active and st]
    during = status(server.pid)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(3.0)
    after = status(server.pid)
    c0 = proc_cpu(server.pid)
    await asyncio.sleep(1.0)
    cpu_after = proc_cpu(server.pid) - c0
    drops, errors, active_after = metrics(server.port)
    rc, log = server.stop()
    return {"load": loadavg(), "engine": engine, "n": n, "idle_rss": idle.get("VmRSS", 0), "idle_threads": idle.get("Threads", 0),
            "rss": max((w["VmRSS"] for w in window), default=0), "threads": max((w["Threads"] for w in window), default=0),
            "threads_max": max((st.get("Threads", 0) for _, _, st in samples), default=0),
            "hwm": during.get("VmHWM", 0), "active": n if all_open_at else peak_active,
            "after_rss": after.get("VmRSS", 0), "after_threads": after.get("Threads", 0),
            "after_sessions": active_after, "after_cpu": cpu_after,
            "failures": sum(1 for s in sessions if s.failure), "drops": drops, "errors": errors,
            "exit": rc, "log": log}


async def churn(vp, engine, n, rounds, audio, rate, sentences, workdir):
    """One server, `rounds` rounds of n complete sessions one after another: RSS and threads after
    each round (memory or threads a session leaves behind grow round after round)."""
    server = Server(vp, engine, workdir, f"churn-{engine}")
    await asyncio.sleep(1.0)
    out = [status(server.pid)]
    finals = 0
    for _ in range(rounds):
        ss = await asyncio.gather(*[run_session(server.url, audio, rate) for _ in range(n)])
        finals += sum(len(s.finals) for s in ss)
        await asyncio.sleep(2.0)
        out.append(status(server.pid))
    rc, log = server.stop()
    return {"engine": engine, "n": n, "rounds": rounds, "rss": [o.get("VmRSS", 0) for o in out],
            "threads": [o.get("Threads", 0) for o in out], "finals": finals, "expected": n * rounds * sentences, "exit": rc, "log": log}


# ---------------------------------------------------------------- real time

async def latency_level(vp, engine, n, start, audio, rate, ends, sentences, workdir):
    server = Server(vp, engine, workdir, f"rt-{engine}-{start}-{n}")
    await asyncio.sleep(1.0)
    duration = len(audio) / 2 / rate
    cpu0 = proc_cpu(server.pid)
    threads = [status(server.pid).get("Threads", 0)]
    stop_sampling = asyncio.Event()

    async def sampler():
        while not stop_sampling.is_set():
            threads.append(status(server.pid).get("Threads", 0))
            await asyncio.sleep(0.2)

    sampling = asyncio.create_task(sampler())
    delays = [0.0] * n if start == "together" else [k * duration / n for k in range(n)]
    sessions = await asyncio.gather(*[run_session(server.url, audio, rate, delay_s=d) for d in delays])
    stop_sampling.set()
    await sampling
    cpu = proc_cpu(server.pid) - cpu0
    drops, errors, _ = metrics(server.port)
    rc, log = server.stop()
    lat, vad_lat, per_sentence, complete, right, words_wrong, words = [], [], {}, 0, 0, 0, 0
    for s in sessions:
        texts = [f[1] for f in s.finals]
        if s.failure is None and len(texts) == len(sentences) and not s.errors:
            complete += 1
            if all(wer(ref, hyp) == 0 for ref, hyp in zip(sentences, texts)):
                right += 1
        whole = " ".join(texts)
        words += sum(len(x.split()) for x in sentences)
        words_wrong += wer(" ".join(sentences), whole) * sum(len(x.split()) for x in sentences)
        for k, (f, e) in enumerate(zip(s.finals, ends)):
            arrival, _, end_ms, decode_ms, queued_ms = f
            lat.append(arrival - (s.stream_start + e))
            se = speech_end_for(s, end_ms)
            if se is not None:
                vad_lat.append(arrival - se)
            per_sentence.setdefault(k, []).append((arrival - (s.stream_start + e), arrival - se if se is not None else float("nan"),
                                                   decode_ms, queued_ms))
    failures = [s.failure for s in sessions if s.failure]
    return {"load": loadavg(), "engine": engine, "start": start, "n": n, "complete": complete, "right": right, "drops": drops, "errors": errors,
            "session_errors": sum(len(s.errors) for s in sessions), "failures": failures, "empty_finals": sum(s.empty_finals for s in sessions),
            "finals": sum(len(s.finals) for s in sessions), "expected": n * len(sentences), "wer": words_wrong / max(words, 1),
            "p50": pct(lat, 0.5), "p95": pct(lat, 0.95), "max": max(lat) if lat else float("nan"),
            "vad_p50": pct(vad_lat, 0.5), "vad_p95": pct(vad_lat, 0.95), "vad_max": max(vad_lat) if vad_lat else float("nan"),
            "vad_n": len(vad_lat), "per_sentence": {k: v for k, v in per_sentence.items()},
            "threads": max(threads), "cpu_per_session_s": cpu / n, "audio_s": duration, "exit": rc, "log": log,
            "example": " | ".join(f[1] for f in sessions[0].finals) if sessions else ""}


def passed(r, strict=False):
    """The issue's test: every final right, no drop or error, p95 of VAD speech_end -> final under the budget
    (every final paired with a speech_end); strict: the same from the true end of speech."""
    ok = (r["complete"] == r["n"] and r["right"] == r["n"] and r["drops"] == 0 and r["session_errors"] == 0
          and not r["failures"])
    if strict:
        return ok and r["p95"] < BUDGET_S
    return ok and r["vad_n"] == r["finals"] and r["vad_p95"] < BUDGET_S


# ---------------------------------------------------------------- report

def revision():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def ms(x):
    return "–" if x != x else f"{x * 1000:.0f}"


def slowest(r):
    """The sentence whose worst speech_end -> final is the largest, with that final's decode and queue times."""
    worst = None
    for k, rows in r["per_sentence"].items():
        for true_end, vad, decode_ms, queued_ms in rows:
            x = vad if vad == vad else true_end
            if worst is None or x > worst[1]:
                worst = (k, x, decode_ms, queued_ms)
    if worst is None:
        return "–"
    k, x, d, q = worst
    return f"#{k + 1}: {ms(x)} ms (decode {d if d is not None else '?'} / queued {q if q is not None else '?'} ms)"


def report(a, command, mem, churns, sweeps, audio_s, mem_audio_s, sentences):
    L = [f"# voicepipe serve with Whisper: memory, threads and real-time sessions on one worker", "",
         f"Command: `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} shared cores, "
         f"{os.path.relpath(a.voicepipe, ROOT) if a.voicepipe.startswith(ROOT) else a.voicepipe} built "
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(os.path.getmtime(a.voicepipe)))}, tree at {revision()}). "
         "One `voicepipe serve` worker per row, a fresh process each time, one `websocket` route (/ws/recognize) on "
         "pipelines/serve-whisper.yaml (`asr: { engine: whisper" + (f", {a.whisper_params}" if a.whisper_params else "") +
         " }`, tiny.en" + ("" if a.whisper_params else f", default `decoders` and `threads`: {os.cpu_count()} decoder(s) of 1 thread here") + ") or "
         "Tests/Fixtures/serve-pocketsphinx.yaml (`engine: pocketsphinx`; pipelines/serve-recognizer.yaml prefers Whisper now), the same VAD and slicer. "
         + " ".join(f"`{k}`: {e} with `{p}`." for k, (e, p) in VARIANTS.items() if any(r["engine"] == k for r in sweeps))
         + f" Load average (1 min) before the run {a.load_before:.2f}"
         + (f"; {a.busy} competing busy process{'es' if a.busy > 1 else ''} (`python3 -c 'while True: pass'`, not pinned) ran through the whole measurement"
            if a.busy else "; no competing process started by the bench")
         + ("; load average at the end of each real-time level: " + ", ".join(f"{r['engine']} {r['start']} {r['n']}: {r['load']:.2f}" for r in sweeps) if sweeps else "")
         + ".", ""]
    if mem:
        L += ["## Memory and threads per session", "",
              f"Each session streams flite speech ({mem_audio_s:.1f} s, looped) at 1x. VmRSS and Threads are the highest of the "
              f"samples taken every 100 ms while all N sessions are open and streaming (from the moment every session has had an "
              f"event from its `asr` node, so every graph is built and its recognizer running, for {a.hold:.0f} s); VmHWM at the end of "
              "that window. Then every client drops its connection; \"after\" is 3 s later: VmRSS, Threads, the sessions "
              "/metrics still counts as active and the server's CPU over the next second (cores).", "",
              "| engine | sessions | VmRSS idle | VmRSS, N active | VmHWM | MB per extra session | threads idle / N active | "
              "after: VmRSS / threads / sessions / CPU |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for engine in a.engines:
            rows = [r for r in mem if r["engine"] == engine]
            one = next((r for r in rows if r["n"] == 1), None)
            for r in rows:
                per = (r["rss"] - one["rss"]) / (r["n"] - 1) if one and r["n"] > 1 else float("nan")
                note = "" if r["active"] == r["n"] else f" (only {r['active']} at once)"
                L.append(f"| {engine} | {r['n']}{note} | {r['idle_rss']:.0f} MB | {r['rss']:.0f} MB | {r['hwm']:.0f} MB | "
                         f"{'–' if per != per else f'{per:.1f} MB'} | {r['idle_threads']} / {r['threads']} | "
                         f"{r['after_rss']:.0f} MB / {r['after_threads']} / {r['after_sessions']:.0f} / {r['after_cpu']:.2f} |")
        L.append("")
    if churns:
        L += ["## Sessions coming and going", "",
              f"One server, rounds of complete sessions ({mem_audio_s:.1f} s of speech once, end, finals) one after another; VmRSS and Threads "
              "before the first round and 2 s after each.", "",
              "| engine | sessions per round | VmRSS after each round (MB) | threads after each round | finals |", "|---|---:|---|---|---:|"]
        for r in churns:
            L.append(f"| {r['engine']} | {r['n']} | {' → '.join(f'{x:.0f}' for x in r['rss'])} | {' → '.join(str(x) for x in r['threads'])} | "
                     f"{r['finals']}/{r['expected']} |")
        L.append("")
    if sweeps:
        L += ["## Real-time sessions", "",
              f"Each session streams {audio_s:.1f} s of flite speech at 1x: {len(sentences)} sentence{'s' if len(sentences) > 1 else ''}, 1.2 s of silence after each "
              f"(\"{sentences[0]}\", ...), then ends and waits for its last final. `together`: all sessions start at once (as "
              "bench/serve-load.py; every utterance of every session ends at the same moment); `spread`: session k starts "
              "k/N of the clip later. Two figures per final, both on the client's clock: from the VAD's `speech_end` event (serve "
              "forwards the graph's events; the one paired with a final is the session's last `speech_end` whose media_ms is at or "
              "before the final's end_ms) to the final's arrival, the issue's definition; and from the true end of speech (the "
              "sentence's last sample above -40 dBFS, sent at 1x) to the final's arrival, stricter by the VAD's hang-over "
              "(`stop_ms: 350`, about 360–380 ms, plus a frame). "
              f"A level passes with every final delivered and right (WER 0), no drop, no error and `speech_end` → final p95 < {BUDGET_S:.1f} s; "
              f"the last column says whether it also holds from the true end of speech. The sweep stops at the first level that misses "
              "by the issue's definition. Slowest sentence: the sentence (1-based) with the largest `speech_end` → final of the level, "
              "its worst figure and that final's `decode_ms` / `queued_ms`.", "",
              "| engine | start | sessions | finals | sessions all right | WER | drops | errors | speech_end → final p50 / p95 / max | "
              "true end of speech → final p50 / p95 / max | slowest sentence | server CPU per session | threads (max) | issue: p95 < budget | "
              "from true end |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|"]
        for r in sweeps:
            L.append(f"| {r['engine']} | {r['start']} | {r['n']} | {r['finals']}/{r['expected']} | {r['right']}/{r['n']} | {r['wer'] * 100:.1f}% | "
                     f"{r['drops']:.0f} | {r['session_errors'] + len(r['failures'])} | {ms(r['vad_p50'])} / {ms(r['vad_p95'])} / {ms(r['vad_max'])} ms | "
                     f"{ms(r['p50'])} / {ms(r['p95'])} / {ms(r['max'])} ms | {slowest(r)} | "
                     f"{r['cpu_per_session_s']:.2f} s per {r['audio_s']:.1f} s | {r['threads']} | {'pass' if passed(r) else 'miss'} | "
                     f"{'pass' if passed(r, strict=True) else 'miss'} |")
        L.append("")
        for key in dict.fromkeys((r["engine"], r["start"]) for r in sweeps):
            ok = [r["n"] for r in sweeps if (r["engine"], r["start"]) == key and passed(r)]
            strict = [r["n"] for r in sweeps if (r["engine"], r["start"]) == key and passed(r, strict=True)]
            L.append(f"- **{key[0]}, {key[1]}: largest N with every final right and `speech_end` → final p95 < {BUDGET_S:.1f} s: "
                     f"{max(ok, default=0)}** (from the true end of speech: {max(strict, default=0)}).")
        L.append("")
    bad = [r for r in mem + churns + sweeps if r.get("exit") != 0]
    L.append("Every server exited 0 on SIGTERM." if not bad else
             "Servers that did not exit 0 on SIGTERM: " + "; ".join(f"{r['engine']} n={r['n']}: {r['exit']}" for r in bad) + ".")
    L.append("")
    return L


async def main():
    global BUDGET_S
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voicepipe", default=".build-release/release/voicepipe")
    ap.add_argument("--levels", default="1,2,4,8,12,16,24", help="real-time sweep: sessions per level")
    ap.add_argument("--memory-levels", default="1,10,50", help="memory: sessions per level (idle is measured on each server)")
    ap.add_argument("--engines", default="whisper,pocketsphinx", help="engines for the memory table")
    ap.add_argument("--sweeps", default="whisper:together,whisper:spread,whisper-no-partials:together,whisper-no-partials:spread,pocketsphinx:together",
                    help="real-time sweeps, ENGINE:START with START together or spread; ENGINE may be a variant: "
                    + ", ".join(f"{k} ({e} with {p})" for k, (e, p) in VARIANTS.items()))
    ap.add_argument("--churn", default="whisper:10x3", help="ENGINE:NxROUNDS for the sessions-coming-and-going table ('' = none)")
    ap.add_argument("--hold", type=float, default=6.0, help="memory: seconds to keep sampling once all sessions stream")
    ap.add_argument("--whisper-params", default="", help="extra asr parameters for whisper, e.g. 'threads: 1, decoders: 2' "
                    "(a copy of pipelines/serve-whisper.yaml in the temporary directory)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds from end of speech to final (p95) a level must keep")
    ap.add_argument("--busy", type=int, default=0, help="competing processes, each a busy loop on no particular core, running "
                    "through the whole measurement (as on a shared server)")
    ap.add_argument("--out", default="bench/results/serve-whisper.md")
    ap.add_argument("--smoke", action="store_true", help="1 and 2 sessions, one sentence: checks that it runs")
    a = ap.parse_args()
    BUDGET_S = a.budget
    command = "bench/serve-whisper.py " + " ".join(x if " " not in x else f"'{x}'" for x in sys.argv[1:])
    if a.smoke:
        a.levels, a.memory_levels, a.hold = "1,2", "1,2", 2.0
        a.sweeps, a.churn = "whisper:together", ""
        if a.out == ap.get_default("out"):
            a.out = "bench/out/serve-whisper.md"
    a.voicepipe = os.path.abspath(a.voicepipe)
    a.engines = [e for e in a.engines.split(",") if e]
    if not os.path.exists(os.path.join(ROOT, ".deps/whisper/models/ggml-tiny.en.bin")) and not os.environ.get("VOICEPIPE_WHISPER_MODEL"):
        sys.exit("serve-whisper: no Whisper model (.deps/whisper/models/ggml-tiny.en.bin); run scripts/install-whisper.sh")
    sentences = SENTENCES[:1] if a.smoke else SENTENCES
    work = tempfile.mkdtemp(prefix="serve-whisper-")
    EXTRA["whisper"] = a.whisper_params
    audio, rate, ends = make_speech(work, sentences)
    os.makedirs(os.path.join(work, "memory"))
    mem_audio, _, _ = make_speech(os.path.join(work, "memory"), SENTENCES[:2])

    a.load_before = loadavg()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    if busy:
        await asyncio.sleep(2.0)
    try:
        mem, churns, sweeps = await measure(a, audio, rate, ends, sentences, mem_audio, work)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    lines = report(a, command, mem, churns, sweeps, len(audio) / 2 / rate, len(mem_audio) / 2 / rate, sentences)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    open(a.out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"serve-whisper: server logs in {work}", file=sys.stderr)
    bad = [r for r in mem + churns + sweeps if r.get("exit") != 0]
    for r in bad:
        print(f"serve-whisper: the server of {r['engine']} {r.get('start', '')} n={r['n']} exited {r['exit']} on SIGTERM: {r['log']}", file=sys.stderr)


async def measure(a, audio, rate, ends, sentences, mem_audio, work):
    mem = []
    for engine in a.engines:
        for n in [int(x) for x in a.memory_levels.split(",") if x]:
            r = await memory_level(a.voicepipe, engine, n, mem_audio, rate, work, a.hold)
            mem.append(r)
            print(json.dumps(r), flush=True)
    churns = []
    for spec in [x for x in a.churn.split(",") if x]:
        engine, nr = spec.split(":")
        n, rounds = (int(x) for x in nr.split("x"))
        r = await churn(a.voicepipe, engine, n, rounds, mem_audio, rate, 2, work)
        churns.append(r)
        print(json.dumps(r), flush=True)
    sweeps = []
    for spec in [x for x in a.sweeps.split(",") if x]:
        engine, start = spec.split(":")
        for n in [int(x) for x in a.levels.split(",") if x]:
            r = await latency_level(a.voicepipe, engine, n, start, audio, rate, ends, sentences, work)
            sweeps.append(r)
            print(json.dumps(r), flush=True)
            if not passed(r) and not a.smoke:
                break
    return mem, churns, sweeps


if __name__ == "__main__":
    asyncio.run(main())
