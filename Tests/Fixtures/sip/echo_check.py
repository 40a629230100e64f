#!/usr/bin/env python3
"""Compares what a SIP peer sent with what it recorded hearing back from an echoing graph.

usage: echo_check.py SENT.wav HEARD.wav
Prints one line of JSON: the echo's delay (ms, found by cross-correlating 10 ms energy envelopes),
the envelope correlation at that delay, and for each tone segment of SENT (start_ms, end_ms, hz) the
share of HEARD's energy at that tone's frequency in the delayed segment, and the level of HEARD in
SENT's silent gaps relative to its tones (dB). The delay may be negative when HEARD started recording after
SENT began. Standard library only.
"""
import json, math, struct, sys, wave

def read(path):
    w = wave.open(path)
    rate, ch, n = w.getframerate(), w.getnchannels(), w.getnframes()
    data = struct.unpack('<%dh' % (n * ch), w.readframes(n))
    return rate, [data[i] for i in range(0, len(data), ch)]

def envelope(s, rate, ms=10):
    step = rate * ms // 1000
    return [math.sqrt(sum(x * x for x in s[i:i + step]) / step) for i in range(0, len(s) - step + 1, step)]

def goertzel(s, rate, hz):
    k = 2 * math.cos(2 * math.pi * hz / rate)
    a = b = 0.0
    for x in s:
        a, b = x + k * a - b, a
    return a * a + b * b - k * a * b

def power(s):
    return sum(x * x for x in s) + 1e-9

sent_rate, sent = read(sys.argv[1])
heard_rate, heard = read(sys.argv[2])
es, eh = envelope(sent, sent_rate), envelope(heard, heard_rate)
def corr(lag):
    # Over the whole of SENT: what HEARD lacks at a lag counts as silence, so a lag that lines one tone
    # up with another (and leaves the rest unheard) does not win.
    pairs = [(es[i], eh[i + lag] if 0 <= i + lag < len(eh) else 0.0) for i in range(len(es))]
    ma = sum(p[0] for p in pairs) / len(pairs); mb = sum(p[1] for p in pairs) / len(pairs)
    num = sum((a - ma) * (b - mb) for a, b in pairs)
    da = math.sqrt(sum((a - ma) ** 2 for a, _ in pairs)); db = math.sqrt(sum((b - mb) ** 2 for _, b in pairs))
    return num / (da * db) if da > 0 and db > 0 else -1
# HEARD may also have started recording after SENT began (a callee that plays as soon as it answers): a
# negative delay.
best = max(range(-100, 150), key=corr)
delay_ms = best * 10
# Tone segments of SENT: runs of 10 ms frames above a tenth of its peak envelope.
peak = max(es)
segments, start = [], None
for i, v in enumerate(es + [0]):
    if v > peak / 10 and start is None: start = i
    if v <= peak / 10 and start is not None:
        if i - start >= 20: segments.append((start * 10, i * 10))
        start = None
tones = []
for a, b in segments:
    # The sent tone's frequency: the strongest of a few candidates.
    part = sent[a * sent_rate // 1000 + sent_rate // 20:b * sent_rate // 1000 - sent_rate // 20]
    hz = max([300, 440, 500, 700, 1000, 1200], key=lambda f: goertzel(part, sent_rate, f))
    h = heard[max(0, (a + delay_ms) * heard_rate // 1000 + heard_rate // 20):max(0, (b + delay_ms) * heard_rate // 1000 - heard_rate // 20)]
    if not h:
        tones.append({"start_ms": a, "end_ms": b, "hz": hz, "share": 0, "rms": 0}); continue
    n = len(h)
    share = 2 * goertzel(h, heard_rate, hz) / n / power(h)
    tones.append({"start_ms": a, "end_ms": b, "hz": hz, "share": round(share, 3), "rms": round(math.sqrt(power(h) / n))})
gaps = []
for (a0, b0), (a1, b1) in zip(segments, segments[1:]):
    h = heard[max(0, (b0 + delay_ms + 100) * heard_rate // 1000):max(0, (a1 + delay_ms - 50) * heard_rate // 1000)]
    if h: gaps.append(round(math.sqrt(power(h) / len(h))))
tone_rms = min([t["rms"] for t in tones] or [0])
print(json.dumps({"delay_ms": delay_ms, "correlation": round(corr(best), 3), "tones": tones, "gap_rms": gaps,
                  "gap_db": round(20 * math.log10((max(gaps or [0]) + 1) / (tone_rms + 1)), 1),
                  "heard_s": round(len(heard) / heard_rate, 2)}))
