#!/usr/bin/env python3
"""`asr` with `engine: whisper` against faster-whisper on the same weights and against the default
`engine: pocketsphinx`, on the same recordings, in one run.

    bench/whisper-bench.py [--voicepipe .build-release/release/voicepipe] [--smoke] [--out FILE]

Systems:
  1. voicepipe, `engine: whisper` (whisper.cpp in the process): Whisper tiny.en
     (.deps/whisper/models/ggml-tiny.en.bin), threads 2, beam_size 1, the engine's defaults otherwise
     (partials, finals decoded ahead from the start of a pause), run as fast as possible and paced at
     1x; paced once more with partial_interval_ms 10000 (no partial decodes on utterances under 10 s);
  2. faster-whisper (CTranslate2) on the same weights (.deps/whisper/ct2/tiny.en, the files the ggml
     model was converted from): cpu_threads 2, beam_size 1, compute_type float32 (what "default"
     resolves to on a CPU: CTranslate2 has no float16 there and widens the float16 weights to float32;
     int8 would change the arithmetic), timestamps on, no VAD filter, condition_on_previous_text off;
     it decodes exactly the utterances voicepipe's VAD cut (the start_ms..end_ms of each final);
  3. voicepipe, `engine: pocketsphinx` (Debian's en-us model).
voicepipe runs the graph of pipelines/recognizer-file.yaml (file-source, volume, vad stop_ms 350,
slicer in utterance mode with stream delivery, asr), written out with each system's asr parameters,
with `--log-level debug` for whisper's per-utterance decode times.

Material: bench/asr-compare.py's 14 sentences spoken by flite (voices slt and rms) and by espeak-ng
(two voices and speeds), and the human recordings of Debian's pocketsphinx-testdata (LibriVox and
"cards"), each set joined with 1 s of silence between clips.

Figures per system and material: word error rate (case, punctuation, bracketed non-speech tags and
numbers normalized the same way for every system: numbers in words or digits become digit
sequences), real-time factor and CPU time per second of audio (decoding as fast as possible;
start-up and model loading measured apart on 0.2 s of silence and subtracted; faster-whisper: the
sum of its per-utterance decode times), the time from the true end of each sentence (as
bench/asr-compare.py finds it) to its final with the audio paced at 1x, and the peak resident
memory of the process. faster-whisper has no streaming mode: its figure is each utterance's decode
time plus the same 350 ms VAD hang-over that voicepipe waits before an utterance ends. Also: the
word error rate between the two Whisper implementations' transcripts on the same samples (the check
of the model conversion and of the engine's decoding parameters; finals voicepipe decoded ahead are
left out, as their audio is shorter), and the per-utterance decode times by utterance length
(whisper.cpp's encoder always processes a 30 s window).

The faster-whisper part runs in .deps/venv's python (scripts/install-python-deps.sh); without
.deps/whisper (scripts/install-whisper.sh) the benchmark says so and exits 0.
"""
import argparse, datetime, importlib.util, json, os, re, shlex, statistics, subprocess, sys, tempfile, threading, time, wave

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from textmetrics import edit_distance, words  # noqa: E402

RATE = 16000
STOP_MS = 350
THREADS = 2
WHISPER_DIR = os.path.join(ROOT, ".deps/whisper")
GGML_MODEL = os.path.join(WHISPER_DIR, "models/ggml-tiny.en.bin")
CT2_MODEL = os.path.join(WHISPER_DIR, "ct2/tiny.en")
VENV_PYTHON = os.path.join(ROOT, ".deps/venv/bin/python3")
ESPEAK = [("en-us", 175), ("en-gb+f3", 140)]
QUIET_MS = 10000
SYSTEMS = [
    ("whisper", "voicepipe whisper (whisper.cpp)"),
    ("faster", "faster-whisper (CTranslate2)"),
    ("pocketsphinx", "voicepipe pocketsphinx"),
    ("whisper-np", f"voicepipe whisper, partial_interval_ms {QUIET_MS}, paced runs only"),
]


# --- text normalization -------------------------------------------------------------------------

UNITS = "zero one two three four five six seven eight nine".split()
TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
NUMBER = {w: i for i, w in enumerate(UNITS)} | {w: 10 + i for i, w in enumerate(TEENS)} | {w: 20 + 10 * i for i, w in enumerate(TENS)}
SPELLING = {"mr": "mister", "mrs": "missus", "dr": "doctor", "ok": "okay"}


def below_hundred(ws, i):
    """A number under 100 spelled from ws[i] ("twenty one", "seven", "fifteen"): (value, next index)."""
    if i >= len(ws) or ws[i] not in NUMBER:
        return None, i
    v = NUMBER[ws[i]]
    if ws[i] in TENS and i + 1 < len(ws) and ws[i + 1] in UNITS[1:]:
        return v + NUMBER[ws[i + 1]], i + 2
    return v, i + 1


