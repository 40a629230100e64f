#!/usr/bin/env python3
"""Soak of `voicepipe serve`: a steady mix of good sessions and hostile clients for a long time, with the
server's resident memory, open file descriptors and threads sampled throughout.

    bench/serve-soak.py [--voicepipe .build/debug/voicepipe] [--minutes 60] [--out bench/results/serve-soak.md]

One server (pipelines/serve.yaml, PocketSphinx). Two Tencent-protocol sessions and one Wyoming session run
back to back at real time all along, each checked for its transcripts (Tencent: a final per sentence;
Wyoming: one transcript holding both). Every 2 s a hostile client
of one of these classes (the ones the tests cover) is started, in turn:
  malformed HTTP, a connection that sends nothing, one byte a second, a bad signature, an old signature,
  Wyoming garbage, Wyoming audio-start then silence, a WebSocket message over the size limit,
  a client that streams and never reads, a session cut off mid-stream, a session WebSocket from a foreign
  page's origin, the console asked under a rebound name, a request with a thousand token guesses.
Every 10 s: VmRSS, open descriptors, threads. At the end: whether they are flat after warm-up (the first
fifth of the run): the last fifth's mean against the second fifth's, and every good session's result."""
import argparse, asyncio, importlib.util, json, os, random, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_client as c  # noqa: E402

_spec = importlib.util.spec_from_file_location("serve_load", os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve-load.py"))
load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load)

APPID, SID, SKEY = load.APPID, load.SID, load.SKEY
SENTENCES = load.SENTENCES


def proc_sample(pid):
    rss = threads = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


def right(finals):
    """Each sentence's final (Tencent: one per sentence; Wyoming: one text for the whole recording)."""
    if len(finals) == 1:
        return all(any(w in finals[0] for w in s.split()[-2:]) for s in SENTENCES)
    return len(finals) == len(SENTENCES) and all(any(w in f for w in s.split()[-2:]) for f, s in zip(finals, SENTENCES))


async def tencent_session(port, audio, rate):
    ws = await c.WebSocket.connect(c.tencent_url(f"ws://127.0.0.1:{port}", APPID, SID, SKEY), timeout=30)
    finals = []

    async def reader():
        while True:
            m = await ws.receive()
            if m is None:
                return
            r = json.loads(m).get("result")
            if r is not None and r.get("slice_type") == 2:
                finals.append(r["voice_text_str"])

    task = asyncio.create_task(reader())
    await c.stream(ws, audio, rate, chunk_ms=40, pace=1.0)
    await ws.send_text(json.dumps({"type": "end"}))
    await asyncio.wait_for(task, 60)
    return finals


def wyoming_line(kind, data=None, payload=b""):
    head = {"type": kind, "version": "1.0.0"}
    if data is not None:
        head["data"] = data
    if payload:
        head["payload_length"] = len(payload)
    return json.dumps(head).encode() + b"\n" + payload


