#!/usr/bin/env python3
"""Echo cancellation benchmark: voicepipe's echo canceller (Sources/CEchoCancel, engines webrtc and
speex) against PulseAudio's module-echo-cancel (aec_method=webrtc and speex), on the same signals,
in the same run.

    bench/aec-bench.py [--out bench/results/aec.md] [--delays 40,80,150] [--rate 16000]
                       [--no-pulse] [--cmd 'NAME=COMMAND {near} {far} {out}' ...] [--keep DIR]

Signals (mono, ~27 s, flite + numpy, seeded): the far end (voice slt) goes through an echo path
(delay 40, 80 or 150 ms, -8 dB, low-pass 3.8 kHz, decaying room tail) and is added to the near end
(voice rms) and white noise at -60 dBFS. The time line has far-end-only speech (far1), near-end-only
speech, double talk, far-end-only speech again (far2) and double talk again.

Metrics (see write_report for the wording that goes into the results):
  - ERLE, dB, over the far-end-only frames where the echo is above -50 dBFS: far1 after its first
    2 s, and far2 (after double talk);
  - double-talk correlation: output against the clean near end over both double-talk stretches,
    after passing the clean near end through the system's own linear response to the talker
    (fitted on the near-only stretch), plus the plain ("raw") correlation;
  - near-end level change over the near-only stretch, and the canceller's latency.

An engine is a function (near_wav, far_wav, out_wav) -> dict. The built-in ones run
bench/aec/harness.cpp (compiled by bench/aec/build.sh); `--cmd NAME=TEMPLATE` adds one, or replaces
the built-in of the same name, as a shell command on WAV paths, e.g. a voicepipe graph:

    --cmd 'voicepipe webrtc=.build/release/voicepipe run bench/graphs/aec.yaml \\
           --set mic.path={near} --set far.path={far} --set out.path={out}'

PulseAudio runs in daemons of its own, one per condition, each in a private mount namespace
(`unshare --mount`, needs root) whose /tmp is the job's directory: `save_aec=1` then dumps exactly
what that canceller received and produced, and nothing touches scripts/pulse-env.sh's daemon.
The offset the two paplay streams get in the rig is calibrated first and compensated; the echo
delay each canceller actually faced is measured from its dumps and reported.

Needs: flite, sox, g++, libwebrtc-audio-processing-dev, libspeexdsp-dev, numpy; for PulseAudio:
pulseaudio, pulseaudio-utils, util-linux (unshare), root. A full run takes about 2 minutes.
"""
import argparse, json, os, shlex, shutil, signal, subprocess, sys, tempfile, time, wave

import numpy as np

RATE = 16000
FRAME = RATE // 100
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISE_DBFS = -60.0
FAR_DBFS = -18.0     # active speech level of the far end before the echo path
NEAR_DBFS = -24.0    # active speech level of the near end at the microphone
ECHO_GAIN_DB = -8.0  # direct path of the echo
SKIP_S = 2.0         # convergence time excluded from the ERLE

FAR_TEXT = [
    "the quick brown fox jumps over the lazy dog while the radio plays an old song",
    "tomorrow we will drive to the coast and walk along the beach until sunset",
    "remember to bring the blue folder with the contracts to the meeting on friday",
    "the train to the airport leaves every twenty minutes from the central station",
    "our new office is on the third floor next to the library and the small park",
]
NEAR_TEXT = [
    "please turn on the lights in the kitchen",
    "i think the answer is forty two but let me check my notes again",
    "could you call me back in an hour",
]


# ---------------------------------------------------------------- audio helpers

def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, **kw)


def read_wav(path, rate=None):
    rate = rate or RATE
    with wave.open(path) as w:
        assert w.getsampwidth() == 2, path
        assert w.getframerate() == rate, (path, w.getframerate())
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768.0
        if w.getnchannels() > 1:
            x = x.reshape(-1, w.getnchannels())
        return x


