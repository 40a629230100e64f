#!/usr/bin/env python3
"""A voicepipe cluster on one machine, as a benchmark and as a test: `voicepipe serve` workers (three by
default) behind nginx (a WebSocket load balancer), publishing their session events to nats-server
(JetStream), and a load generator that runs a few hundred Tencent ASR sessions through nginx while it
drains one worker (SIGTERM) and kills another (SIGKILL).

    PY=$(scripts/install-python-deps.sh | tail -1)      # nats-py, the independent JetStream reader
    $PY bench/cluster/cluster.py [--sessions 300] [--concurrency 6] [--json out.json] [--markdown out.md]
    python3 bench/cluster/cluster.py --no-nats --sessions 12 --concurrency 3      # no NATS: stdlib only

Each session: a signed WebSocket (a fresh voice_id per attempt) through nginx, a short flite utterance,
{"type":"end"}, the `final: 1` message, the final transcript checked against the sentence. A failed attempt
(refused, dropped, closed without the final, code != 0) is retried with a new voice_id, up to --attempts.

Checks (exit status 0 only if all hold): every session completed; the drained worker exited 0 within
drain_grace_s and no attempt failed on it; only attempts on the killed worker failed; every transcript
right; with NATS, every completed attempt has exactly one `started` and exactly one `finished` event with
outcome "completed" on voicepipe.asr.<voice_id>.*, no failed attempt has a "completed" one, and every
message is well formed (JSON with event, session, route, worker; a Nats-Msg-Id header).
See bench/cluster/README.md."""
import argparse, asyncio, collections, ctypes, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import serve_client as wsc  # noqa: E402

SENTENCES = ["please open the garage door", "turn on the kitchen light", "what is the weather like today"]
APPID, SECRET_ID, SECRET_KEY = "1250000001", "AKIDcluster", "cluster-test-key"
STREAM = "VOICEPIPE"
ROUTE = "asr"
DRAIN_GRACE_S = 30

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def _child_setup():
    # The children die with the harness even if it is killed (PR_SET_PDEATHSIG = 1).
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)


def log(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


T0 = time.monotonic()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.exited.is_set():
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else None


def words(text):
    return re.findall(r"[a-z']+", text.lower())


def overlap(sentence, text):
    want, got = collections.Counter(words(sentence)), collections.Counter(words(text))
    return sum((want & got).values()) / max(1, sum(want.values()))


# ---------------------------------------------------------------------------------------------- processes

class Proc:
    """A child process with its own reaper thread (exit status, exit time and rusage from wait4), and, when
    `first_line` is set, its stdout's first line (the rest of stdout goes to its log)."""

    def __init__(self, name, argv, logpath, env=None, first_line=False):
        self.name, self.argv, self.logpath = name, argv, logpath
        self.logfile = open(logpath, "w")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if first_line else self.logfile,
                                      stderr=self.logfile, env=env, start_new_session=True, preexec_fn=_child_setup, cwd=ROOT)
        self.pid = self.popen.pid
        self.t_start = time.monotonic()
        self.rc = self.rusage = self.t_exit = None
        self.exited = threading.Event()
        self.line, self.got_line = None, threading.Event()
        if first_line:
            threading.Thread(target=self._stdout, daemon=True).start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _stdout(self):
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace")
            if self.line is None:
                self.line = line.strip()
                self.got_line.set()
            else:
                self.logfile.write(line)
                self.logfile.flush()
        self.got_line.set()

    def _reap(self):
        _, status, ru = os.wait4(self.pid, 0)
        self.rc, self.rusage, self.t_exit = os.waitstatus_to_exitcode(status), ru, time.monotonic()
        self.popen.returncode = self.rc      # reaped here; Popen must not wait for it again
        self.exited.set()

    def send(self, sig):
        if not self.exited.is_set():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig=signal.SIGTERM, timeout=10):
        self.send(sig)
        if not self.exited.wait(timeout):
            self.send(signal.SIGKILL)
            self.exited.wait(5)

    def proc_cpu(self):
        fields = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def proc_hwm_mb(self):
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None

    def usage(self):
        """CPU seconds and peak RSS (MB) so far: from /proc while it runs, from wait4 once it has exited."""
        if not self.exited.is_set():
            try:
                return self.proc_cpu(), self.proc_hwm_mb()
            except (OSError, IndexError, ValueError):
                self.exited.wait(1)
        if self.rusage is not None:
            return self.rusage.ru_utime + self.rusage.ru_stime, self.rusage.ru_maxrss / 1024
        return None, None