def below_thousand(ws, i):
    v, j = below_hundred(ws, i)
    if v is None or not (0 < v < 10) or j >= len(ws) or ws[j] != "hundred":
        return v, j
    v, j = v * 100, j + 1
    k = j + 1 if j < len(ws) and ws[j] == "and" else j
    rest, k = below_hundred(ws, k)
    return (v + rest, k) if rest is not None else (v, j)


def spelled_number(ws, i):
    """One spelled number from ws[i]: consecutive plain numbers ("one two three") stay separate."""
    v, j = below_thousand(ws, i)
    if v is None or v == 0 or j >= len(ws) or ws[j] != "thousand":
        return v, j
    v, j = v * 1000, j + 1
    k = j + 1 if j < len(ws) and ws[j] == "and" else j
    rest, k = below_thousand(ws, k)
    return (v + rest, k) if rest is not None else (v, j)


def normalize(text):
    """Words for scoring: lower case, no punctuation (the apostrophe inside words stays), no bracketed
    non-speech tags ("[BLANK_AUDIO]", "(music)"), a few abbreviations spelled out, and every number,
    spelled or in digits, as its digits one by one ("ten" -> 1 0, "1234" and "one two three four" -> 1 2 3 4)."""
    text = re.sub(r"\[[^\]]*\]|\([^)]*\)", " ", text)
    ws = [SPELLING.get(w.strip("'"), w.strip("'")) for w in words(text)]
    ws = [w for w in ws if w]
    out, i = [], 0
    while i < len(ws):
        v, j = spelled_number(ws, i)
        if v is not None:
            out += list(str(v)); i = j
        elif ws[i].isdigit():
            out += list(ws[i]); i += 1
        else:
            out.append(ws[i]); i += 1
    return out


def error_rate(ref, hyp):
    r = normalize(ref)
    return edit_distance(r, normalize(hyp)) / max(1, len(r))


# --- running a child process, with its peak memory -----------------------------------------------

class ChildFailed(Exception):
    pass


def child(args, env=None, timeout=600):
    """Runs args to the end: (stdout, stderr, wall seconds, CPU seconds, peak RSS in KiB). Killed after `timeout` s."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(args, stdout=out, stderr=err, cwd=ROOT, env=env)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0); err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if p.returncode != 0:
        why = f"killed after {timeout:.0f} s" if wall >= timeout else f"exit status {p.returncode}"
        raise ChildFailed(f"`{' '.join(shlex.quote(a) for a in args)}`: {why}; stderr: {stderr.strip()[-600:]}")
    return stdout, stderr, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


# --- material ------------------------------------------------------------------------------------

def load_compare():
    spec = importlib.util.spec_from_file_location("asr_compare", os.path.join(HERE, "asr-compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def materials(ac, tmp, smoke):
    """[(key, description, wav, true ends (s), reference texts per clip, clip speech seconds, synthetic)]"""
    out = []
    sentences = ac.SENTENCES[:2] if smoke else ac.SENTENCES

    def add(key, what, parts, refs, synthetic):
        wav, ends = ac.build(tmp, re.sub(r"[^a-z0-9]+", "-", key), parts)
        lengths = [len(ac.trimmed(p)) / RATE for p in parts]
        out.append(dict(key=key, what=what, wav=wav, ends=ends, refs=refs, lengths=lengths, synthetic=synthetic,
                        audio_s=len(ac.read(wav)) / RATE))

    for voice in ["slt"] if smoke else ["slt", "rms"]:
        parts = [ac.clip(tmp, f"{voice}{i}", s, voice) for i, s in enumerate(sentences)]
        add(f"flite {voice}", f"flite {voice}: the {len(sentences)} sentences of bench/asr-compare.py", parts, sentences, True)
    if smoke:
        return out
    for voice, speed in ESPEAK:
        parts = []
        for i, s in enumerate(sentences):
            raw = f"{tmp}/es-{voice}-{i}-raw.wav"
            ac.sh("espeak-ng", "-v", voice, "-s", str(speed), "-w", raw, s)
            parts.append(ac.clip(tmp, f"es-{voice}-{i}", src=raw))
        add(f"espeak-ng {voice.split('+')[0]}", f"espeak-ng voice {voice} at {speed} words/min: the same sentences", parts, sentences, True)
    if os.path.isdir(f"{ac.TESTDATA}/librivox"):
        files = sorted(f"{ac.TESTDATA}/librivox/{f}" for f in os.listdir(f"{ac.TESTDATA}/librivox") if f.endswith(".wav"))
        cards = sorted(f"{ac.TESTDATA}/cards/{f}" for f in os.listdir(f"{ac.TESTDATA}/cards") if f.endswith(".wav"))
        refs = {}
        for line in open(f"{ac.TESTDATA}/librivox/transcription"):
            m = re.match(r"<s> (.*) </s> \((.*)\)", line.strip())
            if m: refs[m.group(2)] = m.group(1)
        for line in open(f"{ac.TESTDATA}/cards/cards.transcription"):
            m = re.match(r"<s> (.*?)\s*</s> \((.*)\)", line.strip())
            if m: refs[m.group(2)] = m.group(1)
        parts = [ac.clip(tmp, f"h{i}", src=f) for i, f in enumerate(files + cards)]
        add("human", f"human: Debian's pocketsphinx-testdata ({ac.TESTDATA}), {len(files)} LibriVox clips "
            f"(\"Sense and Sensibility\") and {len(cards)} \"cards\" clips, with their reference transcripts",
            parts, [refs[os.path.basename(f)[:-4]] for f in files + cards], False)
    else:
        print(f"whisper-bench: {ac.TESTDATA} missing (Debian package pocketsphinx-testdata): no human recordings", file=sys.stderr)
    return out


# --- systems -------------------------------------------------------------------------------------

DECODED = re.compile(r"whisper: utterance (\S+): (\d+) ms decoded in (\d+) ms[^\n]*?( \(ahead\))?$", re.M)


def graph(tmp, system):
    """pipelines/recognizer-file.yaml's graph with the system's recognizer; the file comes from $INPUT."""
    asr = (f"engine: whisper, model: \"{GGML_MODEL}\", threads: {THREADS}, beam_size: 1" if system.startswith("whisper")
           else "engine: pocketsphinx")
    if system == "whisper-np":
        asr += f", partial_interval_ms: {QUIET_MS}"
    path = f"{tmp}/{system}.yaml"
    with open(path, "w") as f:
        f.write(f"""version: 1