async def wyoming_session(port, audio, rate):
    """One transcription of the whole recording, streamed at real time, as a Wyoming satellite sends it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    fmt = {"rate": rate, "width": 2, "channels": 1}
    writer.write(wyoming_line("transcribe", {"language": "en"}) + wyoming_line("audio-start", fmt))
    step = rate * 2 // 10
    start = time.monotonic()
    for i in range(0, len(audio), step):
        writer.write(wyoming_line("audio-chunk", fmt, audio[i:i + step]))
        await writer.drain()
        delay = start + (i + step) / (rate * 2) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    writer.write(wyoming_line("audio-stop"))
    await writer.drain()
    text = None
    while text is None:
        line = await asyncio.wait_for(reader.readline(), 60)
        if not line:
            break
        event = json.loads(line)
        extra = await reader.readexactly(event["data_length"]) if event.get("data_length") else b""
        if event.get("payload_length"):
            await reader.readexactly(event["payload_length"])
        data = dict(event.get("data") or {}, **(json.loads(extra) if extra else {}))
        if event["type"] in ("transcript", "error"):
            text = data.get("text", "") if event["type"] == "transcript" else f"error {data}"
    writer.close()
    return [text or ""]


async def raw(port, data, hold=0.0, per_byte=None, read=True):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if per_byte:
            for b in data:
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(per_byte)
        else:
            writer.write(data)
            await writer.drain()
        if hold:
            await asyncio.sleep(hold)
        if read:
            try:
                await asyncio.wait_for(reader.read(65536), 20)
            except asyncio.TimeoutError:
                pass
        writer.close()
    except (ConnectionError, OSError):
        pass


async def ws_attempt(url, messages=(), read=True, binary=None):
    try:
        ws = await c.WebSocket.connect(url, timeout=10)
    except Exception:
        return
    try:
        for m in messages:
            await ws.send_text(m)
        if binary is not None:
            for chunk in binary:
                await ws.send_binary(chunk)
        if read:
            while await asyncio.wait_for(ws.receive(), 20) is not None:
                pass
    except Exception:
        pass
    try:
        ws.writer.close()
    except Exception:
        pass


def old_url(port):
    now = int(time.time())
    return c.tencent_url(f"ws://127.0.0.1:{port}", APPID, SID, SKEY, extra={"timestamp": "0", "expired": str(now + 600)})


HOSTILE = [
    ("malformed-http", lambda p, w, a, r: raw(p, b"GARBAGE / HTTP/9.9\r\n\x00\x01\r\n\r\n")),
    ("silent", lambda p, w, a, r: raw(p, b"", hold=12, read=False)),
    ("byte-per-second", lambda p, w, a, r: raw(p, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", per_byte=1.0, read=False)),
    ("bad-signature", lambda p, w, a, r: ws_attempt(c.tencent_url(f"ws://127.0.0.1:{p}", APPID, SID, "wrong-key"))),
    ("old-signature", lambda p, w, a, r: ws_attempt(old_url(p))),
    ("wyoming-garbage", lambda p, w, a, r: raw(w, b"not json\n{\"type\": 5}\n\xff\xfe\xfd\n")),
    ("wyoming-idle", lambda p, w, a, r: raw(w, wyoming_line("transcribe") + wyoming_line("audio-start", {"rate": 16000, "width": 2, "channels": 1}), hold=17)),
    ("oversized-message", lambda p, w, a, r: ws_attempt(f"ws://127.0.0.1:{p}/ws/recognize", binary=[b"\0" * (2 << 20)])),
    ("never-reads", lambda p, w, a, r: ws_attempt(f"ws://127.0.0.1:{p}/ws/recognize", read=False, binary=[a[i:i + 3200] for i in range(0, len(a), 3200)])),
    ("cut-mid-stream", lambda p, w, a, r: ws_attempt(c.tencent_url(f"ws://127.0.0.1:{p}", APPID, SID, SKEY), read=False, binary=[a[:len(a) // 3]])),
    # A page of another site: a session WebSocket from its origin, the console under its rebound name, and
    # a request carrying thousands of token guesses (403, 403 and 400).
    ("foreign-origin", lambda p, w, a, r: raw(p, b"GET /ws/recognize HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
                                                 b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                                 b"Sec-WebSocket-Version: 13\r\n\r\n")),
    ("rebinding-host", lambda p, w, a, r: raw(p, b"GET /console/sessions.json HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")),
    ("many-tokens", lambda p, w, a, r: raw(p, b"GET /console?" + b"&".join(b"token=%d" % i for i in range(1000))
                                              + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")),
]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--voicepipe", default=".build/debug/voicepipe")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--out", default="bench/results/serve-soak.md")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="serve-soak-")
    path, _ = load.make_speech(work)
    audio, rate = c.pcm(path)
    port, wport = load.free_port(), load.free_port()
    env = dict(os.environ, SERVE_PORT=str(port), SERVE_HOST="127.0.0.1", WYOMING_PORT=str(wport),
               TENCENT_APPID=APPID, TENCENT_SECRET_ID=SID, TENCENT_SECRET_KEY=SKEY, MAX_SESSIONS="60")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([a.voicepipe, "serve", "pipelines/serve.yaml", "--log-level", "warning"], env=env,
                              stdout=subprocess.PIPE, stderr=log, text=True)
    server.stdout.readline()
    end = time.monotonic() + a.minutes * 60
    t0 = time.monotonic()
    samples, good = [], {"tencent": [0, 0], "wyoming": [0, 0]}
    wrong = []
    hostile_counts = {name: 0 for name, _ in HOSTILE}

    async def good_loop(kind):
        while time.monotonic() < end:
            try:
                finals = await (tencent_session(port, audio, rate) if kind == "tencent" else wyoming_session(wport, audio, rate))
            except Exception as e:  # a failed good session is a finding
                finals = [f"exception: {e!r}"]
            good[kind][0] += 1
            if right(finals):
                good[kind][1] += 1
            else:
                wrong.append((kind, round(time.monotonic() - t0), finals))

    async def hostile_loop():
        i, pending = 0, set()
        while time.monotonic() < end:
            name, make = HOSTILE[i % len(HOSTILE)]
            pending.add(asyncio.create_task(make(port, wport, audio, rate)))
            hostile_counts[name] += 1
            i += 1
            pending = {t for t in pending if not t.done()}
            await asyncio.sleep(2)
        await asyncio.gather(*pending, return_exceptions=True)

    async def sampler():
        while time.monotonic() < end:
            samples.append((time.monotonic() - t0,) + proc_sample(server.pid))
            await asyncio.sleep(10)

    await asyncio.gather(good_loop("tencent"), good_loop("tencent"), good_loop("wyoming"), hostile_loop(), sampler())
    samples.append((time.monotonic() - t0,) + proc_sample(server.pid))
    health = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/healthz"],
                            capture_output=True, text=True).stdout
    server.terminate()
    server.wait(timeout=90)

    n = len(samples)
    fifth = max(1, n // 5)
    def mean(rows, k):
        return sum(r[k] for r in rows) / len(rows)
    second, last = samples[fifth:2 * fifth] or samples[:1], samples[-fifth:]
    lines = [
        "# voicepipe serve soak",
        "",
        f"Command: `bench/serve-soak.py --voicepipe {a.voicepipe} --minutes {a.minutes:g}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores).",
        "",
        f"Good sessions: Tencent {good['tencent'][1]}/{good['tencent'][0]} right, Wyoming {good['wyoming'][1]}/{good['wyoming'][0]} right.",
        "Hostile clients: " + ", ".join(f"{k} {v}" for k, v in hostile_counts.items()) + f" ({sum(hostile_counts.values())} in all).",
        f"`/healthz` at the end: {health}; server exit after SIGTERM: {server.returncode}.",
        "",
        "| sampled | RSS MB | open fds | threads |",
        "|---|---:|---:|---:|",
        f"| second fifth (after warm-up), mean | {mean(second, 1):.1f} | {mean(second, 2):.1f} | {mean(second, 3):.1f} |",
        f"| last fifth, mean | {mean(last, 1):.1f} | {mean(last, 2):.1f} | {mean(last, 3):.1f} |",
        f"| whole run, max | {max(r[1] for r in samples):.1f} | {max(r[2] for r in samples)} | {max(r[3] for r in samples)} |",
        "",
        f"RSS growth, last fifth against the second: {100 * (mean(last, 1) / mean(second, 1) - 1):+.1f} %.",
        "",
        "Samples (s, RSS MB, fds, threads): " + "; ".join(f"{r[0]:.0f} {r[1]:.0f} {r[2]} {r[3]}" for r in samples[:: max(1, n // 30)]),
    ]
    if wrong:
        lines += ["", "Sessions not right:"] + [f"- {k} at {t} s: {f}" for k, t, f in wrong[:20]]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    open(a.out, "w").write(text)
    print(text)
    ok = not wrong and health == "200" and server.returncode == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    asyncio.run(main())
