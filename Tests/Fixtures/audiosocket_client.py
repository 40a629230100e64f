#!/usr/bin/env python3
"""An Asterisk AudioSocket caller written from the protocol's description (docs.asterisk.org,
"AudioSocket"): every message is a 1-byte type, a 2-byte big-endian payload length and the payload.

    audiosocket_client.py HOST PORT STEP...

Steps, in order:
    uuid[:HEX32]            the call's UUID (random when not given)
    audio:WAV:TYPE[:PACE]   the WAV's samples (16-bit mono at TYPE's rate) in 20 ms audio messages of
                            TYPE (0x10 = 8 kHz ... 0x16 = 48 kHz); PACE 1 = real time (default), 0 = at once
    silence:MS:TYPE         MS of silence in 20 ms messages at real time
    dtmf:D                  one DTMF digit
    hangup                  the hangup message
    raw:HEX                 these bytes as they are
    sleep:S                 wait S seconds
    wait:S                  wait up to S seconds for the server to close the connection
    save:PATH               (before the end) write the answer audio received to PATH (WAV, first type's rate)

Whatever the server sends is read all along; at the end one line per fact:
    answer type=0xNN messages=M bytes=B max_bytes=X audio_s=A span_s=S rms=R
    error 0xNN | hangup | unknown 0xNN | closed | open
"""
import os
import socket
import struct
import sys
import threading
import time
import uuid as uuidlib
import wave

RATES = {0x10: 8000, 0x11: 12000, 0x12: 16000, 0x13: 24000, 0x14: 32000, 0x15: 44100, 0x16: 48000}


def message(kind, payload=b""):
    return struct.pack(">BH", kind, len(payload)) + payload


class Reader(threading.Thread):
    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock = sock
        self.facts = []
        self.audio = {}
        self.closed = threading.Event()

    def recv_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def run(self):
        try:
            while True:
                head = self.recv_exact(3)
                if head is None:
                    break
                kind, length = struct.unpack(">BH", head)
                payload = self.recv_exact(length) if length else b""
                if payload is None:
                    self.facts.append("truncated")
                    break
                if kind in RATES:
                    a = self.audio.setdefault(kind, {"messages": 0, "bytes": 0, "max": 0, "first": time.monotonic(), "last": 0.0, "data": bytearray()})
                    a["messages"] += 1
                    a["bytes"] += len(payload)
                    a["max"] = max(a["max"], len(payload))
                    a["last"] = time.monotonic()
                    a["data"] += payload
                elif kind == 0xFF:
                    self.facts.append("error 0x%02x" % payload[0] if payload else "error")
                elif kind == 0x00:
                    self.facts.append("hangup")
                else:
                    self.facts.append("unknown 0x%02x" % kind)
        except OSError:
            pass
        self.closed.set()


def frames(samples, rate):
    step = rate // 50 * 2
    for i in range(0, len(samples), step):
        yield samples[i:i + step]


def send_paced(sock, kind, payloads, pace):
    start = time.monotonic()
    for i, p in enumerate(payloads):
        sock.sendall(message(kind, p))
        if pace:
            delay = start + (i + 1) * 0.02 * pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def main():
    host, port, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    sock = socket.create_connection((host, port), timeout=30)
    sock.settimeout(None)
    reader = Reader(sock)
    reader.start()
    save = None
    try:
        for step in steps:
            name, _, arg = step.partition(":")
            if name == "uuid":
                sock.sendall(message(0x01, bytes.fromhex(arg) if arg else uuidlib.uuid4().bytes))
            elif name == "audio":
                parts = arg.split(":")
                path, kind = parts[0], int(parts[1], 0)
                pace = float(parts[2]) if len(parts) > 2 else 1.0
                with wave.open(path, "rb") as w:
                    assert w.getframerate() == RATES[kind] and w.getnchannels() == 1 and w.getsampwidth() == 2, "WAV format does not match the type"
                    data = w.readframes(w.getnframes())
                send_paced(sock, kind, list(frames(data, RATES[kind])), pace)
            elif name == "silence":
                ms, kind = arg.split(":")
                kind = int(kind, 0)
                n = int(ms) // 20
                send_paced(sock, kind, [bytes(RATES[kind] // 50 * 2)] * n, 1.0)
            elif name == "dtmf":
                sock.sendall(message(0x03, arg.encode("ascii")))
            elif name == "hangup":
                sock.sendall(message(0x00))
            elif name == "raw":
                sock.sendall(bytes.fromhex(arg))
            elif name == "sleep":
                time.sleep(float(arg))
            elif name == "wait":
                reader.closed.wait(float(arg))
            elif name == "save":
                save = arg
            else:
                raise SystemExit("unknown step " + step)
    except (BrokenPipeError, ConnectionResetError) as e:
        print("send failed: %s" % e)
    if not reader.closed.is_set():
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        reader.closed.wait(5)
    for kind, a in sorted(reader.audio.items()):
        rate = RATES[kind]
        samples = struct.unpack("<%dh" % (len(a["data"]) // 2), bytes(a["data"][:len(a["data"]) // 2 * 2]))
        rms = (sum(x * x for x in samples) / max(len(samples), 1)) ** 0.5
        print("answer type=0x%02x messages=%d bytes=%d max_bytes=%d audio_s=%.3f span_s=%.3f rms=%.0f"
              % (kind, a["messages"], a["bytes"], a["max"], a["bytes"] / 2 / rate, a["last"] - a["first"], rms))
    if save and reader.audio:
        kind, a = sorted(reader.audio.items())[0]
        with wave.open(save, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATES[kind])
            w.writeframes(bytes(a["data"]))
    for f in reader.facts:
        print(f)
    print("closed" if reader.closed.is_set() else "open")
    sock.close()


if __name__ == "__main__":
    main()