def write_wav(path, x, rate=None):
    rate = rate or RATE
    y = np.clip(np.round(np.asarray(x) * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1 if y.ndim == 1 else y.shape[1]); w.setsampwidth(2); w.setframerate(rate)
        w.writeframes(y.tobytes())


def tts(voice, text, path):
    raw = path + ".raw.wav"
    sh("flite", "-voice", voice, "-t", text, "-o", raw)
    sh("sox", raw, "-r", str(RATE), "-c", "1", "-b", "16", path)
    os.unlink(raw)
    x = read_wav(path)
    # Trim leading/trailing silence so the timeline is exact.
    e = frame_db(x)
    act = np.nonzero(e > e.max() - 40)[0]
    return x[act[0] * FRAME:(act[-1] + 1) * FRAME]


def frame_db(x):
    n = len(x) // FRAME
    p = np.mean(x[:n * FRAME].reshape(n, FRAME) ** 2, axis=1)
    return 10 * np.log10(p + 1e-20)


def active_level(x):
    """Active speech level, dBFS: mean power of the frames within 30 dB of the loudest."""
    e = frame_db(x)
    return 10 * np.log10(np.mean(10 ** (e[e > e.max() - 30] / 10)))


def set_level(x, dbfs):
    return x * 10 ** ((dbfs - active_level(x)) / 20)


def room_response(delay_ms, rng):
    """Direct path (delayed, attenuated, low-passed) plus an exponentially decaying tail."""
    d = int(round(delay_ms * RATE / 1000))
    tail_len = int(0.12 * RATE)
    h = np.zeros(d + tail_len)
    # Direct path through a short windowed-sinc low-pass (cut-off 3.8 kHz): loudspeaker + mic.
    taps = 31
    n = np.arange(taps) - (taps - 1) / 2
    lp = np.sinc(2 * 3800 / RATE * n) * np.hamming(taps)
    lp /= lp.sum()
    start = d - (taps - 1) // 2
    h[start:start + taps] += lp * 10 ** (ECHO_GAIN_DB / 20)
    # Reflections: noise decaying by 60 dB in 150 ms, starting 3 ms after the direct sound,
    # with 8 dB less energy than the direct path, then smoothed.
    t = np.arange(tail_len - 48) / RATE
    tail = rng.standard_normal(len(t)) * np.exp(-6.9 * t / 0.15)
    tail = np.convolve(tail, np.ones(4) / 4, mode="same")
    direct_energy = np.sum((lp * 10 ** (ECHO_GAIN_DB / 20)) ** 2)
    tail *= np.sqrt(direct_energy * 10 ** (-8 / 10) / np.sum(tail ** 2))
    h[d + 48:d + 48 + len(tail)] += tail
    return h


def build_signals(tmp, delays, seed=7):
    """Returns the clean near end, the far end, a segment map and, per delay, (mic, echo)."""
    far_clips = [tts("slt", s, f"{tmp}/far{i}.wav") for i, s in enumerate(FAR_TEXT)]
    near_clips = [tts("rms", s, f"{tmp}/near{i}.wav") for i, s in enumerate(NEAR_TEXT)]
    far_clips = [set_level(c, FAR_DBFS) for c in far_clips]
    near_clips = [set_level(c, NEAR_DBFS) for c in near_clips]

    def s(t):
        return int(round(t * RATE))

    gap = 0.3
    seg = {}
    far = np.zeros(s(40)); near = np.zeros(s(40))
    # far-end only: clips 0 and 1
    t = 0.5
    seg_start = t
    for c in far_clips[:2]:
        far[s(t):s(t) + len(c)] += c
        t += len(c) / RATE + gap
    seg["far1"] = (seg_start, t - gap)
    # near-end only: near clip 0
    t += 0.4
    c = near_clips[0]; near[s(t):s(t) + len(c)] += c
    seg["near"] = (t, t + len(c) / RATE)
    t += len(c) / RATE + 0.6
    # double talk: far clip 2 with near clip 1 starting 0.4 s later
    c = far_clips[2]; far[s(t):s(t) + len(c)] += c
    dt_far = (t, t + len(c) / RATE)
    c = near_clips[1]; near[s(t + 0.4):s(t + 0.4) + len(c)] += c
    dt_near = (t + 0.4, t + 0.4 + len(c) / RATE)
    seg["double"] = (max(dt_far[0], dt_near[0]), min(dt_far[1], dt_near[1]))
    t = max(dt_far[1], dt_near[1]) + 0.6
    # far-end only again
    c = far_clips[3]; far[s(t):s(t) + len(c)] += c
    seg["far2"] = (t, t + len(c) / RATE)
    t += len(c) / RATE + 0.6
    # double talk again: far clip 4 with near clip 2 starting 0.3 s later
    c = far_clips[4]; far[s(t):s(t) + len(c)] += c
    dt_far = (t, t + len(c) / RATE)
    c = near_clips[2]; near[s(t + 0.3):s(t + 0.3) + len(c)] += c
    dt_near = (t + 0.3, t + 0.3 + len(c) / RATE)
    seg["double2"] = (max(dt_far[0], dt_near[0]), min(dt_far[1], dt_near[1]))
    total = max(dt_far[1], dt_near[1]) + 0.5
    far = far[:s(total)]; near = near[:s(total)]

    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(len(near)) * 10 ** (NOISE_DBFS / 20)
    mics = {}
    for d in delays:
        h = room_response(d, np.random.default_rng(seed + d))
        echo = np.convolve(far, h)[:len(far)]
        mics[d] = (near + echo + noise, echo)
    return near, far, seg, mics


# ---------------------------------------------------------------- metrics

def align(out, ref, max_lag):
    """Integer lag (samples) at which `out` best matches `ref` (out[n + lag] ~ ref[n]), by FFT
    cross-correlation restricted to -max_lag/4 ... max_lag."""
    n = 1 << int(np.ceil(np.log2(len(out) + len(ref))))
    c = np.fft.irfft(np.fft.rfft(out, n) * np.conj(np.fft.rfft(ref, n)), n)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag // 4, 0)])
    vals = c[lags % n]
    return int(lags[np.argmax(vals)])


def shift(x, lag, length):
    """y[n] = x[n + lag], zero-padded to `length`."""
    y = np.zeros(length)
    if lag >= 0:
        src = x[lag:lag + length]
        y[:len(src)] = src
    else:
        src = x[:length + lag]
        y[-lag:-lag + len(src)] = src
    return y


def corr(a, b):
    a = a - a.mean(); b = b - b.mean()
    den = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / den) if den > 0 else 0.0


