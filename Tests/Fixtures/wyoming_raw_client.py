#!/usr/bin/env python3
"""A Wyoming client in Python's standard library that can misbehave: chunks of any length, formats
the protocol does not allow, sessions left open.

    wyoming_raw_client.py HOST PORT STEP [STEP ...]

Steps (run in order):
    start:RATE:WIDTH:CHANNELS   audio-start
    audio:FILE.wav:BYTES        the file's samples as audio-chunk events of BYTES bytes each
    stop                        audio-stop
    sleep:SECONDS               wait
    read:SECONDS                print events until a transcript or an error, the connection's end, or SECONDS

Prints `transcript <text>`, `error <code> <text>`, `closed` or `timeout` for each read."""
import json, socket, sys, time, wave


def send(sock, kind, data=None, payload=b""):
    header = {"type": kind}
    body = json.dumps(data).encode() if data else b""
    if body:
        header["data_length"] = len(body)
    if payload:
        header["payload_length"] = len(payload)
    sock.sendall(json.dumps(header).encode() + b"\n" + body + payload)


class Reader:
    def __init__(self, sock):
        self.sock, self.buffer = sock, b""

    def take(self, n, deadline):
        while len(self.buffer) < n:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def event(self, deadline):
        while b"\n" not in self.buffer:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        header = json.loads(line)
        data = dict(header.get("data") or {})
        if header.get("data_length"):
            data.update(json.loads(self.take(header["data_length"], deadline)))
        if header.get("payload_length"):
            self.take(header["payload_length"], deadline)
        return header["type"], data


def main(host, port, steps):
    sock = socket.create_connection((host, port), timeout=10)
    reader = Reader(sock)
    for step in steps:
        parts = step.split(":")
        if parts[0] == "start":
            send(sock, "audio-start", {"rate": int(parts[1]), "width": int(parts[2]), "channels": int(parts[3])})
        elif parts[0] == "audio":
            with wave.open(parts[1]) as w:
                rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
                audio = w.readframes(w.getnframes())
            step_bytes = int(parts[2])
            for i in range(0, len(audio), step_bytes):
                send(sock, "audio-chunk", {"rate": rate, "width": width, "channels": channels}, audio[i:i + step_bytes])
        elif parts[0] == "stop":
            send(sock, "audio-stop")
        elif parts[0] == "sleep":
            time.sleep(float(parts[1]))
        elif parts[0] == "read":
            deadline = time.monotonic() + float(parts[1])
            try:
                while True:
                    kind, data = reader.event(deadline)
                    if kind == "transcript":
                        print("transcript", data.get("text", ""), flush=True)
                        break
                    if kind == "error":
                        print("error", data.get("code"), data.get("text"), flush=True)
                        break
            except (EOFError, ConnectionResetError):
                print("closed", flush=True)
            except socket.timeout:
                print("timeout", flush=True)
    sock.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
