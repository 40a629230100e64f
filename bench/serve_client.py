#!/usr/bin/env python3
"""A small asyncio WebSocket client (RFC 6455, standard library only) for `voicepipe serve`:
the `websocket` route (binary PCM in, JSON events out) and the `tencent-asr` route (Tencent's
real-time ASR v2: signed query, result messages). Used by the tests and by bench/serve-load.py.

    python3 bench/serve_client.py websocket ws://127.0.0.1:8080/ws/recognize speech.wav
    python3 bench/serve_client.py tencent ws://127.0.0.1:8080 APPID SECRET_ID SECRET_KEY speech.wav [--pace 1]

Prints every message received, one per line, then `closed CODE`.
"""
import asyncio, base64, hashlib, hmac, json, os, random, struct, sys, time, urllib.parse, wave


class WebSocket:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.close_code = None

    @classmethod
    async def connect(cls, url, timeout=10):
        u = urllib.parse.urlsplit(url)
        host, port = u.hostname, u.port or 80
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        writer.write((f"GET {path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = head.split(b"\r\n")[0].decode()
        if " 101 " not in status:
            raise ConnectionError(f"upgrade refused: {status}")
        return cls(reader, writer)

    def _frame(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return head + mask + masked

    async def send_binary(self, data):
        self.writer.write(self._frame(2, data))
        await self.writer.drain()

    async def send_text(self, text):
        self.writer.write(self._frame(1, text.encode()))
        await self.writer.drain()

    async def close(self, code=1000):
        try:
            self.writer.write(self._frame(8, struct.pack("!H", code)))
            await self.writer.drain()
        except ConnectionError:
            pass

    async def receive(self):
        """The next text or binary message, or None once the server closed."""
        message, opcode = b"", None
        while True:
            try:
                b0, b1 = await self.reader.readexactly(2)
            except (asyncio.IncompleteReadError, ConnectionError):
                return None
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            payload = await self.reader.readexactly(n) if n else b""
            if op == 8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                try:
                    self.writer.write(self._frame(8, payload[:2]))
                    await self.writer.drain()
                except ConnectionError:
                    pass
                return None
            if op == 9:
                self.writer.write(self._frame(10, payload))
                continue
            if op in (1, 2):
                opcode = op
            if op in (0, 1, 2):
                message += payload
                if b0 & 0x80:
                    return message.decode() if opcode == 1 else message


def tencent_url(base, appid, secret_id, secret_key, voice_id=None, model="16k_zh", expired_in=3600, extra=None):
    now = int(time.time())
    params = {"secretid": secret_id, "timestamp": str(now), "expired": str(now + expired_in), "nonce": str(random.randint(1, 10**9)),
              "engine_model_type": model, "voice_id": voice_id or os.urandom(8).hex(), "voice_format": "1", "needvad": "1"}
    params.update(extra or {})
    text = f"asr.cloud.tencent.com/asr/v2/{appid}?" + "&".join(f"{k}={params[k]}" for k in sorted(params))
    params["signature"] = base64.b64encode(hmac.new(secret_key.encode(), text.encode(), hashlib.sha1).digest()).decode()
    return f"{base}/asr/v2/{appid}?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


def pcm(path):
    with wave.open(path) as w:
        return w.readframes(w.getnframes()), w.getframerate()


async def stream(ws, audio, rate, chunk_ms=40, pace=1.0):
    """Sends `audio` in chunk_ms pieces, paced at `pace`× real time (0 = as fast as possible)."""
    step = rate * 2 * chunk_ms // 1000
    start = time.monotonic()
    for i in range(0, len(audio), step):
        await ws.send_binary(audio[i:i + step])
        if pace > 0:
            due = start + (i + step) / (rate * 2) / pace
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)


async def main(argv):
    kind = argv[1]
    pace = float(argv[argv.index("--pace") + 1]) if "--pace" in argv else 1.0
    if kind == "websocket":
        url, path = argv[2], argv[3]
    else:
        base, appid, sid, skey, path = argv[2:7]
        url = tencent_url(base, appid, sid, skey)
    audio, rate = pcm(path)
    ws = await WebSocket.connect(url)

    async def reader():
        while True:
            m = await ws.receive()
            if m is None:
                break
            print(m if isinstance(m, str) else f"<{len(m)} bytes>", flush=True)

    task = asyncio.create_task(reader())
    await stream(ws, audio, rate, pace=pace)
    await ws.send_text(json.dumps({"type": "end"}))
    await asyncio.wait_for(task, 60)
    print(f"closed {ws.close_code}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