class Cluster:
    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.procs = []
        self.workers = []            # (name, Proc, port)
        self.nats_url = None
        self.nginx_port = None

    def start_nats(self, port=None):
        """Starts nats-server with JetStream; again on the same port and store after an outage."""
        port = port or free_port()
        os.makedirs(os.path.join(self.tmp, "js"), exist_ok=True)
        n = sum(1 for x in self.procs if x.name == "nats")
        p = Proc("nats", ["nats-server", "-js", "-sd", os.path.join(self.tmp, "js"), "-p", str(port), "-a", "127.0.0.1"],
                 os.path.join(self.tmp, f"nats{n or ''}.log"))
        self.procs.append(p)
        if not wait_port(port, p, 15):
            raise RuntimeError(f"nats-server did not come up (see {p.logpath})")
        self.nats_url, self.nats_port, self.nats_proc = f"nats://127.0.0.1:{port}", port, p
        log(f"nats-server (JetStream) at {self.nats_url}")

    def nats_outage(self, seconds):
        """SIGKILL to nats-server (no goodbye, as a crash), and a restart on the same port and store after `seconds`."""
        self.nats_proc.send(signal.SIGKILL)
        self.nats_proc.exited.wait(5)

        def restart():
            try:
                self.start_nats(self.nats_port)
            except RuntimeError as e:
                log(f"nats-server restart failed: {e}")
        # From the event loop's thread, not a timer thread: children die with the thread that started them
        # (PR_SET_PDEATHSIG), and a timer thread ends at once.
        asyncio.get_running_loop().call_later(seconds, restart)

    def write_serve_yaml(self):
        graph = os.path.join(ROOT, "Tests", "Fixtures", "serve-pocketsphinx.yaml")  # PocketSphinx, as the figures were measured
        lines = ['listen: { host: "127.0.0.1", port: 0 }',
                 f"max_sessions: {self.a.max_sessions}",
                 f"drain_grace_s: {DRAIN_GRACE_S}",
                 "full_response: http"]
        if not self.a.no_nats:
            lines.append(f'nats: {{ url: "{self.nats_url}", stream: {STREAM}, worker: "${{VOICEPIPE_WORKER}}" }}')
        lines += ["routes:",
                  f"  - name: {ROUTE}",
                  "    path: /asr/v2/{appid}",
                  "    protocol: tencent-asr",
                  f'    graph: "{graph}"',
                  f'    keys: {{ "{APPID}": {{ secret_id: "{SECRET_ID}", secret_key: "{SECRET_KEY}" }} }}']
        path = os.path.join(self.tmp, "serve.yaml")
        open(path, "w").write("\n".join(lines) + "\n")
        return path

    def start_workers(self):
        conf = self.write_serve_yaml()
        for i in range(1, self.a.workers + 1):
            name = f"w{i}"
            env = dict(os.environ, VOICEPIPE_WORKER=name)
            p = Proc(name, [self.a.voicepipe, "serve", conf, "--port", "0", "--log-level", "info"],
                     os.path.join(self.tmp, f"{name}.log"), env=env, first_line=True)
            self.procs.append(p)
            self.workers.append([name, p, None])
        for w in self.workers:
            name, p, _ = w
            p.got_line.wait(60)
            m = re.match(r"listening on ([^:\s]+):(\d+)", p.line or "")
            if not m:
                p.exited.wait(2)
                raise RuntimeError(f"worker {name} did not start (exit {p.rc}): {p.line!r}; log {p.logpath}:\n"
                                   + open(p.logpath).read()[-2000:])
            w[2] = int(m.group(2))
            log(f"worker {name}: pid {p.pid}, {p.line}")

    def start_nginx(self):
        port = free_port()
        d = os.path.join(self.tmp, "nginx")
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        servers = "\n".join(f"        server 127.0.0.1:{port_} max_fails=1 fail_timeout=10s;" for _, _, port_ in self.workers)
        # As root nginx would run its worker processes as `nobody`, who cannot enter the private temp dir.
        user = "user root;\n" if os.geteuid() == 0 else ""
        conf = f"""{user}worker_processes 1;
pid {d}/nginx.pid;
error_log {self.tmp}/nginx-error.log notice;
events {{ worker_connections 4096; }}
http {{
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    log_format cluster escape=json '{{"t":"$msec","voice_id":"$arg_voice_id","status":"$status",'
                                   '"upstream":"$upstream_addr","upstream_status":"$upstream_status",'
                                   '"request_time":"$request_time","uri":"$uri"}}';
    access_log {self.tmp}/access.log cluster;
    map $http_upgrade $connection_upgrade {{ default upgrade; "" close; }}
    upstream voicepipe {{
        least_conn;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://voicepipe;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $host;
            proxy_next_upstream error timeout http_503 non_idempotent;
            proxy_connect_timeout 2s;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }}
    }}
}}
"""
        path = os.path.join(self.tmp, "nginx.conf")
        open(path, "w").write(conf)
        p = Proc("nginx", ["nginx", "-p", self.tmp + "/", "-e", os.path.join(self.tmp, "nginx-error.log"), "-c", path, "-g", "daemon off;"],
                 os.path.join(self.tmp, "nginx.out"))
        self.procs.append(p)
        if not wait_port(port, p, 15):
            raise RuntimeError("nginx did not come up:\n" + open(os.path.join(self.tmp, "nginx-error.log")).read()[-2000:])
        self.nginx_port = port
        log(f"nginx at 127.0.0.1:{port}, upstreams {', '.join(f'{n}=:{pt}' for n, _, pt in self.workers)}")

    def worker(self, name):
        return next(w for w in self.workers if w[0] == name)

    def stop_all(self):
        # nginx first (no new sessions), then the workers, then NATS.
        order = [p for p in self.procs if p.name == "nginx"] + [p for p in self.procs if p.name.startswith("w")] + \
                [p for p in self.procs if p.name == "nats"]
        for p in order:
            if not p.exited.is_set():
                p.stop(signal.SIGTERM, timeout=DRAIN_GRACE_S + 10 if p.name.startswith("w") else 10)


# ---------------------------------------------------------------------------------------------- load

def make_speech(tmp):
    out = []
    for i, s in enumerate(SENTENCES):
        raw, wav = os.path.join(tmp, f"say{i}-raw.wav"), os.path.join(tmp, f"say{i}.wav")
        if not os.path.exists(wav):
            subprocess.run(["flite", "-voice", "slt", "-t", s, "-o", raw], check=True)
            subprocess.run(["sox", raw, "-r", "16000", "-c", "1", "-b", "16", wav, "pad", "0.3", "0.6"], check=True)
        audio, rate = wsc.pcm(wav)
        out.append((s, audio, rate))
    return out