name: whisper-bench-{system}
nodes:
  mic:    {{ type: file-source, path: "${{INPUT}}", realtime: false, frame_ms: 20 }}
  volume: {{ type: volume, interval_ms: 100 }}
  vad:    {{ type: vad, stop_ms: {STOP_MS} }}
  slicer: {{ type: slicer, mode: utterance, slice_ms: 600, delivery: stream }}
  asr:    {{ type: asr, {asr} }}
  out:    {{ type: jsonl-sink, path: "-" }}
links:
  - mic -> volume -> vad -> slicer -> asr
  - asr.events -> out
  - vad.events -> out
""")
    return path


def voicepipe(vp, graph_path, wav, realtime, timeout):
    """One run on `wav`, as fast as possible or paced at 1x: a dict of the run's events, finals, the
    speech_end events, whisper's per-utterance decodings (from its debug log), wall and CPU seconds, peak RSS."""
    args = [vp, "run", graph_path, "--quiet", "--log-level", "debug", "--set", f"mic.realtime={'true' if realtime else 'false'}"]
    out, err, wall, cpu, rss = child(args, env={**os.environ, "INPUT": wav}, timeout=timeout)
    events = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    finals = [e for e in events if e.get("event") == "transcript" and e.get("final")]
    decoded = {m.group(1): dict(audio_ms=int(m.group(2)), decode_s=int(m.group(3)) / 1000, ahead=bool(m.group(4)))
               for m in DECODED.finditer(err)}
    return dict(events=events, finals=finals, ends=[e for e in events if e.get("event") == "speech_end"],
                decoded=[decoded.get(f.get("voice_id")) for f in finals], wall=wall, cpu=cpu, rss=rss)


def anomalies(events, label):
    """Odd things in one run's events."""
    found = []
    last_ts, finals_seen = -1.0, set()
    starts = sum(1 for e in events if e.get("event") == "utterance_start")
    finals = [e for e in events if e.get("event") == "transcript" and e.get("final")]
    for e in events:
        if e.get("ts", 0) < last_ts:
            found.append(f"{label}: ts goes back ({last_ts} -> {e['ts']}) at {e.get('event')}")
        last_ts = e.get("ts", last_ts)
        if e.get("event") == "error":
            found.append(f"{label}: error event {json.dumps(e)}")
        if e.get("event") == "transcript":
            key = (e.get("voice_id"), e.get("seq"))
            if not e.get("final") and key in finals_seen:
                found.append(f"{label}: partial after its final: {json.dumps(e)}")
            if e.get("final"):
                if key in finals_seen:
                    found.append(f"{label}: two finals for {key}")
                finals_seen.add(key)
    if starts != len(finals):
        found.append(f"{label}: {starts} utterance_start events but {len(finals)} finals")
    empty = [e for e in finals if not e.get("text")]
    if empty:
        found.append(f"{label}: {len(empty)} final(s) with no text (start_ms..end_ms "
                     + ", ".join(f"{e.get('start_ms')}..{e.get('end_ms')}" for e in empty) + ")")
    if not any(e.get("event") == "finished" for e in events):
        found.append(f"{label}: no finished event")
    return found


def faster_whisper(python, wav, spans, timeout):
    job = dict(wav=wav, spans=spans, model=CT2_MODEL, threads=THREADS)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        out, _, _, _, rss = child([python, os.path.abspath(__file__), "--faster-whisper-job", f.name], timeout=timeout)
    finally:
        os.unlink(f.name)
    return json.loads(out), rss


