#!/usr/bin/env python3
"""Latency over a phone call to `voicepipe serve`, heard by a real SIP phone (baresip, headless).

    bench/sip/voice-latency.py [--voicepipe PATH] [--calls 8] [--codecs pcmu,g722] [--out FILE]

One serve process with two `sip` routes:
  assistant  pipelines/serve-assistant.yaml (vad, Whisper or PocketSphinx, chat, Piper or flite), its chat
             server bench/chat-server.py answering every question at once with one short sentence;
  echo       a graph that sends the caller's audio straight back (app-source -> app-sink, 16 kHz).
Each call is one baresip process: its `aufile` source plays a recording and its `sndfile` filter writes
what it sends (`-enc.wav`) and what it decodes from voicepipe (`-dec.wav`); baresip hangs up at the end
of the recording.

The two files start when their first frame passes the filter; their start times are taken from the
files' birth times (statx, nanoseconds), so both are placed on one clock: `t = birth + sample / rate`.

Voice to voice: the caller asks one of bench/assistant-bench.py's questions (flite slt, then 8 s of
silence); from the end of the question in what baresip sent (the last 10 ms frame within 40 dB of the
question's loudest) to the first 10 ms frame of what baresip heard that is above -45 dBFS. It spans
baresip's packetization, the route's jitter buffer, the VAD's 350 ms of silence before an utterance
ends, recognition, the chat answer, synthesis of its first sentence, the route's send queue and baresip's
decoding.

Mouth to ear on the echo route: baresip plays tones (0.4 s silence, 0.8 s 440 Hz, 0.6 s silence,
0.8 s 1 kHz); the onset of each tone in what it heard minus its onset in what it sent is the round trip
through two call legs (baresip -> voicepipe -> baresip), both packetizations, the route's jitter buffer
and send queue; voicepipe's share is that minus baresip's 20 ms packet on its own send side.

Needs baresip, sox, flite; the binary defaults to this checkout's release build, else its debug build.
"""
import argparse, datetime, json, math, os, socket, statistics, struct, subprocess, sys, tempfile, time, urllib.request, wave

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTIONS = [
    "What is the weather like today?", "Can you tell me a joke?", "How far away is the moon?",
    "What time does the store open?", "Please set a timer for ten minutes.", "Who wrote the first computer program?",
    "How do I make a cup of tea?", "What is the capital of France?", "Turn on the lights in the kitchen.",
    "How many days are there in a leap year?",
]
ANSWER = "Sure, here is a short answer."
CODECS = {"pcmu": ("PCMU/8000/1", 8000), "pcma": ("PCMA/8000/1", 8000), "g722": ("G722/16000/1", 16000)}


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def baresip_port():
    """A port for baresip's sip_listen whose next port (SIP over TLS) is free too."""
    for _ in range(100):
        p = free_port()
        try:
            s = socket.socket(); s.bind(("127.0.0.1", p + 1)); s.close(); return p
        except OSError:
            continue
    raise RuntimeError("no two free ports in a row")


def sh(*args):
    subprocess.run(args, check=True, capture_output=True)


def read(path):
    with wave.open(path) as w:
        rate, ch, n = w.getframerate(), w.getnchannels(), w.getnframes()
        data = struct.unpack("<%dh" % (n * ch), w.readframes(n))
    return rate, list(data[::ch])


def envelope(x, rate, ms=10):
    step = rate * ms // 1000
    return [math.sqrt(sum(v * v for v in x[i:i + step]) / step) for i in range(0, len(x) - step + 1, step)]


def birth(path):
    """The file's birth time (s since the epoch, ns resolution) from stat(1)'s %W.%w."""
    out = subprocess.run(["stat", "-c", "%w", path], check=True, capture_output=True, text=True).stdout.strip()
    if out == "-":
        raise SystemExit("voice-latency: this file system keeps no birth times; the two recordings cannot be aligned")
    day, clock, zone = out.split()
    whole, frac = clock.split(".")
    t = datetime.datetime.fromisoformat(f"{day}T{whole}{zone[:3]}:{zone[3:]}").timestamp()
    return t + int(frac) / 10 ** len(frac)