class Load:
    def __init__(self, a, cluster, speech):
        self.a, self.cluster, self.speech = a, cluster, speech
        self.attempts = []           # every attempt, in order of start
        self.sessions = []           # per session: {"id", "attempts": [...], "completed"}
        self.completed = 0
        self.faults = {}             # "sigterm"/"sigkill" -> {"worker", "t", "at_completed"}
        self.t_load_end = None

    def fault_check(self):
        for kind, after, idx, sig in (("sigterm", self.a.sigterm_after, 0, signal.SIGTERM), ("sigkill", self.a.sigkill_after, 1, signal.SIGKILL)):
            if after and kind not in self.faults and self.completed >= after and idx < len(self.cluster.workers):
                name, p, _ = self.cluster.workers[idx]
                self.faults[kind] = {"worker": name, "t": time.monotonic(), "at_completed": self.completed}
                p.send(sig)
                log(f"{kind.upper()} -> worker {name} (pid {p.pid}) after {self.completed} completed sessions")
        after = self.a.nats_outage_after
        if after and not self.a.no_nats and "nats_outage" not in self.faults and self.completed >= after:
            self.faults["nats_outage"] = {"t": time.monotonic(), "at_completed": self.completed, "seconds": self.a.nats_outage_s}
            log(f"NATS outage: SIGKILL -> nats-server after {self.completed} completed sessions, restarted in {self.a.nats_outage_s:g} s")
            self.cluster.nats_outage(self.a.nats_outage_s)

    async def attempt(self, sid, n):
        sentence, audio, rate = self.speech[sid % len(self.speech)]
        voice_id = f"s{sid:04d}-a{n}-{os.urandom(3).hex()}"
        rec = {"session": sid, "attempt": n, "voice_id": voice_id, "sentence": sentence, "t_start": time.monotonic(),
               "t_end": None, "ok": False, "error": None, "transcript": "", "overlap": None, "latency_s": None}
        self.attempts.append(rec)
        url = wsc.tencent_url(f"ws://127.0.0.1:{self.cluster.nginx_port}", APPID, SECRET_ID, SECRET_KEY, voice_id=voice_id)
        ws = None
        try:
            ws = await wsc.WebSocket.connect(url, timeout=30)
            finals, state = {}, {"first": None, "final": False, "error": None}

            async def reader():
                while True:
                    m = await ws.receive()
                    if m is None:
                        return
                    if not isinstance(m, str):
                        continue
                    msg = json.loads(m)
                    if state["first"] is None:
                        state["first"] = msg.get("code")
                    if msg.get("code", 0) != 0:
                        state["error"] = f"code {msg.get('code')}: {msg.get('message')}"
                    r = msg.get("result")
                    if r and r.get("slice_type") == 2:
                        finals[r.get("index", len(finals))] = r.get("voice_text_str", "")
                    if msg.get("final") == 1:
                        state["final"] = True
                        rec["latency_s"] = time.monotonic() - rec["t_start"]

            task = asyncio.create_task(reader())
            try:
                await wsc.stream(ws, audio, rate, chunk_ms=40, pace=self.a.pace)
                await ws.send_text(json.dumps({"type": "end"}))
            except (ConnectionError, OSError) as e:
                if not task.done():
                    await asyncio.wait({task}, timeout=5)
                if not state["final"] and not state["error"]:
                    state["error"] = f"send failed: {type(e).__name__}"
            await asyncio.wait_for(task, self.a.attempt_timeout)
            rec["transcript"] = " ".join(finals[k] for k in sorted(finals))
            if state["error"]:
                rec["error"] = state["error"]
            elif state["first"] != 0:
                rec["error"] = "closed before the first message" if state["first"] is None else f"first message code {state['first']}"
            elif not state["final"]:
                rec["error"] = f"closed without final (close code {ws.close_code})"
            else:
                rec["ok"] = True
                rec["overlap"] = overlap(sentence, rec["transcript"])
        except asyncio.TimeoutError:
            rec["error"] = f"no final within {self.a.attempt_timeout} s"
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError) as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        finally:
            rec["t_end"] = time.monotonic()
            if ws is not None:
                ws.writer.close()
        return rec

    async def session(self, sid):
        s = {"id": sid, "attempts": [], "completed": False, "t_start": time.monotonic(), "t_end": None}
        self.sessions.append(s)
        for n in range(1, self.a.attempts + 1):
            rec = await self.attempt(sid, n)
            s["attempts"].append(rec["voice_id"])
            if rec["ok"]:
                s["completed"] = True
                break
            log(f"session {sid} attempt {n} ({rec['voice_id']}) failed: {rec['error']}")
            await asyncio.sleep(0.1)
        s["t_end"] = time.monotonic()
        if s["completed"]:
            self.completed += 1
            if self.completed % max(1, self.a.sessions // 10) == 0:
                log(f"{self.completed}/{self.a.sessions} sessions completed")
            self.fault_check()

    async def run(self):
        queue = asyncio.Queue()
        for i in range(self.a.sessions):
            queue.put_nowait(i)

        async def runner():
            while True:
                try:
                    sid = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                await self.session(sid)

        await asyncio.gather(*[runner() for _ in range(self.a.concurrency)])


# ---------------------------------------------------------------------------------------------- evidence

def read_access_log(path, port_to_worker):
    """voice_id -> the nginx record: the worker that served it (the last upstream tried), every upstream
    tried and their statuses."""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        vid = r.get("voice_id")
        if not vid:
            continue
        tried = [x.strip() for x in re.split(r"[,:]\s", r.get("upstream", "")) if x.strip()]
        names = [port_to_worker.get(x.rsplit(":", 1)[-1], x) for x in tried]
        statuses = [x.strip() for x in re.split(r"[,:]\s", r.get("upstream_status", "")) if x.strip()]
        out[vid] = {"worker": names[-1] if names and names[-1] in port_to_worker.values() else None, "tried": names,
                    "upstream_status": statuses, "status": r.get("status")}
    return out


async def read_stream(url):
    """Every message of the stream (by sequence number, up to its last_seq), with the stream's totals."""
    import nats
    from nats.js.errors import NotFoundError
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=10)
        try:
            info = await js.stream_info(STREAM)
        except NotFoundError:
            return None
        last = info.state.last_seq
        msgs, missing = [], 0
        sem = asyncio.Semaphore(64)

        async def get(seq):
            nonlocal missing
            async with sem:
                try:
                    m = await js.get_msg(STREAM, seq)
                except NotFoundError:
                    missing += 1
                    return
                msgs.append({"seq": m.seq, "subject": m.subject, "data": m.data or b"", "headers": m.headers or {}})

        await asyncio.gather(*[get(s) for s in range(info.state.first_seq or 1, last + 1)])
        msgs.sort(key=lambda m: m["seq"])
        return {"messages": info.state.messages, "bytes": info.state.bytes, "last_seq": last, "missing": missing,
                "subjects": list(info.config.subjects or []), "storage": str(info.config.storage), "msgs": msgs}
    finally:
        await nc.close()


