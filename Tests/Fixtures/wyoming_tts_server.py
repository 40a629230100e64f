#!/usr/bin/env python3
"""Wyoming TTS test server for voicepipe's Wyoming TTS client tests.

A real protocol peer built on the `wyoming` package (pip install wyoming,
developed against 1.10.2) that really speaks: each `synthesize` is run
through the `espeak-ng` command (--engine espeak-ng, the default) or the
`flite` command (--engine flite), and the WAV it writes is streamed back as

    audio-start {rate, width, channels}
    audio-chunk {rate, width, channels} + PCM   (--chunk-ms of audio each)
    audio-stop

The voice is `synthesize.voice.name` when given (passed to espeak-ng -v or
flite -voice), else --default-voice. `describe` is answered with an `info`
listing one TTS program (supports_synthesize_streaming false).

Faults, for the client's error paths:
    --error-on-synthesize     answer every synthesize with an `error` event
                              {text, code "synthesis-refused"}
    --close-after-chunks N    after N audio-chunk events, close the
                              connection (no audio-stop)
    --silent                  read synthesize, never answer
    --width W                 send samples W bytes wide (1: unsigned 8-bit,
                              4: signed 32-bit) instead of 16-bit
    --chunk-delay-ms N        wait N ms before each audio-chunk (a server
                              slower than real time)

stdout: exactly one line, "PORT <n>", flushed as soon as the socket listens.
stderr: one line per event received and sent, prefixed "[wyoming-tts-server]".

Usage:
    python3 wyoming_tts_server.py --uri tcp://127.0.0.1:0 [--engine flite]
        [--default-voice V] [--chunk-ms N] [faults]
"""

import argparse
import asyncio
import signal
import subprocess
import sys
from functools import partial
from urllib.parse import urlparse

try:
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.error import Error
    from wyoming.event import Event
    from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
    from wyoming.server import AsyncEventHandler, AsyncServer
    from wyoming.tts import Synthesize
except ImportError as _err:  # pragma: no cover
    print(f"[wyoming-tts-server] cannot import the wyoming package ({_err}); run: pip install wyoming",
          file=sys.stderr, flush=True)
    sys.exit(2)


def log(message: str) -> None:
    print(f"[wyoming-tts-server] {message}", file=sys.stderr, flush=True)


def describe_event(event: Event) -> str:
    data = dict(event.data or {})
    parts = [event.type] + [f"{k}={data[k]!r}" for k in sorted(data)]
    if event.payload:
        parts.append(f"payload={len(event.payload)}B")
    return " ".join(parts)