def call(sip_port, user, codec, audio, seconds, work):
    """baresip calls user@127.0.0.1:sip_port playing `audio`: (sent wav, heard wav, heard's start - sent's start in s)."""
    rtpmap, _ = CODECS[codec]
    os.makedirs(f"{work}/rec")
    with open(f"{work}/config", "w") as f:
        f.write(f"""poll_method poll
sip_listen 127.0.0.1:{baresip_port()}
audio_player alsa,null
audio_alert alsa,null
audio_source aufile,{audio}
module_path /usr/lib/baresip/modules
module g711.so
module g722.so
module aufile.so
module alsa.so
module sndfile.so
module_app account.so
module_app menu.so
snd_path {work}/rec
rtp_timeout 0
""")
    with open(f"{work}/accounts", "w") as f:
        f.write(f"<sip:baresip@127.0.0.1>;regint=0;audio_codecs={rtpmap}\n")
    p = subprocess.run(["baresip", "-f", work, "-e", f"/dial sip:{user}@127.0.0.1:{sip_port}", "-t", str(int(seconds) + 6)],
                       capture_output=True, text=True, timeout=seconds + 40)
    files = os.listdir(f"{work}/rec")
    enc = [f for f in files if f.endswith("-enc.wav")]
    dec = [f for f in files if f.endswith("-dec.wav")]
    if not enc or not dec:
        raise RuntimeError(f"baresip recorded {files}: {p.stdout[-1500:]}")
    enc, dec = f"{work}/rec/{enc[0]}", f"{work}/rec/{dec[0]}"
    return enc, dec, birth(dec) - birth(enc)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    release = os.path.join(ROOT, ".build/release/voicepipe")
    ap.add_argument("--voicepipe", default=release if os.access(release, os.X_OK) else os.path.join(ROOT, ".build/debug/voicepipe"))
    ap.add_argument("--calls", type=int, default=8, help="assistant calls per codec")
    ap.add_argument("--echo-calls", type=int, default=5, help="echo calls per codec")
    ap.add_argument("--codecs", default="pcmu,g722")
    ap.add_argument("--asr", default="whisper", choices=["whisper", "pocketsphinx"])
    ap.add_argument("--out")
    args = ap.parse_args()
    codecs = args.codecs.split(",")
    for c in codecs:
        if c not in CODECS:
            sys.exit(f"voice-latency: unknown codec {c!r}; expected some of {', '.join(CODECS)}")
    for program in ("baresip", "sox", "flite"):
        if subprocess.run(["which", program], capture_output=True).returncode != 0:
            sys.exit(f"voice-latency: {program} not found (Debian package {program})")

    tmp = tempfile.mkdtemp(prefix="voice-latency-")
    chat_port, http_port, sip_port = free_port(), free_port(), free_port()
    chat = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench/chat-server.py"), "--port", str(chat_port), "--answer", ANSWER],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    graph = f"{tmp}/assistant.yaml"
    with open(os.path.join(ROOT, "pipelines/serve-assistant.yaml")) as f:
        text = f.read()
    with open(graph, "w") as f:
        f.write(text.replace("engine: whisper, fallback: pocketsphinx", f"engine: {args.asr}" + (", fallback: pocketsphinx" if args.asr == "whisper" else "")))
    with open(f"{tmp}/echo.yaml", "w") as f:
        f.write("version: 1\nnodes:\n  mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }\n"
                "  speaker: { type: app-sink, capacity: 500 }\nlinks:\n  - mic -> speaker\n")
    with open(f"{tmp}/serve.yaml", "w") as f:
        f.write(f"""listen: {{ host: 127.0.0.1, port: {http_port} }}
max_sessions: 4
routes:
  - name: assistant
    protocol: sip
    port: {sip_port}
    graph: {graph}
    codecs: [{', '.join(codecs)}]
""")
    # The echo route on its own port: a second sip route.
    echo_port = free_port()
    with open(f"{tmp}/serve.yaml", "a") as f:
        f.write(f"""  - name: echo
    protocol: sip
    port: {echo_port}
    graph: {tmp}/echo.yaml
    codecs: [{', '.join(codecs)}]
""")
    log = open(f"{tmp}/serve.log", "w")
    serve = subprocess.Popen([args.voicepipe, "serve", f"{tmp}/serve.yaml", "--log-level", "warning"], cwd=ROOT, stdout=log, stderr=log,
                             env={**os.environ, "CHAT_URL": f"http://127.0.0.1:{chat_port}"})
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=1); break
            except OSError:
                if serve.poll() is not None:
                    sys.exit(f"voice-latency: serve exited: {open(f'{tmp}/serve.log').read()[-1500:]}")
                time.sleep(0.1)
        load0 = os.getloadavg()[0]
        v2v, echo = {c: [] for c in codecs}, {c: [] for c in codecs}
        notes = []
        for codec in codecs:
            rate = CODECS[codec][1]
            # Echo calls: tones.
            tones = f"{tmp}/tones-{rate}.wav"
            parts = []
            for i, seg in enumerate(["trim 0 0.4", "synth 0.8 sine 440 vol 0.5", "trim 0 0.6", "synth 0.8 sine 1000 vol 0.5", "trim 0 0.6"]):
                parts.append(f"{tmp}/part{rate}-{i}.wav")
                sh("sox", "-n", "-r", str(rate), "-c", "1", "-b", "16", parts[-1], *seg.split())
            sh("sox", *parts, tones)
            for n in range(args.echo_calls):
                enc, dec, offset = call(echo_port, "echo", codec, tones, 3.2, f"{tmp}/echo-{codec}-{n}")
                r, sent = read(enc); _, heard = read(dec)
                es, eh = envelope(sent, r), envelope(heard, r)
                trips = []
                for lo in (30, 130):   # the two tones start near 0.4 s and 1.8 s into the file
                    s = next((i for i in range(lo, len(es)) if es[i] > 1000), None)
                    # heard's frame k is at offset + k*10 ms on sent's clock: nothing is heard before it is sent.
                    h = None if s is None else next((k for k in range(len(eh)) if offset + k * 0.010 >= (s - 1) * 0.010 and eh[k] > 1000), None)
                    if s is None or h is None:
                        notes.append(f"echo {codec} call {n}: tone starting near frame {lo} not found (sent {s}, heard {h})")
                        continue
                    trips.append(offset + (h - s) * 0.010)
                echo[codec] += trips
                print(f"echo {codec} {n}: offset {offset * 1000:.0f} ms, round trips {[round(t * 1000) for t in trips]} ms", file=sys.stderr, flush=True)
            # Assistant calls: questions.
            for n in range(args.calls):
                q = QUESTIONS[n % len(QUESTIONS)]
                raw, audio = f"{tmp}/q{n}-raw.wav", f"{tmp}/q{n}-{rate}.wav"
                sh("flite", "-voice", "slt", "-t", q, "-o", raw)
                sh("sox", raw, "-r", str(rate), "-c", "1", "-b", "16", audio, "pad", "0.5", "8")
                enc, dec, offset = call(sip_port, "assistant", codec, audio, 11, f"{tmp}/ask-{codec}-{n}")
                r, sent = read(enc); _, heard = read(dec)
                es, eh = envelope(sent, r), envelope(heard, r)
                peak = max(es)
                end = max(i for i, v in enumerate(es) if v > peak * 0.01) + 1   # 40 dB below the peak (amplitude 1 %)
                threshold = 32768 * 10 ** (-45 / 20)
                # heard's frame k is at offset + k*10 ms on sent's clock.
                first = next((k for k, v in enumerate(eh) if v > threshold and offset + k * 0.010 > end * 0.010), None)
                if first is None:
                    notes.append(f"{codec} call {n} ({q!r}): no answer heard")
                    print(f"ask {codec} {n}: no answer heard", file=sys.stderr, flush=True)
                    continue
                early = [k for k, v in enumerate(eh) if v > threshold and offset + k * 0.010 <= end * 0.010]
                if early:
                    notes.append(f"{codec} call {n}: {len(early)} loud frames heard before the question ended")
                v2v[codec].append(offset + first * 0.010 - end * 0.010)
                print(f"ask {codec} {n}: offset {offset * 1000:.0f} ms, question ends {end * 10} ms, voice to voice {v2v[codec][-1] * 1000:.0f} ms", file=sys.stderr, flush=True)
        load1 = os.getloadavg()[0]
    finally:
        serve.terminate(); chat.terminate()
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        chat.wait()

    built = datetime.datetime.fromtimestamp(os.path.getmtime(args.voicepipe)).strftime("%Y-%m-%d %H:%M")
    kind = "release" if "/release/" in args.voicepipe else "debug"
    ms = lambda xs: " / ".join(f"{x * 1000:.0f}" for x in (statistics.median(xs), pct(xs, 0.95), max(xs))) if xs else "—"
    lines = ["# Latency over a phone call: baresip calls `voicepipe serve` (issue 41)", "",
             f"Command: `bench/sip/voice-latency.py {' '.join(sys.argv[1:])}`; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"{kind} build `{args.voicepipe}` built {built}; {os.cpu_count()} cores, load average {load0:.2f} at the start, {load1:.2f} at the end; "
             f"asr {args.asr}, tts as pipelines/serve-assistant.yaml chooses (Piper when its voice is installed, else flite).", "",
             "| codec | voice to voice, end of question → first answer sample: p50 / p95 / max ms | calls | echo route round trip, two legs: p50 / p95 / max ms | tone onsets |",
             "|---|---:|---:|---:|---:|"]
    for c in codecs:
        lines.append(f"| {c} | {ms(v2v[c])} | {len(v2v[c])} of {args.calls} | {ms(echo[c])} | {len(echo[c])} |")
    lines += ["", "Each value: " + "; ".join(f"{c}: voice to voice {[round(x * 1000) for x in v2v[c]]}, echo {[round(x * 1000) for x in echo[c]]}" for c in codecs)]
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
