#!/usr/bin/env python3
"""JetStream publishing throughput: voicepipe's client (voicepipe-bench nats: pipelined, a window of
acknowledgements outstanding, a Nats-Msg-Id per message) against nats-py, the maintained Python client,
doing the same work in the same run on a fresh nats-server -js each time (file storage, 2-minute duplicate
window). Events are the size of a transcript event (300 bytes) on 64 subjects.

    .deps/venv/bin/python3 bench/nats-bench.py [--bench .build/release/voicepipe-bench] [--events 100000] [--out bench/results/nats.md]

With --replicas 3 each case runs on a fresh cluster of three routed nats-servers on this machine instead, the
stream replicated three times (every acknowledgement waits for a quorum of two stores).
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
    """One nats-server with JetStream, or (replicas > 1) that many routed into one JetStream cluster."""

    def __init__(self, replicas=1):
        self.dirs, self.procs, self.ports = [], [], []
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        routes = [free_port() for _ in range(replicas)] if replicas > 1 else []
        for i in range(replicas):
            d = tempfile.mkdtemp(prefix="vp-nats-bench-")
            port = free_port()
            args = [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", d]
            if routes:
                others = ",".join(f"nats://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i)
                args += ["-n", f"bench-{i}", "--cluster_name", "BENCH", "--cluster", f"nats://127.0.0.1:{routes[i]}", "--routes", others]
            self.dirs.append(d)
            self.ports.append(port)
            self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise RuntimeError("nats-server did not start")
        if replicas > 1:
            asyncio.run(self.wait_for_meta_leader())

    async def wait_for_meta_leader(self):
        nc = await nats.connect(servers=self.url.split(","))
        try:
            for _ in range(300):
                try:
                    msg = await nc.request("$JS.API.INFO", b"", timeout=1)
                    if b'"error"' not in msg.data:
                        return
                except Exception:
                    pass
                await asyncio.sleep(0.1)
            raise RuntimeError("the nats-servers did not form a JetStream cluster")
        finally:
            await nc.close()

    @property
    def url(self):
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.ports)

    def cpu(self):
        total = 0.0
        for proc in self.procs:
            f = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


async def nats_py(url, events, size, window, replicas):
    nc = await nats.connect(servers=url.split(","))
    js = nc.jetstream()
    await js.add_stream(name="BENCH", subjects=["bench.>"], storage="file", duplicate_window=120, num_replicas=replicas)
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


def run_voicepipe(bench, url, events, size, window, replicas, spool=False):
    spool_dir = tempfile.mkdtemp(prefix="vp-spool-bench-") if spool else None
    out = subprocess.run([bench, "nats", "--url", url, "--events", str(events), "--bytes", str(size), "--window", str(window),
                          "--replicas", str(replicas)] + (["--spool", spool_dir] if spool else []),
                         capture_output=True, text=True, check=True)
    if spool_dir:
        left = [f for f in os.listdir(spool_dir) if f.endswith(".spool")]
        assert not left, f"spool files left after a complete run: {left}"
        shutil.rmtree(spool_dir, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def measure(fn, replicas):
    server = Server(replicas)
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
    ap.add_argument("--replicas", type=int, default=1, help="3: a three-server cluster, the stream replicated")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    cases = [
        ("voicepipe (window 256)", lambda url: run_voicepipe(a.bench, url, a.events, a.bytes, 256, a.replicas)),
        ("voicepipe (window 256, spool_dir: held events also on file)", lambda url: run_voicepipe(a.bench, url, a.events, a.bytes, 256, a.replicas, spool=True)),
        ("nats-py, 256 publishes awaited together", lambda url: asyncio.run(nats_py(url, a.events, a.bytes, 256, a.replicas))),
        ("nats-py, one publish awaited at a time", lambda url: asyncio.run(nats_py(url, max(1, a.events // 10), a.bytes, 1, a.replicas))),
    ]
    for name, fn in cases:
        best = None
        for _ in range(a.reps):
            secs, server_cpu = measure(fn, a.replicas)
            n = a.events if "one publish" not in name else max(1, a.events // 10)
            r = (n / secs, secs, server_cpu, n)
            if best is None or r[0] > best[0]:
                best = r
        rows.append((name, *best))
        print(f"{name}: {best[0]:,.0f} events/s ({best[3]} in {best[1]:.2f} s; nats-server CPU {best[2]:.2f} s)", file=sys.stderr)
    base = next(r for r in rows if r[0].startswith("nats-py, 256"))[1]
    where = ("a fresh `nats-server -js`" if a.replicas == 1 else
             f"a fresh cluster of {a.replicas} routed `nats-server -js` on this machine, the stream with {a.replicas} replicas")
    title = "# NATS JetStream publishing" + ("" if a.replicas == 1 else f", {a.replicas}-server cluster, R{a.replicas} stream")
    lines = [title, "",
             f"Command: `{' '.join(['bench/nats-bench.py'] + sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; best of {a.reps}). "
             f"Each case on {where} (file storage, 2-minute duplicate window); {a.bytes}-byte events on 64 subjects, each with a "
             "`Nats-Msg-Id` and its own stream acknowledgement, timed from the first publish to the last acknowledgement. "
             + ("Client and server share the two cores." if a.replicas == 1 else "Client and servers share the two cores."), "",
             f"| client | events | events/s | vs nats-py (256 together) | nats-server CPU s{' (all servers)' if a.replicas > 1 else ''} |", "|---|---:|---:|---:|---:|"]
    for name, rate, secs, cpu, n in rows:
        lines.append(f"| {name} | {n:,} | {rate:,.0f} | {rate / base:.2f}x | {cpu:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