def frame_power(x):
    n = len(x) // FRAME
    return np.mean(x[:n * FRAME].reshape(n, FRAME) ** 2, axis=1)


def erle(mic, out, echo, t0, t1):
    i0, i1 = int(t0 * RATE) // FRAME, int(t1 * RATE) // FRAME
    mask = 10 * np.log10(frame_power(echo)[i0:i1] + 1e-20) > -50
    pm = frame_power(mic)[i0:i1][mask]
    po = frame_power(out)[i0:i1][mask]
    return float(10 * np.log10(pm.sum() / max(po.sum(), 1e-20)))


def equalizer(x, y, seg, taps=64, pre=16):
    """Least-squares FIR g (taps, starting `pre` samples before zero lag) with g * x ~ y over `seg`:
    the system's own linear response to the talker (high-pass, phase), measured where there is
    no echo."""
    i0, i1 = int(seg[0] * RATE), int(seg[1] * RATE)
    X = np.stack([x[i0 - k + pre:i1 - k + pre] for k in range(taps)], axis=1)
    reg = 1e-3 * np.trace(X.T @ X) / taps
    g = np.linalg.solve(X.T @ X + reg * np.eye(taps), X.T @ y[i0:i1])
    return np.convolve(x, g)[pre:pre + len(x)]


def local_lag(x, ref, t0, t1, center, radius):
    """Lag in center-radius ... center+radius at which x[n + lag] best matches ref[n] over [t0, t1) s."""
    i0, i1 = int(t0 * RATE), int(t1 * RATE)
    r = ref[i0:i1]
    lo = i0 + center - radius
    seg = np.zeros(i1 - i0 + 2 * radius)
    a, b = max(lo, 0), min(lo + len(seg), len(x))
    if b > a:
        seg[a - lo:b - lo] = x[a:b]
    n = 1 << int(np.ceil(np.log2(len(seg) + len(r))))
    c = np.fft.irfft(np.fft.rfft(seg, n) * np.conj(np.fft.rfft(r, n)), n)[:2 * radius + 1]
    return center - radius + int(np.argmax(c))