def analyse_stream(stream, attempts):
    """Check (c) and the message format over the stream's messages."""
    problems = []
    by_type = collections.Counter()
    started, finished = collections.defaultdict(list), collections.defaultdict(list)
    malformed, no_msg_id, msg_ids = 0, 0, collections.Counter()
    examples = []
    for m in stream["msgs"]:
        subj = m["subject"].split(".")
        try:
            p = json.loads(m["data"])
            if not isinstance(p, dict):
                raise ValueError("not an object")
        except ValueError:
            p = None
        ok = (p is not None and len(subj) >= 4 and subj[0] == "voicepipe" and all(k in p for k in ("event", "session", "route", "worker"))
              and subj[1] == p["route"] and subj[2] == p["session"] and ".".join(subj[3:]) == p["event"])
        if not ok:
            malformed += 1
            if len(examples) < 3:
                examples.append(f"{m['subject']}: {m['data'][:200]!r}")
            if p is None or len(subj) < 4:
                continue
        mid = next((v for k, v in m["headers"].items() if k.lower() == "nats-msg-id"), None)
        if mid is None:
            no_msg_id += 1
        else:
            msg_ids[mid] += 1
        event, session = ".".join(subj[3:]), subj[2]
        by_type[event] += 1
        if event == "started":
            started[session].append(p)
        elif event == "finished":
            finished[session].append(p)
    sane = lambda v: re.sub(r"[^A-Za-z0-9_-]", "_", v)
    ok_ids = [sane(r["voice_id"]) for r in attempts if r["ok"]]
    bad_ids = [sane(r["voice_id"]) for r in attempts if not r["ok"]]
    no_finished = [v for v in ok_ids if not finished.get(v)]
    not_completed = [v for v in ok_ids if finished.get(v) and [f.get("outcome") for f in finished[v]] != ["completed"]]
    twice = [v for v, fs in finished.items() if len(fs) > 1]
    start_not_once = [v for v in ok_ids if len(started.get(v, [])) != 1]
    failed_but_completed = [v for v in bad_ids if any(f.get("outcome") == "completed" for f in finished.get(v, []))]
    known = set(ok_ids) | set(bad_ids)
    unknown = sorted((set(started) | set(finished)) - known)
    dup_ids = sum(1 for c in msg_ids.values() if c > 1)
    if no_finished:
        problems.append(f"{len(no_finished)} completed attempt(s) without a `finished` event, e.g. {no_finished[:3]}")
    if not_completed:
        problems.append(f"{len(not_completed)} completed attempt(s) whose `finished` outcome is not just 'completed', e.g. "
                        f"{[(v, [f.get('outcome') for f in finished[v]]) for v in not_completed[:3]]}")
    if twice:
        problems.append(f"{len(twice)} voice_id(s) with more than one `finished` event, e.g. {twice[:3]}")
    if start_not_once:
        problems.append(f"{len(start_not_once)} completed attempt(s) without exactly one `started` event, e.g. {start_not_once[:3]}")
    if failed_but_completed:
        problems.append(f"{len(failed_but_completed)} failed attempt(s) with a `finished` outcome 'completed', e.g. {failed_but_completed[:3]}")
    if malformed:
        problems.append(f"{malformed} malformed message(s) (subject voicepipe.<route>.<session>.<event> and JSON with event, session, "
                        f"route, worker), e.g. {examples}")
    if no_msg_id:
        problems.append(f"{no_msg_id} message(s) without a Nats-Msg-Id header")
    if dup_ids:
        problems.append(f"{dup_ids} Nats-Msg-Id value(s) stored more than once")
    if unknown:
        problems.append(f"events for {len(unknown)} session(s) the load generator never opened, e.g. {unknown[:3]}")
    if stream.get("missing"):
        problems.append(f"{stream['missing']} sequence number(s) up to last_seq could not be read")
    outcomes = collections.Counter(f.get("outcome") for fs in finished.values() for f in fs)
    drops = sum(int(f.get("drops") or 0) for fs in finished.values() for f in fs)
    worker_of = {v: ps[0].get("worker") for v, ps in started.items()}
    return {"problems": problems, "events_by_type": dict(by_type.most_common()), "finished_outcomes": dict(outcomes),
            "drops": drops, "worker_of": worker_of, "malformed": malformed, "no_msg_id": no_msg_id}


