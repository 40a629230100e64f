#!/usr/bin/env python3
"""JetStream publishing throughput: voicepipe's client (voicepipe-bench nats: pipelined, a window of
acknowledgements outstanding, a Nats-Msg-Id per message) against nats-py, the maintained Python client,
doing the same work in the same run on a fresh nats-server -js each time (file storage, 2-minute duplicate
window). Events are the size of a transcript event (300 bytes) on 64 subjects.

    .deps/venv/bin/python3 bench/nats-bench.py [--bench .build/release/voicepipe-bench] [--events 100000] [--out bench/results/nats.md]
"""
import argparse, asyncio, json, os, shutil, socket, subprocess, sys, tempfile, time

import nats


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="vp-nats-bench-")
        self.port = free_port()
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self.proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def cpu(self):
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


async def nats_py(url, events, size, window):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="BENCH", subjects=["bench.>"], storage="file", duplicate_window=120)
    payload = b"x" * size
    await js.publish("bench.warmup", b"1")
    t0 = time.perf_counter()
    if window <= 1:
        for i in range(events):
            await js.publish(f"bench.s{i % 64}.transcript", payload, headers={"Nats-Msg-Id": f"py-{i}"})
    else:
        for start in range(0, events, window):
            await asyncio.gather(*(js.publish(f"bench.s{i % 64}.transcript", payload, headers={"Nats-Msg-Id": f"py-{i}"})
                                   for i in range(start, min(events, start + window))))
    secs = time.perf_counter() - t0
    info = await js.stream_info("BENCH")
    await nc.close()
    assert info.state.messages == events + 1, f"stored {info.state.messages}"
    return secs


def run_voicepipe(bench, url, events, size, window):
    out = subprocess.run([bench, "nats", "--url", url, "--events", str(events), "--bytes", str(size), "--window", str(window)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def measure(fn):
    server = Server()
    try:
        cpu0 = server.cpu()
        secs = fn(server.url)
        return secs, server.cpu() - cpu0
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=".build/release/voicepipe-bench")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--bytes", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    cases = [
        ("voicepipe (window 256)", lambda url: run_voicepipe(a.bench, url, a.events, a.bytes, 256)),
        ("nats-py, 256 publishes awaited together", lambda url: asyncio.run(nats_py(url, a.events, a.bytes, 256))),
        ("nats-py, one publish awaited at a time", lambda url: asyncio.run(nats_py(url, max(1, a.events // 10), a.bytes, 1))),
    ]
    for name, fn in cases:
        best = None
        for _ in range(a.reps):
            secs, server_cpu = measure(fn)
            n = a.events if "one publish" not in name else max(1, a.events // 10)
            r = (n / secs, secs, server_cpu, n)
            if best is None or r[0] > best[0]:
                best = r
        rows.append((name, *best))
        print(f"{name}: {best[0]:,.0f} events/s ({best[3]} in {best[1]:.2f} s; nats-server CPU {best[2]:.2f} s)", file=sys.stderr)
    base = rows[1][1]
    lines = ["# NATS JetStream publishing", "",
             f"Command: `{' '.join(['bench/nats-bench.py'] + sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; best of {a.reps}). "
             f"Each case on a fresh `nats-server -js` (file storage, 2-minute duplicate window); {a.bytes}-byte events on 64 subjects, each with a "
             "`Nats-Msg-Id` and its own stream acknowledgement, timed from the first publish to the last acknowledgement. "
             "Client and server share the two cores.", "",
             "| client | events | events/s | vs nats-py (256 together) | nats-server CPU s |", "|---|---:|---:|---:|---:|"]
    for name, rate, secs, cpu, n in rows:
        lines.append(f"| {name} | {n:,} | {rate:,.0f} | {rate / base:.2f}x | {cpu:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