def score(inp, out, mic, echo, near, seg):
    """Metrics of one canceller run. `inp` is the canceller's microphone input and `out` its output,
    on the same time line (for PulseAudio: its own dumps, which may start anywhere and may skip
    blocks when it resynchronizes). Each stretch is located separately: `inp` against the
    microphone file, `out` against the clean near end; the difference on the near-only stretch is
    the canceller's own latency."""
    ms = lambda v: int(v * RATE / 1000)
    g = 0 if inp is mic else align(inp, mic, len(inp) - 1)
    lag_in = {k: local_lag(inp, mic, a - 0.3, b + 0.3, g, ms(60)) for k, (a, b) in seg.items()}
    lag_near = local_lag(out, near, *seg["near"], lag_in["near"], ms(40))
    latency = lag_near - lag_in["near"]
    n = len(mic)
    sl = lambda k: slice(int(seg[k][0] * RATE), int(seg[k][1] * RATE))

    def erle_at(k, t0, t1):
        return erle(shift(inp, lag_in[k], n), shift(out, lag_in[k] + latency, n), echo, t0, t1)

    y_near = shift(out, lag_near, n)
    dts = ("double", "double2")
    y_dt = np.concatenate([shift(out, lag_in[k] + latency, n)[sl(k)] for k in dts])
    near_eq = equalizer(near, y_near, seg["near"])
    return {
        "lag_ms": 1000.0 * latency / RATE,
        "erle1": erle_at("far1", seg["far1"][0] + SKIP_S, seg["far1"][1]),
        "erle2": erle_at("far2", *seg["far2"]),
        "dt_corr": corr(y_dt, np.concatenate([near_eq[sl(k)] for k in dts])),
        "dt_corr_raw": corr(y_dt, np.concatenate([near[sl(k)] for k in dts])),
        "near_corr_raw": corr(y_near[sl("near")], near[sl("near")]),
        "near_gain_db": float(10 * np.log10(np.mean(y_near[sl("near")] ** 2) / np.mean(near[sl("near")] ** 2))),
        "skips_ms": 1000.0 * (max(lag_in.values()) - min(lag_in.values())) / RATE,
    }


# ---------------------------------------------------------------- engines

def harness_engine(harness, engine, *extra):
    def run(near_wav, far_wav, out_wav):
        t0 = time.monotonic()
        p = subprocess.run([harness, "--engine", engine, "--stats", *extra, near_wav, far_wav, out_wav],
                           check=True, capture_output=True, text=True)
        info = {"wall_s": time.monotonic() - t0}
        for line in p.stderr.splitlines():
            if line.startswith("{"):
                info.update(json.loads(line))
        return info
    return run


def command_engine(template):
    def run(near_wav, far_wav, out_wav):
        cmd = template.format(near=shlex.quote(near_wav), far=shlex.quote(far_wav), out=shlex.quote(out_wav))
        t0 = time.monotonic()
        subprocess.run(cmd, shell=True, check=True, capture_output=True)
        return {"wall_s": time.monotonic() - t0}
    return run


class PulseJob:
    """One module-echo-cancel in a PulseAudio daemon of its own.

    The daemon runs in a private mount namespace whose /tmp is the job's directory, so that
    `save_aec=1` (which writes the canceller's input and output blocks to fixed names in /tmp)
    gives each job its own aec_rec.sw / aec_play.sw / aec_out.sw, and nothing touches the
    machine's /tmp or the project's test daemon. Null sink `spk` is the loudspeaker (the
    echo-cancel sink's master), null sink `mic` is where the microphone signal is played; its
    monitor is the echo-cancel source's master."""

    def __init__(self, method, aec_args):
        self.method, self.aec_args = method, aec_args
        self.dir = tempfile.mkdtemp(prefix="vp-aec-pa-")
        self.server = f"unix:{self.dir}/runtime/native"
        self.proc = None

    def env(self):
        e = dict(os.environ, PULSE_SERVER=self.server)
        for k in ("PULSE_RUNTIME_PATH", "PULSE_STATE_PATH"):
            e.pop(k, None)
        return e

    def start(self):
        for d in ("runtime", "state", "home/.config/pulse"):
            os.makedirs(f"{self.dir}/{d}", mode=0o700)
        with open(f"{self.dir}/home/.config/pulse/daemon.conf", "w") as f:
            f.write(f"default-sample-rate = {RATE}\ndefault-sample-channels = 1\nflat-volumes = no\n")
        with open(f"{self.dir}/default.pa", "w") as f:
            f.write("load-module module-native-protocol-unix auth-anonymous=1 socket=/tmp/runtime/native\n"
                    f"load-module module-null-sink sink_name=spk rate={RATE} channels=1\n"
                    f"load-module module-null-sink sink_name=mic rate={RATE} channels=1\n"
                    f"load-module module-echo-cancel source_name=ec sink_name=ecsink source_master=mic.monitor "
                    f"sink_master=spk aec_method={self.method} aec_args=\"{self.aec_args}\" rate={RATE} channels=1 "
                    "use_volume_sharing=no adjust_time=0 save_aec=1\n")
        inner = ("mount --bind \"$0\" /tmp && HOME=/tmp/home XDG_RUNTIME_DIR=/tmp/runtime "
                 "XDG_CONFIG_HOME=/tmp/home/.config PULSE_RUNTIME_PATH=/tmp/runtime PULSE_STATE_PATH=/tmp/state "
                 "exec pulseaudio -n -F /tmp/default.pa --daemonize=no --system=false --exit-idle-time=-1 "
                 "--disallow-exit --disable-shm=yes --use-pid-file=no --realtime=no --high-priority=no "
                 "--log-target=stderr --log-level=notice")
        env = dict(os.environ)
        env.pop("PULSE_SERVER", None)
        self.log = open(f"{self.dir}/pulseaudio.log", "w")
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, self.dir],
                                     env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     start_new_session=True)

    def wait_ready(self):
        for _ in range(100):
            if self.proc.poll() is not None:
                break
            if subprocess.run(["pactl", "info"], env=self.env(), capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"PulseAudio ({self.method}) did not start; log:\n" + open(f"{self.dir}/pulseaudio.log").read())

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def dumps(self):
        """(rec, play, out) as the canceller saw them: webrtc works in float32, speex in s16."""
        dt, scale = ("<f4", 1.0) if self.method == "webrtc" else ("<i2", 1 / 32768.0)
        return tuple(np.fromfile(f"{self.dir}/aec_{k}.sw", dtype=dt).astype(np.float64) * scale
                     for k in ("rec", "play", "out"))

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def delay_seen(rec, play, mic, t0, t1):
    """The echo delay the canceller faced over [t0, t1) s of the microphone file's time line, from
    its dumps (`rec` and `play` are paired block by block)."""
    lag = local_lag(rec, mic, t0, t1, align(rec, mic, len(rec) - 1), int(0.06 * RATE))
    return echo_delay_ms(shift(play, lag, len(mic)), shift(rec, lag, len(mic)), t0, t1)


