#!/usr/bin/env python3
"""Plays Twilio's side of a bidirectional Media Stream (twilio.com/docs/voice/media-streams/websocket-messages)
against a voicepipe `twilio` route, with bench/serve_client.py's standard-library WebSocket.

    twilio_client.py URL STEP...

Steps, in order:
    connected                     {"event":"connected","protocol":"Call","version":"1.0.0"}
    start[:ENCODING:RATE]         start with streamSid MZ…, callSid CA…, mediaFormat (default audio/x-mulaw 8000 1)
    media:WAV[:PACE]              the WAV (8 kHz mono 16-bit) as 20 ms media messages of base64 µ-law; PACE 1 = real time
    silence:MS                    MS of µ-law silence at real time
    dtmf:D                        a dtmf message
    mark:NAME                     a mark message (as if echoing one)
    stop                          the stop message
    text:STRING                   this text message as it is
    binary                        a binary message
    sleep:S | wait:S              wait S seconds | wait up to S seconds for the server to close

Like Twilio, it plays what it receives at real time: each `mark` from the server is echoed once the
media before it has played, and a `clear` empties the playback and echoes the marks waiting. At the end:
    media messages=N bytes=B audio_s=A span_s=S rms=R   (answer audio received; R of its decoded samples)
    mark NAME at=T played=P                         (a mark received, seconds since the first media; audio played by then)
    clear at=T
    closed CODE REASON | open
"""
import asyncio
import base64
import json
import os
import sys
import time
import wave

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from serve_client import WebSocket  # noqa: E402

STREAM = "MZ00000000000000000000000000000001"
CALL = "CA00000000000000000000000000000001"


def ulaw(sample):
    """G.711 µ-law of one 16-bit sample (ITU-T G.711 segment encoding)."""
    sign = 0x80 if sample < 0 else 0
    magnitude = min(abs(sample), 32635) + 0x84
    segment = 7
    while segment > 0 and not magnitude & (0x4000 >> (7 - segment)):
        segment -= 1
    return ~(sign | segment << 4 | (magnitude >> (segment + 3)) & 0x0F) & 0xFF


def unulaw(byte):
    """The 16-bit sample of one µ-law byte."""
    u = ~byte & 0xFF
    segment = (u >> 4) & 0x07
    magnitude = (((u & 0x0F) << 3) + 0x84) << segment
    return 0x84 - magnitude if u & 0x80 else magnitude - 0x84


def ulaw_bytes(pcm):
    return bytes(ulaw(int.from_bytes(pcm[i:i + 2], "little", signed=True)) for i in range(0, len(pcm) - 1, 2))


class Twilio:
    def __init__(self, ws):
        self.ws = ws
        self.media = {"messages": 0, "bytes": 0, "first": None, "last": None, "energy": 0}
        self.facts = []
        self.played_until = 0.0
        self.echoes = []
        self.closed = asyncio.Event()
        self.sequence = 1

    async def send(self, obj):
        obj.setdefault("sequenceNumber", str(self.sequence))
        self.sequence += 1
        await self.ws.send_text(json.dumps(obj))

    async def echo_later(self, name, when):
        await asyncio.sleep(max(0.0, when - time.monotonic()))
        if not self.closed.is_set():
            await self.send({"event": "mark", "streamSid": STREAM, "mark": {"name": name}})

    async def read(self):
        while True:
            m = await self.ws.receive()
            if m is None:
                break
            if isinstance(m, bytes):
                self.facts.append("binary %d" % len(m))
                continue
            obj = json.loads(m)
            now = time.monotonic()
            first = self.media["first"] or now
            event = obj.get("event")
            if obj.get("streamSid") != STREAM:
                self.facts.append("wrong streamSid %r" % obj.get("streamSid"))
            if event == "media":
                payload = base64.b64decode(obj["media"]["payload"])
                self.media["messages"] += 1
                self.media["bytes"] += len(payload)
                self.media["energy"] += sum(unulaw(b) ** 2 for b in payload)
                self.media["first"] = first
                self.media["last"] = now
                self.played_until = max(self.played_until, now) + len(payload) / 8000
            elif event == "mark":
                name = obj["mark"]["name"]
                played = self.media["bytes"] / 8000
                self.facts.append("mark %s at=%.3f played=%.3f" % (name, now - first, played))
                self.echoes.append(asyncio.ensure_future(self.echo_later(name, max(self.played_until, now))))
            elif event == "clear":
                self.facts.append("clear at=%.3f" % (now - first))
                self.played_until = now
            else:
                self.facts.append("event %s" % event)
        self.closed.set()