# ---------------------------------------------------------------------------------------------- report

def analyse(a, cluster, load, access, nats_result, wall_s, usage):
    attempts, sessions = load.attempts, load.sessions
    nginx_worker = {v: r["worker"] for v, r in access.items()}
    nats_worker = nats_result["worker_of"] if nats_result else {}
    for r in attempts:
        r["worker_nginx"] = nginx_worker.get(r["voice_id"])
        r["worker_nats"] = nats_worker.get(r["voice_id"])
        r["worker"] = r["worker_nats"] or r["worker_nginx"]
        r["tried"] = access.get(r["voice_id"], {}).get("tried", [])
    reasons, notes = [], []
    names = [w[0] for w in cluster.workers]
    completed = [s for s in sessions if s["completed"]]
    ok = [r for r in attempts if r["ok"]]
    bad = [r for r in attempts if not r["ok"]]
    if len(completed) < a.sessions:
        reasons.append(f"{a.sessions - len(completed)} of {a.sessions} sessions did not complete after {a.attempts} attempts")
    wrong = [r for r in ok if r["overlap"] is not None and r["overlap"] < a.min_overlap]
    if wrong:
        reasons.append(f"{len(wrong)} final transcript(s) share < {a.min_overlap:.0%} of the sentence's words, e.g. "
                       f"{[(r['sentence'], r['transcript']) for r in wrong[:3]]}")
    mismatch = [r["voice_id"] for r in attempts if r["worker_nats"] and r["worker_nginx"] and r["worker_nats"] != r["worker_nginx"]]
    if mismatch:
        notes.append(f"{len(mismatch)} attempt(s) where NATS and nginx disagree on the worker, e.g. {mismatch[:3]}")
    unattributed = [r["voice_id"] for r in attempts if not r["worker"]]

    # Faults.
    term, kill = load.faults.get("sigterm"), load.faults.get("sigkill")
    sigterm = None
    if term:
        name, p, _ = cluster.worker(term["worker"])
        drain = (p.t_exit - term["t"]) if p.t_exit else None
        inflight = [r for r in attempts if r["worker"] == name and r["t_start"] <= term["t"] <= r["t_end"]]
        failed_on = [r for r in bad if r["worker"] == name]
        handed = [v for v, r in access.items() if name in r["tried"][:-1] and "503" in r["upstream_status"]]
        sigterm = {"worker": name, "at_completed": term["at_completed"], "exit_code": p.rc, "drain_s": drain,
                   "inflight": len(inflight), "inflight_completed": sum(r["ok"] for r in inflight), "failed_attempts": len(failed_on),
                   "nginx_503_passed_on": len(handed)}
        if p.rc is None:
            reasons.append(f"SIGTERM'd worker {name} had not exited {DRAIN_GRACE_S + 10} s after the load")
        elif p.rc != 0:
            reasons.append(f"SIGTERM'd worker {name} exited with {p.rc}, not 0")
        elif drain is not None and drain > DRAIN_GRACE_S + 5:
            reasons.append(f"SIGTERM'd worker {name} took {drain:.1f} s to exit (drain_grace_s {DRAIN_GRACE_S})")
        if failed_on:
            reasons.append(f"{len(failed_on)} attempt(s) failed on the drained worker {name}: "
                           f"{[(r['voice_id'], r['error']) for r in failed_on[:3]]}")
        if not inflight:
            notes.append(f"no session was in flight on {name} when it got SIGTERM: the drain of running sessions was not exercised")
    sigkill = None
    if kill:
        name, p, _ = cluster.worker(kill["worker"])
        on_killed = [r for r in bad if r["worker"] == name]
        rescued = {r["session"] for r in on_killed if any(s["completed"] for s in sessions if s["id"] == r["session"])}
        sigkill = {"worker": name, "at_completed": kill["at_completed"], "exit_code": p.rc, "failed_attempts": len(on_killed),
                   "retried_and_completed_elsewhere": len(rescued)}
        if not on_killed:
            notes.append(f"no session was in flight on {name} when it got SIGKILL: no retry was exercised")
    for kind, after in (("SIGTERM", a.sigterm_after), ("SIGKILL", a.sigkill_after)):
        if after and kind.lower() not in load.faults:
            notes.append(f"the {kind} was asked for after {after} completed sessions but never sent (only {len(completed)} completed)")
    killed_name = kill["worker"] if kill else None
    elsewhere = [r for r in bad if r["worker"] != killed_name or (kill and r["t_end"] < kill["t"])]
    if elsewhere:
        reasons.append(f"{len(elsewhere)} attempt(s) needed a retry without being on the SIGKILL'd worker when it died: "
                       f"{[(r['voice_id'], r['worker'], r['error']) for r in elsewhere[:4]]}")
    if unattributed:
        notes.append(f"{len(unattributed)} attempt(s) with no known worker (neither a NATS `started` event nor an nginx log line), "
                     f"e.g. {unattributed[:3]}")
    # A worker that died other than by our signals.
    for name, p, _ in cluster.workers:
        expected = (term and term["worker"] == name) or (kill and kill["worker"] == name)
        if p.exited.is_set() and not expected and p.t_exit is not None and p.t_exit < load.t_load_end:
            reasons.append(f"worker {name} exited on its own during the load (status {p.rc}; log {p.logpath})")
        elif not expected and p.rc != 0:
            notes.append(f"worker {name} exited with {p.rc} on SIGTERM after the load (log {p.logpath})")

    if nats_result is not None:
        if nats_result.get("absent"):
            reasons.append(f"stream {STREAM} does not exist on the NATS server")
        else:
            reasons += [f"NATS: {x}" for x in nats_result["problems"]]

    served = collections.Counter(r["worker"] or "?" for r in ok)
    lat = [r["latency_s"] for r in ok if r["latency_s"] is not None]
    slat = [s["t_end"] - s["t_start"] for s in completed]
    audio_s = sum(len(x[1]) / 2 / x[2] for x in load.speech) / len(load.speech)
    per_worker = {}
    for name, p, port in cluster.workers:
        cpu, hwm = usage.get(name, (None, None))
        per_worker[name] = {"port": port, "pid": p.pid, "served": served.get(name, 0), "cpu_s": cpu, "peak_rss_mb": hwm,
                            "exit_code": p.rc}
    result = {
        "verdict": "PASS" if not reasons else "FAIL", "reasons": reasons, "notes": notes,
        "config": {"workers": a.workers, "sessions": a.sessions, "concurrency": a.concurrency, "pace": a.pace, "nats": not a.no_nats,
                   "sigterm_after": a.sigterm_after, "sigkill_after": a.sigkill_after, "attempts": a.attempts, "max_sessions": a.max_sessions,
                   "utterance_s": round(audio_s, 2), "sentences": SENTENCES, "cores": os.cpu_count(), "voicepipe": a.voicepipe,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
        "sessions_requested": a.sessions, "sessions_completed": len(completed), "sessions_failed": a.sessions - len(completed),
        "attempts": len(attempts), "failed_attempts": len(bad), "retries": len(bad),
        "retries_caused_by_sigkill": sigkill["failed_attempts"] if sigkill else 0,
        "wrong_transcripts": len(wrong),
        "served_per_worker": dict(served), "workers": per_worker, "sigterm": sigterm, "sigkill": sigkill,
        "nats_outage": ({k: v for k, v in load.faults["nats_outage"].items() if k != "t"} if "nats_outage" in load.faults else None),
        "latency_s": {"attempt_p50": pct(lat, 0.5), "attempt_p99": pct(lat, 0.99), "session_p50": pct(slat, 0.5), "session_p99": pct(slat, 0.99)},
        "wall_s": wall_s, "sessions_per_s": len(completed) / wall_s if wall_s else None,
    }
    if nats_result is not None and not nats_result.get("absent"):
        n_started = max(1, sum(1 for r in attempts if r["worker_nats"]))
        result["nats"] = {"messages": nats_result["messages"], "bytes": nats_result["bytes"],
                          "messages_per_session": nats_result["messages"] / n_started, "bytes_per_session": nats_result["bytes"] / n_started,
                          "events_by_type": nats_result["events_by_type"], "finished_outcomes": nats_result["finished_outcomes"],
                          "drops": nats_result["drops"], "subjects": nats_result["subjects"], "storage": nats_result["storage"]}
    result["attempt_records"] = [{k: (round(v - T0, 3) if k in ("t_start", "t_end") and v else v) for k, v in r.items()} for r in attempts]
    return result


def fmt_s(x, unit="s", scale=1.0, prec=2):
    return "–" if x is None else f"{x * scale:.{prec}f} {unit}"


def text_report(r):
    L = [f"cluster: {r['config']['workers']} workers behind nginx, NATS {'on' if r['config']['nats'] else 'off'}, "
         f"{r['config']['sessions']} sessions, {r['config']['concurrency']} at once, pace {r['config']['pace']}"]
    L.append(f"  sessions completed {r['sessions_completed']}/{r['sessions_requested']}, failed {r['sessions_failed']}; "
             f"attempts {r['attempts']} (retries {r['retries']}, caused by SIGKILL {r['retries_caused_by_sigkill']}); "
             f"wrong transcripts {r['wrong_transcripts']}")
    lat = r["latency_s"]
    L.append(f"  latency connect→final p50 {fmt_s(lat['attempt_p50'])}, p99 {fmt_s(lat['attempt_p99'])}; "
             f"session incl. retries p99 {fmt_s(lat['session_p99'])}; wall {r['wall_s']:.1f} s ({r['sessions_per_s']:.2f} sessions/s)")
    for name, w in r["workers"].items():
        L.append(f"  {name}: served {w['served']}, CPU {fmt_s(w['cpu_s'])}, peak RSS {fmt_s(w['peak_rss_mb'], 'MB', prec=0)}, exit {w['exit_code']}")
    if r["sigterm"]:
        t = r["sigterm"]
        L.append(f"  SIGTERM {t['worker']} after {t['at_completed']}: exit {t['exit_code']}, drain {fmt_s(t['drain_s'])}, "
                 f"in flight {t['inflight']} (completed {t['inflight_completed']}), failed on it {t['failed_attempts']}, "
                 f"nginx passed {t['nginx_503_passed_on']} request(s) on after its 503")
    if r["sigkill"]:
        k = r["sigkill"]
        L.append(f"  SIGKILL {k['worker']} after {k['at_completed']}: attempts failed on it {k['failed_attempts']}, "
                 f"sessions retried and completed elsewhere {k['retried_and_completed_elsewhere']}")
    if r.get("nats_outage"):
        o = r["nats_outage"]
        L.append(f"  NATS outage after {o['at_completed']}: nats-server killed (SIGKILL), restarted on its store {o['seconds']:g} s later")
    if "nats" in r:
        n = r["nats"]
        L.append(f"  NATS: {n['messages']} messages, {n['bytes']} bytes ({n['messages_per_session']:.1f} msgs, "
                 f"{n['bytes_per_session']:.0f} B per session); events {n['events_by_type']}; finished {n['finished_outcomes']}")
    for x in r["notes"]:
        L.append(f"  note: {x}")
    L.append(f"{r['verdict']}" + "".join(f"\n  - {x}" for x in r["reasons"]))
    return "\n".join(L)


def markdown_report(r, argv):
    c = r["config"]
    lat = r["latency_s"]
    L = ["# voicepipe serve as a cluster: workers behind nginx" + (", session events in NATS JetStream" if c["nats"] else ""), "",
         f"Command: `bench/cluster/cluster.py {' '.join(argv)}` ({c['date']}, {c['cores']} cores). {c['workers']} `voicepipe serve` "
         f"workers (tencent-asr route, pipelines/serve-recognizer.yaml, drain_grace_s {DRAIN_GRACE_S}) behind nginx (`least_conn`, "
         f"`proxy_next_upstream error timeout http_503`), " + ("publishing to nats-server with JetStream; " if c["nats"] else "NATS off; ")
         + f"{c['sessions']} sessions through nginx, {c['concurrency']} at once, each a {c['utterance_s']:.1f} s flite utterance sent "
         + ("as fast as possible" if not c["pace"] else f"at {c['pace']}x real time") + ". "
         + (f"Worker 1 gets SIGTERM after {c['sigterm_after']} completed sessions" if c["sigterm_after"] else "No SIGTERM")
         + (f", worker 2 SIGKILL after {c['sigkill_after']}" if c["sigkill_after"] else ", no SIGKILL")
         + (f", nats-server SIGKILL after {r['nats_outage']['at_completed']} and restarted on its store {r['nats_outage']['seconds']:g} s later"
            if r.get("nats_outage") else "")
         + f"; a failed attempt is retried through nginx with a new voice_id (up to {c['attempts']} attempts).", "",
         "| sessions completed | attempts | retries (SIGKILL) | wrong transcripts | connect → final p50 / p99 | wall time | sessions/s |",
         "|---:|---:|---:|---:|---:|---:|---:|",
         f"| {r['sessions_completed']}/{r['sessions_requested']} | {r['attempts']} | {r['retries']} ({r['retries_caused_by_sigkill']}) | "
         f"{r['wrong_transcripts']} | {fmt_s(lat['attempt_p50'], 'ms', 1000, 0)} / {fmt_s(lat['attempt_p99'], 'ms', 1000, 0)} | "
         f"{r['wall_s']:.1f} s | {r['sessions_per_s']:.2f} |", "",
         "| worker | sessions served | CPU | peak RSS | fate |", "|---|---:|---:|---:|---|"]
    for name, w in r["workers"].items():
        fate = f"ran to the end; exit {w['exit_code']} on SIGTERM after the load"
        if r["sigterm"] and r["sigterm"]["worker"] == name:
            t = r["sigterm"]
            fate = (f"SIGTERM after {t['at_completed']}: exit {t['exit_code']} after {fmt_s(t['drain_s'])}, {t['inflight_completed']}/{t['inflight']} "
                    f"in-flight sessions completed, {t['nginx_503_passed_on']} new request(s) passed on by nginx after a 503")
        if r["sigkill"] and r["sigkill"]["worker"] == name:
            k = r["sigkill"]
            fate = (f"SIGKILL after {k['at_completed']}: {k['failed_attempts']} attempt(s) lost, "
                    f"{k['retried_and_completed_elsewhere']} completed on retry elsewhere")
        L.append(f"| {name} | {w['served']} | {fmt_s(w['cpu_s'], 's', 1, 1)} | {fmt_s(w['peak_rss_mb'], 'MB', 1, 0)} | {fate} |")
    if "nats" in r:
        n = r["nats"]
        L += ["", f"NATS (stream {STREAM}, read back with nats-py): {n['messages']} messages, {n['bytes']} bytes — "
              f"{n['messages_per_session']:.1f} messages and {n['bytes_per_session']:.0f} bytes per session; events: "
              + ", ".join(f"{k} {v}" for k, v in n["events_by_type"].items())
              + "; finished outcomes: " + ", ".join(f"{k} {v}" for k, v in n["finished_outcomes"].items()) + "."]
    L += ["", f"**{r['verdict']}**" + (": every session completed, the drained worker exited 0 with its sessions finished, only sessions on "
                                       "the killed worker were retried" + (", and every completed attempt has exactly one `finished` event "
                                                                          "(outcome completed) in JetStream." if c["nats"] else ".")
                                       if r["verdict"] == "PASS" else ": " + "; ".join(r["reasons"]))]
    for x in r["notes"]:
        L.append(f"\nNote: {x}")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------- main

async def run(a, cluster, tmp):
    speech = make_speech(tmp)
    if not a.no_nats:
        cluster.start_nats()
    cluster.start_workers()
    cluster.start_nginx()
    load = Load(a, cluster, speech)
    usage, stop_sampling = {}, threading.Event()

    def sample():
        while not stop_sampling.wait(0.25):
            for name, p, _ in cluster.workers:
                if not p.exited.is_set():
                    u = p.usage()
                    if u[0] is not None:
                        usage[name] = u
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log(f"load: {a.sessions} sessions, {a.concurrency} at once, pace {a.pace}")
    t0 = time.monotonic()
    await load.run()
    wall = time.monotonic() - t0
    load.t_load_end = time.monotonic()
    log(f"load done in {wall:.1f} s: {load.completed}/{a.sessions} completed, {len(load.attempts)} attempts")
    term = load.faults.get("sigterm")
    if term:
        _, p, _ = cluster.worker(term["worker"])
        left = term["t"] + DRAIN_GRACE_S + 10 - time.monotonic()
        if left > 0:
            await asyncio.get_running_loop().run_in_executor(None, p.exited.wait, left)
    stop_sampling.set()
    sampler.join()
    for name, p, _ in cluster.workers:
        u = p.usage()
        if u[0] is not None:
            usage[name] = u
    # The surviving workers drain (nothing runs on them now) and should exit 0 too; once every worker is gone,
    # everything they published is in the stream.
    for name, p, _ in cluster.workers:
        if not p.exited.is_set():
            p.send(signal.SIGTERM)
    for name, p, _ in cluster.workers:
        await asyncio.get_running_loop().run_in_executor(None, p.exited.wait, DRAIN_GRACE_S + 10)
    port_to_worker = {str(port): name for name, _, port in cluster.workers}
    await asyncio.sleep(0.3)   # nginx writes a request's access log line when its connection closes
    access = read_access_log(os.path.join(tmp, "access.log"), port_to_worker)
    nats_result = None
    if not a.no_nats:
        stream = await read_stream(cluster.nats_url)
        if stream is None:
            nats_result = {"absent": True}
        else:
            nats_result = analyse_stream(stream, load.attempts)
            nats_result.update({k: stream[k] for k in ("messages", "bytes", "subjects", "storage")})
    return analyse(a, cluster, load, access, nats_result, wall, usage)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voicepipe", default=".build/release/voicepipe")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=6, help="sessions in flight at once")
    ap.add_argument("--pace", type=float, default=0.0, help="0 = audio as fast as possible, 1 = real time")
    ap.add_argument("--sigterm-after", type=int, default=None, help="SIGTERM worker 1 after N completed sessions (default sessions/3; 0 = never)")
    ap.add_argument("--sigkill-after", type=int, default=None, help="SIGKILL worker 2 after N completed sessions (default 2*sessions/3; 0 = never)")
    ap.add_argument("--attempts", type=int, default=3, help="attempts per session (each with a new voice_id)")
    ap.add_argument("--attempt-timeout", type=float, default=120.0, help="seconds for one attempt's final")
    ap.add_argument("--max-sessions", type=int, default=50, help="max_sessions of each worker")
    ap.add_argument("--min-overlap", type=float, default=0.6, help="share of the sentence's words the final transcript must have")
    ap.add_argument("--nats-outage-after", type=int, default=None,
                    help="SIGKILL nats-server after N completed sessions and restart it on its store (default 5*sessions/6; 0 = never)")
    ap.add_argument("--nats-outage-s", type=float, default=3.0, help="seconds nats-server stays down")
    ap.add_argument("--no-nats", action="store_true", help="no nats-server, no `nats:` key (the worker of a session comes from nginx's log)")
    ap.add_argument("--json", metavar="OUT", help="write the results (and every attempt) as JSON")
    ap.add_argument("--markdown", metavar="OUT", help="write a results section for BENCHMARKS.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (configurations, logs, JetStream store)")
    a = ap.parse_args()
    if a.sigterm_after is None:
        a.sigterm_after = a.sessions // 3
    if a.sigkill_after is None:
        a.sigkill_after = a.sessions * 2 // 3
    if a.nats_outage_after is None:
        # After the SIGKILL: events a worker holds while NATS is down die with it if it is killed then.
        a.nats_outage_after = a.sessions * 5 // 6
    faulted = (1 if a.sigterm_after else 0) + (1 if a.sigkill_after else 0)
    if a.workers < faulted + 1:
        ap.error(f"--workers {a.workers}: the faults need at least {faulted + 1} workers (one must survive)")
    a.voicepipe = os.path.abspath(os.path.join(ROOT, a.voicepipe) if not os.path.isabs(a.voicepipe) else a.voicepipe)
    if not os.access(a.voicepipe, os.X_OK):
        ap.error(f"no voicepipe binary at {a.voicepipe}")
    for tool in ["nginx", "flite", "sox"] + ([] if a.no_nats else ["nats-server"]):
        if not shutil.which(tool):
            ap.error(f"{tool} is not installed (scripts/install-deps.sh)")
    if not a.no_nats:
        try:
            import nats  # noqa: F401
        except ImportError:
            ap.error("nats-py is missing: run with the python scripts/install-python-deps.sh prints, or pass --no-nats")

    tmp = tempfile.mkdtemp(prefix="voicepipe-cluster-")
    cluster = Cluster(a, tmp)
    def interrupted(*_):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)     # also when started with SIGINT ignored (a background job)
    result, keep = None, a.keep
    try:
        result = asyncio.run(run(a, cluster, tmp))
    except KeyboardInterrupt:
        log("interrupted")
        keep = True
    except RuntimeError as e:      # a process of the cluster did not come up
        log(f"error: {e}")
        keep = True
        return 2
    except Exception:
        keep = True
        raise
    finally:
        cluster.stop_all()
        if result and result["verdict"] != "PASS":
            keep = True
        if keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if result is None:
        return 130
    result["tmp"] = tmp if keep else None
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown_report(result, sys.argv[1:]))
    print(text_report(result), flush=True)
    return 0 if result["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