def speak(engine: str, voice: str, text: str) -> "tuple[int, bytes]":
    """Runs the synthesizer command; returns (rate, 16-bit mono PCM)."""
    if engine == "flite":
        # flite writes a WAV to the file given with -o; "-" is stdout.
        command = ["flite", "-voice", voice, "-t", text, "-o", "/dev/stdout"]
    else:
        command = ["espeak-ng", "-v", voice, "--stdout", text]
    done = subprocess.run(command, capture_output=True, timeout=60)
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()}")
    data = done.stdout
    # espeak-ng --stdout writes a WAV whose length fields are unknown (0xFFFFFFFF): read the
    # format from the header and take everything after the data chunk's header as samples.
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise RuntimeError(f"{command[0]} did not write a WAV")
    pos = 12
    rate = channels = bits = None
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if cid == b"fmt ":
            channels = int.from_bytes(data[pos + 10:pos + 12], "little")
            rate = int.from_bytes(data[pos + 12:pos + 16], "little")
            bits = int.from_bytes(data[pos + 22:pos + 24], "little")
        if cid == b"data":
            pcm = data[pos + 8:] if size in (0, 0xFFFFFFFF) or pos + 8 + size > len(data) else data[pos + 8:pos + 8 + size]
            if channels != 1 or bits != 16 or rate is None:
                raise RuntimeError(f"unexpected WAV format: {channels} channels, {bits} bits")
            return rate, pcm[:len(pcm) // 2 * 2]
        pos += 8 + size + (size & 1)
    raise RuntimeError(f"{command[0]} wrote a WAV without data")


def rewidth(pcm: bytes, width: int) -> bytes:
    """16-bit little-endian samples as `width`-byte samples (1: unsigned 8-bit, 4: signed 32-bit)."""
    samples = [int.from_bytes(pcm[i:i + 2], "little", signed=True) for i in range(0, len(pcm), 2)]
    if width == 1:
        return bytes((s >> 8) + 128 for s in samples)
    if width == 4:
        return b"".join((s << 16).to_bytes(4, "little", signed=True) for s in samples)
    return pcm


class TtsHandler(AsyncEventHandler):
    def __init__(self, args: argparse.Namespace, info_event: Event, *rest, **kwargs) -> None:
        super().__init__(*rest, **kwargs)
        self.args = args
        self.info_event = info_event
        log(f"open peer={self.writer.get_extra_info('peername')}")

    async def send(self, event: Event) -> None:
        log(f"send {describe_event(event)}")
        await self.write_event(event)

    async def run(self) -> None:
        try:
            await super().run()
        except (asyncio.IncompleteReadError, ConnectionError) as err:
            log(f"connection lost: {type(err).__name__}: {err}")
        finally:
            log("closed")

    async def handle_event(self, event: Event) -> bool:
        log(f"recv {describe_event(event)}")
        if Describe.is_type(event.type):
            await self.send(self.info_event)
            return True
        if not Synthesize.is_type(event.type):
            return True
        request = Synthesize.from_event(event)
        if self.args.silent:
            log("--silent: not answering")
            return True
        if self.args.error_on_synthesize:
            await self.send(Error(text=f"refusing to say {request.text!r}", code="synthesis-refused").event())
            return True
        voice = (request.voice.name if request.voice and request.voice.name else None) or self.args.default_voice
        try:
            rate, pcm = await asyncio.get_running_loop().run_in_executor(
                None, speak, self.args.engine, voice, request.text)
        except Exception as err:  # the client is told why
            await self.send(Error(text=str(err), code="synthesis-failed").event())
            return True
        width = self.args.width
        audio = rewidth(pcm, width)
        step = max(1, rate * self.args.chunk_ms // 1000) * width
        await self.send(AudioStart(rate=rate, width=width, channels=1).event())
        sent = 0
        for start in range(0, len(audio), step):
            if self.args.chunk_delay_ms > 0:
                await asyncio.sleep(self.args.chunk_delay_ms / 1000)
            await self.send(AudioChunk(rate=rate, width=width, channels=1, audio=audio[start:start + step]).event())
            sent += 1
            if self.args.close_after_chunks is not None and sent >= self.args.close_after_chunks:
                log(f"--close-after-chunks {self.args.close_after_chunks}: closing")
                return False
        await self.send(AudioStop().event())
        return True


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", default="tcp://127.0.0.1:0", help="tcp://HOST:PORT (PORT 0 picks a free port)")
    parser.add_argument("--engine", choices=("espeak-ng", "flite"), default="espeak-ng")
    parser.add_argument("--default-voice", default=None, help="voice when synthesize names none (en-us / slt)")
    parser.add_argument("--chunk-ms", type=int, default=100, help="audio per audio-chunk (default 100 ms)")
    parser.add_argument("--chunk-delay-ms", type=int, default=0)
    parser.add_argument("--error-on-synthesize", action="store_true")
    parser.add_argument("--close-after-chunks", type=int, default=None, metavar="N")
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--width", type=int, choices=(1, 2, 4), default=2)
    args = parser.parse_args()
    if args.default_voice is None:
        args.default_voice = "slt" if args.engine == "flite" else "en-us"
    parsed = urlparse(args.uri)
    if parsed.scheme != "tcp" or parsed.hostname is None or parsed.port is None:
        parser.error("--uri must be tcp://HOST:PORT")
    return args


async def main_async(args: argparse.Namespace) -> None:
    parsed = urlparse(args.uri)
    attribution = Attribution(name="voicepipe tests", url="https://example.invalid/voicepipe")
    voice = TtsVoice(name=args.default_voice, attribution=attribution, installed=True, description=None,
                     version=None, languages=["en"])
    program = TtsProgram(name=f"test-{args.engine}", attribution=attribution, installed=True,
                         description="voicepipe Wyoming TTS test server", version="1.0", voices=[voice],
                         supports_synthesize_streaming=False)
    server = AsyncServer.from_uri(args.uri)
    await server.start(partial(TtsHandler, args, Info(tts=[program]).event()))
    port = parsed.port
    listener = getattr(server, "_server", None)
    if listener is not None and listener.sockets:
        port = listener.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    log(f"listening on tcp://{parsed.hostname}:{port} engine={args.engine} width={args.width}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    await stop.wait()
    log("stopping")
    await server.stop()


def main() -> None:
    args = parse_args()
    # Threads of a test runner often block SIGTERM/SIGINT; a child inherits the mask.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