async def paced(twilio, chunks, pace):
    start = time.monotonic()
    for i, c in enumerate(chunks):
        await twilio.send({"event": "media", "streamSid": STREAM,
                           "media": {"track": "inbound", "chunk": str(i + 1), "timestamp": str(i * 20),
                                     "payload": base64.b64encode(c).decode()}})
        if pace:
            await asyncio.sleep(max(0.0, start + (i + 1) * 0.02 * pace - time.monotonic()))


async def main():
    url, steps = sys.argv[1], sys.argv[2:]
    ws = await WebSocket.connect(url)
    twilio = Twilio(ws)
    reader = asyncio.ensure_future(twilio.read())
    try:
        for step in steps:
            name, _, arg = step.partition(":")
            if name == "connected":
                await ws.send_text(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            elif name == "start":
                encoding, rate = (arg.split(":") + ["8000"])[:2] if arg else ("audio/x-mulaw", "8000")
                await twilio.send({"event": "start", "streamSid": STREAM, "start": {
                    "streamSid": STREAM, "accountSid": "AC00000000000000000000000000000001", "callSid": CALL,
                    "tracks": ["inbound"], "customParameters": {"caller": "test"},
                    "mediaFormat": {"encoding": encoding, "sampleRate": int(rate), "channels": 1}}})
            elif name == "media":
                path, _, pace = arg.partition(":")
                with wave.open(path, "rb") as w:
                    assert w.getframerate() == 8000 and w.getnchannels() == 1 and w.getsampwidth() == 2
                    data = ulaw_bytes(w.readframes(w.getnframes()))
                await paced(twilio, [data[i:i + 160] for i in range(0, len(data), 160)], float(pace or 1))
            elif name == "silence":
                await paced(twilio, [bytes([0xFF]) * 160] * (int(arg) // 20), 1.0)
            elif name == "dtmf":
                await twilio.send({"event": "dtmf", "streamSid": STREAM, "dtmf": {"track": "inbound_track", "digit": arg}})
            elif name == "mark":
                await twilio.send({"event": "mark", "streamSid": STREAM, "mark": {"name": arg}})
            elif name == "stop":
                await twilio.send({"event": "stop", "streamSid": STREAM,
                                   "stop": {"accountSid": "AC00000000000000000000000000000001", "callSid": CALL}})
            elif name == "text":
                await ws.send_text(arg)
            elif name == "binary":
                await ws.send_binary(b"\x00\x01\x02\x03")
            elif name == "sleep":
                await asyncio.sleep(float(arg))
            elif name == "wait":
                try:
                    await asyncio.wait_for(twilio.closed.wait(), float(arg))
                except asyncio.TimeoutError:
                    pass
            else:
                raise SystemExit("unknown step " + step)
    except ConnectionError as e:
        print("send failed: %s" % e)
    m = twilio.media
    if m["messages"]:
        print("media messages=%d bytes=%d audio_s=%.3f span_s=%.3f rms=%.0f" % (m["messages"], m["bytes"], m["bytes"] / 8000, m["last"] - m["first"],
                                                                             (m["energy"] / m["bytes"]) ** 0.5))
    for f in twilio.facts:
        print(f)
    print("closed %s" % ws.close_code if twilio.closed.is_set() else "open")
    reader.cancel()


if __name__ == "__main__":
    asyncio.run(main())