def faster_whisper_job(path):
    """In .deps/venv's python: decodes the job's spans of its file one by one and prints JSON."""
    import numpy as np
    from faster_whisper import WhisperModel
    job = json.load(open(path))
    with wave.open(job["wav"]) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0
    t0 = time.monotonic()
    model = WhisperModel(job["model"], device="cpu", compute_type="float32", cpu_threads=job["threads"], num_workers=1)
    load = time.monotonic() - t0
    utterances = []
    for start_ms, end_ms in job["spans"]:
        audio = x[start_ms * RATE // 1000:end_ms * RATE // 1000]
        t0, c0 = time.monotonic(), time.process_time()
        segments, _ = model.transcribe(audio, language="en", beam_size=1, without_timestamps=False, word_timestamps=False,
                                       vad_filter=False, condition_on_previous_text=False)
        text = " ".join(s.text.strip() for s in segments if s.text.strip())
        utterances.append(dict(text=text, decode_s=time.monotonic() - t0, cpu_s=time.process_time() - c0))
    # The encoder alone on one 30 s window, which every utterance pays whatever its length.
    features = model.feature_extractor(np.zeros(RATE * 30, np.float32))[:, :3000]
    encodes = []
    for _ in range(3):
        t0 = time.monotonic()
        model.encode(features)
        encodes.append(time.monotonic() - t0)
    json.dump(dict(load_s=load, compute_type=model.model.compute_type, utterances=utterances,
                   encoder_s=statistics.median(encodes)), sys.stdout)


# --- the benchmark -------------------------------------------------------------------------------

def cpu_stall():
    """(monotonic s, microseconds some task waited for a CPU) from the kernel's pressure stall information, or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            return time.monotonic(), int(re.search(r"total=(\d+)", f.readline()).group(1))
    except (OSError, AttributeError):
        return None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def ms(xs, how="median"):
    if not xs:
        return "—"
    return f"{(statistics.median(xs) if how == 'median' else max(xs)) * 1000:.0f}"


def describe_build(vp):
    """The binary and the source it was probably built from."""
    kind = "release build" if "release" in vp else "debug build (the decoding itself is the prebuilt, optimized libwhisper and libpocketsphinx)"
    shown = os.path.relpath(vp, ROOT) if vp.startswith(ROOT + "/") else vp
    try:
        built = datetime.datetime.fromtimestamp(os.path.getmtime(vp)).strftime("%Y-%m-%d %H:%M")
        head = subprocess.run(["git", "log", "-1", "--format=%h %cd", "--date=format:%Y-%m-%d %H:%M"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "Sources", "Package.swift"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return f"{kind} `{shown}` built {built}; source at commit {head}" + (" with uncommitted changes under Sources" if dirty else "")
    except OSError:
        return f"{kind} `{shown}`"


def run_material(m, ac, vp, python, graphs, loads, problems, failures):
    """All systems on one material: a dict per system."""
    key, audio_s = m["key"], m["audio_s"]
    timeout = 120 + 6 * audio_s
    res = {s: {} for s, _ in SYSTEMS}

    # voicepipe as fast as possible: transcripts, RTF, CPU, memory; whisper's utterances and decodings.
    for system in ("whisper", "pocketsphinx"):
        try:
            run = voicepipe(vp, graphs[system], m["wav"], False, timeout)
        except ChildFailed as e:
            failures.append(f"{system} {key}: {e}")
            continue
        problems += anomalies(run["events"], f"{system} {key} (as fast as possible)")
        r = res[system]
        r.update(texts=[e.get("text", "") for e in run["finals"]], rss=run["rss"],
                 rtf=max(0.0, run["wall"] - loads[system][0]) / audio_s, cpu=max(0.0, run["cpu"] - loads[system][1]) / audio_s)
        if system == "whisper":
            r["spans"] = [(e["start_ms"], e["end_ms"]) for e in run["finals"]]
            r["decoded"] = run["decoded"]
            if any(d is None for d in run["decoded"]):
                problems.append(f"whisper {key}: no decoding logged for {sum(d is None for d in run['decoded'])} final(s)")

    # faster-whisper on the same utterances (voicepipe's start_ms..end_ms).
    w = res["whisper"]
    if "spans" in w:
        try:
            job, rss = faster_whisper(python, m["wav"], w["spans"], timeout)
            dec = [u["decode_s"] for u in job["utterances"]]
            res["faster"].update(texts=[u["text"] for u in job["utterances"]], rss=rss, decode=dec,
                                 utt_s=[(b - a) / 1000 for a, b in w["spans"]], rtf=sum(dec) / audio_s,
                                 cpu=sum(u["cpu_s"] for u in job["utterances"]) / audio_s,
                                 lat=[d + STOP_MS / 1000 for d in dec], load=job["load_s"], encoder=job["encoder_s"])
        except (ChildFailed, ValueError, KeyError) as e:
            failures.append(f"faster-whisper {key}: {e}")

    # Paced at 1x: the true end of each sentence to its final; whisper's decode times in real use.
    for system in ("whisper", "whisper-np", "pocketsphinx"):
        if "texts" not in res["pocketsphinx" if system == "pocketsphinx" else "whisper"]:
            continue
        try:
            run = voicepipe(vp, graphs[system], m["wav"], True, timeout + audio_s)
        except ChildFailed as e:
            failures.append(f"{system} {key} paced: {e}")
            continue
        problems += anomalies(run["events"], f"{system} {key} (paced at 1x)")
        r = res[system]
        r["rss"] = max(r.get("rss", 0), run["rss"])
        r["paced_cpu"] = run["cpu"] / audio_s
        r["paced_texts"] = [e.get("text", "") for e in run["finals"]]
        r["lat"] = ac.latencies([(e["ts"], e["text"]) for e in run["finals"] if e.get("text")], m["ends"])
        r["partials"] = sum(1 for e in run["events"] if e.get("event") == "transcript" and not e.get("final"))
        r["paced_decoded"] = run["decoded"]
        r["paced_utt_s"] = [(e["end_ms"] - e["start_ms"]) / 1000 for e in run["finals"]]
        if len(run["ends"]) == len(run["finals"]):
            r["vad_final"] = [f["ts"] - e["ts"] for f, e in zip(run["finals"], run["ends"])]
        else:
            problems.append(f"{system} {key} paced: {len(run['ends'])} speech_end events, {len(run['finals'])} finals")
        fast = res["pocketsphinx" if system == "pocketsphinx" else "whisper"]["texts"]
        if len(run["finals"]) != len(fast):
            problems.append(f"{system} {key}: {len(fast)} utterances as fast as possible, {len(run['finals'])} paced at 1x")
    return res


def main():
    ap = argparse.ArgumentParser(description="voicepipe's whisper engine against faster-whisper (same weights) and pocketsphinx")
    ap.add_argument("--voicepipe", default=".build-release/release/voicepipe")
    ap.add_argument("--smoke", action="store_true", help="two flite sentences, one voice: checks that everything runs (seconds)")
    ap.add_argument("--python", default=VENV_PYTHON, help="python with faster-whisper (default .deps/venv)")
    ap.add_argument("--out", default=None, help="Markdown report (default bench/results/whisper.md; --smoke: bench/out/whisper.md)")
    ap.add_argument("--faster-whisper-job", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.faster_whisper_job:
        return faster_whisper_job(a.faster_whisper_job)
    missing = [p for p in (os.path.join(WHISPER_DIR, "lib/libwhisper.so.1"), GGML_MODEL, CT2_MODEL) if not os.path.exists(p)]
    if missing:
        print(f"whisper-bench: skipped: {', '.join(missing)} missing (scripts/install-whisper.sh installs them)")
        return 0
    if not os.path.exists(a.python):
        print(f"whisper-bench: skipped: no {a.python} with faster-whisper (scripts/install-python-deps.sh installs it)")
        return 0
    vp = os.path.abspath(a.voicepipe)
    out_path = a.out or os.path.join(ROOT, "bench/out/whisper.md" if a.smoke else "bench/results/whisper.md")
    command = "bench/whisper-bench.py" + "".join(" " + shlex.quote(x) for x in sys.argv[1:])
    ac = load_compare()
    problems, failures, results, loads = [], [], {}, {}
    stall0, started = cpu_stall(), datetime.datetime.now()

    with tempfile.TemporaryDirectory(prefix="whisper-bench-") as tmp:
        sets = materials(ac, tmp, a.smoke)
        graphs = {system: graph(tmp, system) for system in ("whisper", "whisper-np", "pocketsphinx")}
        silence = f"{tmp}/silence.wav"
        ac.write(silence, [0] * (RATE // 5))
        for system in ("whisper", "pocketsphinx"):
            runs = []
            for _ in range(1 if a.smoke else 3):
                try:
                    runs.append(voicepipe(vp, graphs[system], silence, False, 120))
                except ChildFailed as e:
                    failures.append(f"{system} start-up: {e}")
            loads[system] = ((statistics.median(r["wall"] for r in runs), statistics.median(r["cpu"] for r in runs))
                             if runs else (0.0, 0.0))
        for m in sets:
            results[m["key"]] = res = run_material(m, ac, vp, a.python, graphs, loads, problems, failures)
            refs = " ".join(m["refs"])
            line = [f"{s} WER {error_rate(refs, ' '.join(res[s]['texts'])):.3f}" + (f" latency {ms(res[s]['lat'])} ms" if res[s].get("lat") else "")
                    for s, _ in SYSTEMS if "texts" in res[s] and s != "whisper-np"]
            print(f"{m['key']:>16}: " + "; ".join(line), flush=True)

    stall1 = cpu_stall()
    stalled = (stall1[1] - stall0[1]) / 1e6 / (stall1[0] - stall0[0]) if stall0 and stall1 else None
    report = render(a, command, describe_build(vp), started, sets, results, loads, problems, failures, stalled)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as fh:
        fh.write(report)
    print()
    print(report)
    print(f"wrote {os.path.relpath(out_path, ROOT)}", file=sys.stderr)
    return 1 if failures else 0


def render(a, command, build, started, sets, results, loads, problems, failures, stalled):
    keys = [m["key"] for m in sets]
    synthetic = [m["key"] for m in sets if m["synthetic"]]
    names = dict(SYSTEMS)
    get = lambda s, k, field, default=None: results[k][s].get(field, default)  # noqa: E731
    L = []
    L.append("# Whisper in voicepipe against faster-whisper (same weights) and pocketsphinx")
    L.append("")
    L.append(f"Command: `{command}`, {started.strftime('%Y-%m-%d %H:%M')}; {build}."
             + (" Smoke run: two sentences, one voice; the figures mean nothing." if a.smoke else ""))
    L.append(f"Machine: {os.cpu_count()} cores, shared with other jobs while measured: compare the ratios between systems in this run, "
             "not the absolute figures"
             + (f" (some task waited for a CPU {stalled * 100:.0f}% of the run's time, /proc/pressure/cpu)." if stalled is not None else "."))
    L.append("")
    L.append("Systems: voicepipe `engine: whisper` (whisper.cpp in the process, its default partials and finals decoded ahead) "
             f"with Whisper tiny.en (`.deps/whisper/models/ggml-tiny.en.bin`), threads {THREADS}, beam_size 1; the same with "
             f"partial_interval_ms {QUIET_MS}, paced runs only (no partial decodes on utterances under 10 s); faster-whisper "
             f"(CTranslate2) on the same weights (`.deps/whisper/ct2/tiny.en`, the files the ggml model is converted from), "
             f"cpu_threads {THREADS}, beam_size 1, compute_type float32 (what `default` resolves to on this CPU: CTranslate2 "
             "has no float16 there and widens the float16 weights), timestamps on, no VAD filter, condition_on_previous_text off, "
             "no word timestamps (its word alignment is an extra pass; voicepipe's word times come from whisper.cpp's token "
             "times at no cost), decoding exactly the utterances voicepipe's VAD cut (each final's start_ms..end_ms of the "
             "as-fast-as-possible run); voicepipe `engine: pocketsphinx` (Debian's en-us model). voicepipe runs the graph of "
             f"`pipelines/recognizer-file.yaml` (file-source, volume, vad stop_ms {STOP_MS}, slicer with stream delivery, asr) "
             "with each system's asr parameters, `--log-level debug` for whisper's per-utterance decode times.")
    L.append("")
    L.append("Material (made at run time, nothing downloaded), each set joined with 1 s of silence between clips:")
    for m in sets:
        L.append(f"- {m['what']} ({len(m['refs'])} clips, {m['audio_s']:.1f} s)")
    L.append("")
    L.append("Word error rate: case, punctuation, bracketed non-speech tags and numbers normalized the same way for "
             "all systems (numbers, spelled or in digits, become digit sequences: \"ten\", \"10\" → 1 0; "
             "\"one two three four\", \"1234\", \"1-2-3-4\" → 1 2 3 4; Mr. → mister).")
    L.append("")

    L.append("## Word error rate")
    L.append("")
    rows = [("voicepipe whisper, as fast as possible", "whisper", "texts"), ("voicepipe whisper, paced at 1x", "whisper", "paced_texts"),
            (f"voicepipe whisper, paced, partial_interval_ms {QUIET_MS}", "whisper-np", "paced_texts"),
            ("faster-whisper, same utterances", "faster", "texts"), ("voicepipe pocketsphinx", "pocketsphinx", "texts")]
    L.append("| system | " + " | ".join(keys) + " | all |")
    L.append("|---|" + "---:|" * (len(keys) + 1))
    for label, s, field in rows:
        cells, errs, total = [], 0, 0
        for m in sets:
            texts = get(s, m["key"], field)
            if texts is None:
                cells.append("failed")
                continue
            ref = normalize(" ".join(m["refs"]))
            e = edit_distance(ref, normalize(" ".join(texts)))
            cells.append(f"{e / len(ref):.3f}")
            errs += e; total += len(ref)
        L.append(f"| {label} | " + " | ".join(cells) + f" | {errs / total:.3f} |" if total and "failed" not in cells else
                 f"| {label} | " + " | ".join(cells) + " | — |")
    L.append("")

    L.append("## Speed, latency, memory")
    L.append("")
    L.append("RTF: decoding time over audio time, as fast as possible (voicepipe: wall time minus the start-up and "
             "model load measured apart on 0.2 s of silence; faster-whisper: the sum of its per-utterance decode times, "
             "model load apart). CPU: CPU seconds (all threads) per second of audio, the same way, and in brackets for the "
             "whole paced run. End of sentence → final: from the true end of each sentence (the clean clip's last 10 ms "
             "frame within 40 dB of its peak) to its final, audio paced at 1x (file-source realtime); faster-whisper has no "
             f"streaming mode, so its figure is each utterance's decode time plus the same {STOP_MS} ms VAD hang-over. "
             "Peak memory: the process's maximum resident set (getrusage of the child; voicepipe: the larger of the fast and "
             "the paced run).")
    L.append("")
    L.append("| system | RTF | CPU s per audio s (paced) | start-up + model load s | end of sentence → final, synthetic: median / p90 / max ms | human: median / max ms | peak RSS MiB |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    for s in ("whisper", "whisper-np", "faster", "pocketsphinx"):
        label = names[s]
        done = [m for m in sets if results[m["key"]][s]]
        if not done:
            L.append(f"| {label} | failed | | | | | |")
            continue

        def weighted(field):
            ms_ = [m for m in done if field in results[m["key"]][s]]
            return sum(get(s, m["key"], field) * m["audio_s"] for m in ms_) / sum(m["audio_s"] for m in ms_) if ms_ else None
        rtf, cpu, pcpu = weighted("rtf"), weighted("cpu"), weighted("paced_cpu")
        cpu_s = (f"{cpu:.3f}" if cpu is not None else "—") + (f" ({pcpu:.3f})" if pcpu is not None else "")
        lat = [x for k in synthetic for x in get(s, k, "lat", [])]
        hlat = get(s, "human", "lat", []) if "human" in results else []
        load = (f"{statistics.median(get(s, m['key'], 'load') for m in done if get(s, m['key'], 'load') is not None):.2f} (model only)"
                if s == "faster" else f"{loads[s][0]:.2f}" if s in loads else "—")
        rss = [get(s, m["key"], "rss") for m in done if get(s, m["key"], "rss")]
        p90 = f"{pct(lat, 0.9) * 1000:.0f}" if lat else "—"
        L.append(f"| {label} | {f'{rtf:.3f}' if rtf is not None else '—'} | {cpu_s} | {load} | {ms(lat)} / {p90} / {ms(lat, 'max')} | "
                 f"{ms(hlat)} / {ms(hlat, 'max')} | {f'{max(rss) / 1024:.0f}' if rss else '—'} |")
    L.append("")

    # Goals.
    L.append("## Goals")
    L.append("")
    compared, excluded, same, diffs = [], 0, 0, []
    for k in keys:
        w, f = results[k]["whisper"], results[k]["faster"]
        if "texts" not in w or "texts" not in f:
            continue
        for i, (tw, tf, d) in enumerate(zip(w["texts"], f["texts"], w["decoded"])):
            if d is None or d["ahead"]:
                excluded += 1
                continue
            compared.append((tf, tw))
            if normalize(tw) == normalize(tf):
                same += 1
            else:
                diffs.append((k, i, tf, tw))
    if compared:
        ref = [w for tf, _ in compared for w in normalize(tf)]
        conv = edit_distance(ref, [w for _, tw in compared for w in normalize(tw)]) / max(1, len(ref))
        L.append(f"- Conversion check, WER of voicepipe-whisper's transcripts against faster-whisper's on the same samples: "
                 f"**{conv:.3f}** ({conv * 100:.1f} points; goal within 2 points: {'met' if conv <= 0.02 else 'NOT met'}); "
                 f"{same} of {len(compared)} utterances word for word the same. Left out: {excluded} utterance(s) whose final "
                 "voicepipe decoded ahead, from the start of the pause (a shorter stretch of audio, whose length voicepipe does not report).")
    lat = [x for k in synthetic for x in get("whisper", k, "lat", [])]
    np_lat = [x for k in synthetic for x in get("whisper-np", k, "lat", [])]
    lengths = [x for m in sets if m["synthetic"] for x in m["lengths"]]
    if lat:
        med = statistics.median(lat)
        L.append(f"- voicepipe whisper, end of sentence → final on the synthetic sentences (median length "
                 f"{statistics.median(lengths):.1f} s, {min(lengths):.1f}–{max(lengths):.1f} s): median **{med * 1000:.0f} ms** "
                 f"over {len(lat)} sentences (goal ≤ 500 ms: {'met' if med <= 0.5 else 'NOT met'})"
                 + (f"; with partial_interval_ms {QUIET_MS}: {statistics.median(np_lat) * 1000:.0f} ms." if np_lat else "."))
    L.append("")
    if diffs:
        L.append("Utterances where the two Whisper implementations differ (normalized words):")
        L.append("")
        L.append("| material | # | faster-whisper | voicepipe whisper |")
        L.append("|---|---:|---|---|")
        for k, i, tf, tw in diffs:
            L.append(f"| {k} | {i + 1} | {tf or '(nothing)'} | {tw or '(nothing)'} |")
        L.append("")
    changed = []
    for k in keys:
        w = results[k]["whisper"]
        for i, (a_, b_) in enumerate(zip(w.get("texts", []), w.get("paced_texts", []))):
            if normalize(a_) != normalize(b_):
                changed.append(f"{k} #{i + 1}: \"{a_}\" as fast as possible, \"{b_}\" paced")
    if changed:
        L.append(f"voicepipe whisper's finals differ between the as-fast-as-possible and the paced run on {len(changed)} "
                 "utterance(s) of identical audio; a final decoded ahead (from the start of the pause, when a decoder is free: "
                 "nearly always when paced, rarely when the file is read as fast as possible) sees a shorter stretch of audio: "
                 + "; ".join(changed) + ".")
        L.append("")

    # Decode time per utterance.
    L.append("## Decode time per utterance")
    L.append("")
    L.append("whisper.cpp's encoder (like Whisper's) always processes a 30 s window, however short the utterance, so a "
             "decode costs about the same for 1 s as for 5 s of speech; a smaller `audio_ctx` (not implemented) would cut the "
             "encoder's share. whisper.cpp: the decode times voicepipe logs (`--log-level debug`: the decoding itself, not "
             "the wait for a decoder thread); faster-whisper: `transcribe()` per utterance; speech_end → final: from the VAD's "
             "speech_end event to the final in the paced run (a final decoded ahead can come before its speech_end event). "
             "Columns: utterance length (start_ms..end_ms, with the slicer's pre-roll and the VAD hang-over); count in brackets.")
    L.append("")
    buckets = [(0, 2), (2, 3), (3, 4.5), (4.5, 1e9)]
    L.append("| figure | all: median / max ms | " + " | ".join(
        f"{lo:g}–{hi:g} s" if hi < 1e9 else f"≥ {lo:g} s" for lo, hi in buckets) + " |")
    L.append("|---|---:|" + "---:|" * len(buckets))

    def series(s, values, lengths):
        xs, ls = [], []
        for k in keys:
            v, le = get(s, k, values, []), get(s, k, lengths, [])
            for x, l in zip(v, le):
                if x is not None:
                    xs.append(x); ls.append(l)
        return xs, ls

    for k in keys:
        for s in ("whisper", "whisper-np"):
            r = results[k][s]
            if "decoded" in r:
                r["decode_fast"] = [d["decode_s"] if d else None for d in r["decoded"]]
                r["fast_utt_s"] = [(b - a) / 1000 for a, b in r["spans"]]
            if "paced_decoded" in r:
                r["decode_paced"] = [d["decode_s"] if d else None for d in r["paced_decoded"]]
    figures = [("whisper.cpp decode, as fast as possible", "whisper", "decode_fast", "fast_utt_s"),
               ("whisper.cpp decode, paced", "whisper", "decode_paced", "paced_utt_s"),
               (f"whisper.cpp decode, paced, partial_interval_ms {QUIET_MS}", "whisper-np", "decode_paced", "paced_utt_s"),
               ("faster-whisper `transcribe()`", "faster", "decode", "utt_s"),
               ("voicepipe whisper: speech_end → final, paced", "whisper", "vad_final", "paced_utt_s"),
               (f"voicepipe whisper, partial_interval_ms {QUIET_MS}: speech_end → final", "whisper-np", "vad_final", "paced_utt_s"),
               ("voicepipe pocketsphinx: speech_end → final, paced", "pocketsphinx", "vad_final", "paced_utt_s")]
    for label, s, values, lengths in figures:
        xs, ls = series(s, values, lengths)
        if not xs:
            continue
        cells = []
        for lo, hi in buckets:
            b = [x for x, l in zip(xs, ls) if lo <= l < hi]
            cells.append(f"{ms(b)} ({len(b)})" if b else "—")
        L.append(f"| {label} | {ms(xs)} / {ms(xs, 'max')} | " + " | ".join(cells) + " |")
    L.append("")
    enc = [get("faster", k, "encoder") for k in keys if get("faster", k, "encoder") is not None]
    if enc:
        L.append(f"faster-whisper's encoder alone on one 30 s window: {statistics.median(enc) * 1000:.0f} ms (median over the "
                 "materials), the floor under each of its decodes.")
    for s in ("whisper", "whisper-np"):
        ahead_fast = sum(1 for k in keys for d in get(s, k, "decoded", []) if d and d["ahead"])
        ahead_paced = sum(1 for k in keys for d in get(s, k, "paced_decoded", []) if d and d["ahead"])
        n_paced = sum(len(get(s, k, "paced_decoded", [])) for k in keys)
        n_fast = sum(len(get(s, k, "decoded", [])) for k in keys)
        partials = sum(get(s, k, "partials", 0) for k in keys)
        if n_paced:
            L.append(f"{names[s]}: finals decoded ahead {ahead_paced} of {n_paced} paced"
                     + (f" ({ahead_fast} of {n_fast} as fast as possible)" if n_fast else "")
                     + f"; {partials} partial transcripts shown in the paced runs.")
    L.append("")

    if problems or failures:
        L.append("## Problems seen")
        L.append("")
        for p in failures + problems:
            L.append(f"- {p}")
        L.append("")

    L.append("## Transcripts")
    L.append("")
    for m in sets:
        L.append(f"**{m['key']}** — reference: {' / '.join(m['refs'])}")
        L.append("")
        for label, s, field in rows:
            texts = get(s, m["key"], field)
            L.append(f"- {label}: " + (" / ".join(t or "(nothing)" for t in texts) if texts is not None else "failed"))
        L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main() or 0)