def pulse_available():
    if not all(shutil.which(x) for x in ("pulseaudio", "pactl", "paplay", "pacat", "unshare")):
        return "pulseaudio, pulseaudio-utils or unshare missing"
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        "mount --bind \"$0\" /tmp", tempfile.gettempdir()], capture_output=True, text=True)
    if p.returncode != 0:
        return "cannot make a private /tmp for the daemon (unshare --mount needs root): " + p.stderr.strip()
    return None


def pulse_run(jobs):
    """Runs every job (PulseJob, mic_wav, far_wav) at once: PulseAudio works in real time, so the
    conditions share the wall-clock time. The far end is played into the echo-cancel sink and the
    microphone signal into `mic` by two paplay processes started together, while the
    echo-cancel source is recorded."""
    procs, recs = [], []
    try:
        for job, _, _ in jobs:
            job.start()
        for job, _, _ in jobs:
            job.wait_ready()
        for job, _, _ in jobs:
            recs.append(subprocess.Popen(["pacat", "-r", "--raw", "--format=s16le", f"--rate={RATE}", "--channels=1",
                                          "--latency-msec=20", "-d", "ec"], env=job.env(),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        for job, mic_wav, far_wav in jobs:
            procs.append(subprocess.Popen(["paplay", "-d", "ecsink", far_wav], env=job.env()))
            procs.append(subprocess.Popen(["paplay", "-d", "mic", mic_wav], env=job.env()))
        for p in procs:
            p.wait(180)
        time.sleep(0.5)
    finally:
        for p in recs + procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill(); p.wait()
        for job, _, _ in jobs:
            job.stop()


def echo_delay_ms(play, rec, t0, t1, max_ms=400):
    """Delay of the echo in `rec` behind `play` over [t0, t1) s, by GCC-PHAT: the echo delay the
    canceller actually faced."""
    i0, i1 = int(t0 * RATE), int(t1 * RATE)
    a, b = play[i0:i1], rec[i0:i1]
    n = 1 << int(np.ceil(np.log2(2 * len(a))))
    X = np.fft.rfft(b, n) * np.conj(np.fft.rfft(a, n))
    c = np.fft.irfft(X / (np.abs(X) + 1e-12), n)
    m = int(max_ms * RATE / 1000)
    lags = np.concatenate([np.arange(0, m), np.arange(-m // 4, 0)])
    return 1000.0 * lags[np.argmax(c[lags % n])] / RATE


# ---------------------------------------------------------------- main

def log_row(d, name, m, extra=""):
    print(f"{d:4d} ms  {name:36s} ERLE {m['erle1']:5.1f} / {m['erle2']:5.1f} dB  DT corr {m['dt_corr']:.3f} "
          f"(raw {m['dt_corr_raw']:.3f})  near {m['near_gain_db']:+.1f} dB  latency {m['lag_ms']:.1f} ms{extra}",
          file=sys.stderr)


PULSE_CONF = [
    # (row name, aec_method, aec_args). Gain control off everywhere (it would move the capture
    # volume during the run); webrtc's noise suppression off like voicepipe's; speex keeps its
    # denoiser, because PulseAudio's residual echo suppression only runs with it (speexdsp applies
    # the preprocessor's gains only when denoise is on).
    ("PulseAudio webrtc", "webrtc", "noise_suppression=0 analog_gain_control=0"),
    ("PulseAudio webrtc, extended_filter=1", "webrtc", "noise_suppression=0 analog_gain_control=0 extended_filter=1"),
    ("PulseAudio speex", "speex", "agc=0"),
]


def run_pulse(args, tmp, delays, near, far, far_wav, seg, mics, rows):
    problem = pulse_available()
    if problem:
        print(f"skipping PulseAudio: {problem}", file=sys.stderr)
        return None
    # Calibration. How the canceller pairs the two paplay streams (stream start-up, PulseAudio's
    # latency bookkeeping for null sinks) adds an offset that belongs to the test rig, not to the
    # echo path: tens of ms, more for speex. A 4.5 s run per configuration measures it; the main
    # runs then start the far end (or the microphone) that much later, so that PulseAudio faces
    # the same echo delays as the other systems. The delay it actually faced is measured again
    # from its dumps and reported.
    d0 = delays[0]
    cal_len = int(min(4.5, seg["far1"][1]) * RATE)
    write_wav(f"{tmp}/cal-mic.wav", mics[d0][0][:cal_len])
    write_wav(f"{tmp}/cal-far.wav", far[:cal_len])
    offsets = {}
    cal = [(name, PulseJob(method, pa_args)) for name, method, pa_args in PULSE_CONF]
    try:
        pulse_run([(job, f"{tmp}/cal-mic.wav", f"{tmp}/cal-far.wav") for _, job in cal])
        for name, job in cal:
            rec, play, _ = job.dumps()
            offsets[name] = delay_seen(rec, play, mics[d0][0][:cal_len], seg["far1"][0] + 1.0, cal_len / RATE - 0.3) - d0
            print(f"{name}: rig offset {offsets[name]:+.1f} ms", file=sys.stderr)
    finally:
        for _, job in cal:
            job.cleanup()
    # One batch per delay: three daemons at a time keep a small shared machine from disturbing
    # PulseAudio's real-time streams.
    for d in delays:
        mic, echo = mics[d]
        jobs = []
        for name, method, pa_args in PULSE_CONF:
            off = int(round(offsets[name] * RATE / 1000))
            mic_wav, far_wav_pa = f"{tmp}/mic-{d}ms.wav", far_wav
            if off > 0:
                far_wav_pa = f"{tmp}/far-pa{off}.wav"
                write_wav(far_wav_pa, np.concatenate([np.zeros(off), far]))
            elif off < 0:
                mic_wav = f"{tmp}/mic-{d}ms-pa{-off}.wav"
                write_wav(mic_wav, np.concatenate([np.zeros(-off), mic]))
            jobs.append((name, PulseJob(method, pa_args), mic_wav, far_wav_pa))
        try:
            pulse_run([(job, mic_wav, far_wav_pa) for _, job, mic_wav, far_wav_pa in jobs])
            for name, job, _, _ in jobs:
                rec, play, out = job.dumps()
                m = score(rec, out, mic, echo, near, seg)
                info = {"delay_seen_ms": (delay_seen(rec, play, mic, seg["far1"][0] + SKIP_S, seg["far1"][1]),
                                          delay_seen(rec, play, mic, *seg["far2"])),
                        "rig_offset_ms": offsets[name]}
                rows.append((d, name, m, info))
                log_row(d, name, m, "  delay seen %.0f / %.0f ms" % info["delay_seen_ms"])
        finally:
            for name, job, _, _ in jobs:
                if args.keep:
                    tag = f"pa-{job.method}{'-ext' if 'extended' in name else ''}-{d}ms"
                    for k in ("aec_rec.sw", "aec_play.sw", "aec_out.sw", "pulseaudio.log"):
                        if os.path.exists(f"{job.dir}/{k}"):
                            shutil.copy(f"{job.dir}/{k}", f"{tmp}/{tag}-{k}")
                job.cleanup()
    return offsets


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/aec.md"))
    ap.add_argument("--delays", default="40,80,150", help="echo delays, ms (default 40,80,150)")
    ap.add_argument("--rate", type=int, default=16000, choices=[16000, 32000, 48000])
    ap.add_argument("--no-pulse", action="store_true", help="skip PulseAudio's module-echo-cancel")
    ap.add_argument("--cmd", action="append", default=[], metavar="NAME=TEMPLATE",
                    help="an engine run as a shell command with {near} {far} {out} (WAV paths); replaces a "
                         "built-in engine of the same name")
    ap.add_argument("--keep", metavar="DIR", help="keep signals, outputs and PulseAudio's dumps in DIR")
    args = ap.parse_args()
    global RATE, FRAME
    RATE, FRAME = args.rate, args.rate // 100
    delays = [int(x) for x in args.delays.split(",")]
    t_start = time.monotonic()

    harness = subprocess.run([os.path.join(ROOT, "bench/aec/build.sh")], check=True, capture_output=True,
                             text=True, cwd=ROOT).stdout.strip().splitlines()[-1]
    harness = os.path.join(ROOT, harness)
    engines = {
        "voicepipe webrtc": harness_engine(harness, "webrtc"),
        "voicepipe webrtc, suppression moderate": harness_engine(harness, "webrtc", "--suppression", "1"),
        "voicepipe speex": harness_engine(harness, "speex"),
        "voicepipe speex, noise suppression -15 dB": harness_engine(harness, "speex", "--ns", "2"),
    }
    for c in args.cmd:
        name, _, template = c.partition("=")
        engines[name.strip()] = command_engine(template)

    tmp = args.keep or tempfile.mkdtemp(prefix="vp-aec-bench-")
    os.makedirs(tmp, exist_ok=True)
    try:
        near, far, seg, mics = build_signals(tmp, delays)
        far_wav = f"{tmp}/far.wav"
        write_wav(far_wav, far)
        write_wav(f"{tmp}/near-clean.wav", near)

        rows = []  # (delay, system, metrics, info)
        for d in delays:
            mic, echo = mics[d]
            mic_wav = f"{tmp}/mic-{d}ms.wav"
            write_wav(mic_wav, mic)
            rows.append((d, "microphone (no AEC)", score(mic, mic, mic, echo, near, seg), {}))
            for name, run in engines.items():
                out_wav = f"{tmp}/out-{name.split(',')[0].replace(' ', '_')}-{len(rows)}-{d}ms.wav"
                info = run(mic_wav, far_wav, out_wav)
                m = score(mic, read_wav(out_wav), mic, echo, near, seg)
                rows.append((d, name, m, info))
                log_row(d, name, m, f"  delay used {info['delay_ms']} ms" if "delay_ms" in info else "")

        offsets = None if args.no_pulse else run_pulse(args, tmp, delays, near, far, far_wav, seg, mics, rows)
        write_report(args, rows, seg, delays, offsets, time.monotonic() - t_start, len(near) / RATE)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def write_report(args, rows, seg, delays, offsets, elapsed, audio_s):
    cmd = "bench/aec-bench.py" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:])
    L = ["# Echo cancellation: voicepipe's engines against PulseAudio's module-echo-cancel", ""]
    L.append(f"Command: `{cmd}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             f"whole run {elapsed:.0f} s). Everything above *Findings* is written by the script; *Findings* is "
             "written by hand from the same run.")
    L.append("")
    L.append(f"Signals: {audio_s:.1f} s at {RATE} Hz mono. Far end: flite `slt` at {FAR_DBFS:.0f} dBFS; echo path: "
             f"delay, {ECHO_GAIN_DB:.0f} dB, low-pass 3.8 kHz, plus a decaying tail (RT60 150 ms, 8 dB under the "
             f"direct sound). Near end: flite `rms` at {NEAR_DBFS:.0f} dBFS. White noise at {NOISE_DBFS:.0f} dBFS. "
             "Stretches (s): " + ", ".join(f"{k} {a:.1f}–{b:.1f}" for k, (a, b) in seg.items()) +
             " (far1, far2: far end only; near: near end only; double, double2: both talking).")
    L.append("")
    L.append("| delay | system | echo delay faced, ms | ERLE far1, dB | ERLE far2 (after double talk), dB "
             "| double-talk corr | raw double-talk corr | near-end level, dB | latency, ms | speed |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    order = {}
    for d, name, m, info in rows:
        order.setdefault(name, len(order))
    for d in delays:
        for _, name, m, info in sorted((r for r in rows if r[0] == d), key=lambda r: order[r[1]]):
            mic_row = name.startswith("microphone")
            if "delay_seen_ms" in info:
                faced = "%.0f / %.0f" % info["delay_seen_ms"]
            else:
                faced = f"{d}"
                if info.get("delay_ms", -1) >= 0:
                    faced += f" (estimated {info['delay_ms']})"
            speed = f"{info['audio_s'] / max(info['cpu_s'], 1e-6):.0f}× real time" if info.get("cpu_s") else ""
            if "delay_seen_ms" in info:
                speed = "real time"
            L.append(f"| {d} ms | {name} | {'' if mic_row else faced} | {'—' if mic_row else '%.1f' % m['erle1']} "
                     f"| {'—' if mic_row else '%.1f' % m['erle2']} | {m['dt_corr']:.3f} | {m['dt_corr_raw']:.3f} "
                     f"| {m['near_gain_db']:+.1f} | {'' if mic_row else '%.1f' % m['lag_ms']} | {speed} |")
    L.append("")
    L.append("Targets (issue): ERLE ≥ 20 dB, double-talk correlation ≥ 0.8, at least as good as PulseAudio's module.")
    L.append("")
    L.append("## Method")
    L.append("")
    L.append(
        "Every system gets the same microphone file (near end + echo + noise) and far-end file. voicepipe's engines "
        "run through `bench/aec/harness.cpp` (the C API of `Sources/CEchoCancel`, 10 ms blocks) without being told "
        "the delay: they estimate it (column *echo delay faced* shows the estimate they settled on). "
        "PulseAudio 16.1's module-echo-cancel runs in daemons of its own (one per condition, three at a time, in real "
        "time), each in a private mount namespace so that `save_aec=1` dumps exactly what the canceller received and "
        "produced (microphone and reference block by block, and its output): null sink `spk` is the echo-cancel "
        "sink's master, the microphone file is played into null sink `mic`, whose monitor is the echo-cancel "
        "source's master, and two `paplay` processes start together. The rig adds an offset between the two streams "
        "as the canceller pairs them (measured in a 4.5 s calibration run per configuration"
        + (": " + ", ".join(f"{n} {o:+.0f} ms" for n, o in offsets.items()) if offsets else "")
        + "); the main runs start the far end that much later, and *echo delay faced* is measured again from the dumps "
        "(GCC-PHAT between reference and microphone, over far1 / far2). `adjust_time=0`: both null sinks run on the "
        "same clock, and PulseAudio's periodic re-synchronisation otherwise reacted to latency-report noise by "
        "dropping reference samples every second, moving the echo by 2–20 ms mid-run. Settings: "
        + "; ".join(f"*{n}*: `aec_method={m} aec_args=\"{a}\"`" for n, m, a in PULSE_CONF) + ".")
    L.append("")
    L.append(
        "Scoring. Each stretch of a canceller's input is located on the microphone file's time line by "
        "cross-correlation, and its output by the canceller's own latency (found on the near-only stretch against the "
        "clean near end). ERLE = 10·log10(input power / output power) over the 10 ms frames of a far-end-only stretch "
        f"where the echo is above -50 dBFS; far1 skips its first {SKIP_S:.0f} s (convergence). With noise at "
        f"{NOISE_DBFS:.0f} dBFS and the echo around -25 dBFS, ERLE tops out near 36 dB unless a system also removes "
        "the noise (rows with noise suppression). *Double-talk corr* is the Pearson correlation of the output with the "
        "clean near-end speech over the two double-talk stretches, after passing the clean speech through the system's own "
        "linear response to the talker (a 64-tap least-squares fit on the near-only stretch, where there is no echo): "
        "the cancellers' high-pass filters (webrtc 80 Hz, speex's DC notch) shift the phase of a low male voice "
        "enough to cost about 0.15 of plain correlation although, where there is no echo, the output is a "
        "level-preserving linear copy of the talker (*raw* column: plain correlation after alignment). *Near-end level* is the output's level change over the near-only stretch."
    )
    L.append("")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(L))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
