#!/usr/bin/env python3
"""Deterministic Wyoming ASR test server for voicepipe's Wyoming ASR client tests.

Real protocol peer built on the `wyoming` package (pip install wyoming,
developed against 1.10.2). It does no speech recognition: the transcript
describes the audio that arrived, so a test can check the client's audio
path end to end.

Transcript text (one utterance = [transcribe] audio-start audio-chunk* audio-stop):

    "samples=<frames> rate=<hz> tone=<hz>"   dominant frequency from zero
                                             crossings in the 10 ms blocks above
                                             -50 dBFS, rounded to nearest 10 Hz
    "samples=<frames> rate=<hz> silence"     RMS below -50 dBFS (or no audio)

Only 16-bit PCM (width 2) is accepted; with channels > 1 the first channel
is analysed. <frames> counts sample frames (bytes / (width * channels)).

stdout: exactly one line, "PORT <n>", flushed as soon as the socket listens.
stderr: one line per event received and sent, prefixed "[wyoming-asr-server]".

Usage:
    python3 wyoming_asr_server.py --uri tcp://127.0.0.1:0 [--streaming]
        [--chunk-every N] [--stop-before-transcript] [--fail-after-chunks N]
        [--fail-mode close|reset] [--error-on-transcribe] [--delay-ms N]
        [--close-after-transcript]

Streaming order (--streaming), as in the Wyoming README:
    transcript-start            before the first transcript-chunk
    transcript-chunk            every --chunk-every audio chunks while audio
                                arrives, text "samples=<running frames>"
    (audio-stop received)       transcript-start here if none was sent yet
    transcript                  final text (after --delay-ms)
    transcript-stop
With --stop-before-transcript, transcript-stop is sent before transcript
(some servers use that order; a client should accept both).

Errors are sent as `error` events {text, code} and end the utterance: the
server drops the utterance's remaining events up to its audio-stop and
sends no transcript for it. Codes: transcribe-rejected, unknown-model,
unsupported-language, unsupported-audio-format, audio-format-mismatch,
partial-frame, protocol. The connection stays open after an error.

--fail-after-chunks N drops the connection right after the N-th audio-chunk
of each utterance, without answering: --fail-mode close (default) sends FIN
(client reads EOF; its further writes are read and discarded for up to 5 s),
--fail-mode reset sends RST (client gets ECONNRESET / EPIPE).

Transcript language: echoed from transcribe.language when given, else omitted.
Transcript context: echoed from transcribe.context when given.
A connection may carry any number of utterances; `describe` and `ping` are
answered at any time. Stop the server with SIGTERM or SIGINT (exit code 0).
"""

import argparse
import array
import asyncio
import math
import signal
import socket
import struct
import sys
from functools import partial
from typing import Any, Dict, Optional
from urllib.parse import urlparse

try:
    from wyoming.asr import (
        Transcribe,
        Transcript,
        TranscriptChunk,
        TranscriptStart,
        TranscriptStop,
    )
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.error import Error
    from wyoming.event import Event
    from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
    from wyoming.ping import Ping, Pong
    from wyoming.server import AsyncEventHandler, AsyncServer
except ImportError as _err:  # pragma: no cover
    print(f"[wyoming-asr-server] cannot import the wyoming package ({_err}); run: pip install wyoming",
          file=sys.stderr, flush=True)
    sys.exit(2)

PROGRAM_NAME = "test-asr"
MODEL_NAME = "test-model"
LANGUAGES = ["en"]
SILENCE_DBFS = -50.0
DRAIN_SECONDS = 5.0

_connection_counter = 0


def log(message: str) -> None:
    print(f"[wyoming-asr-server] {message}", file=sys.stderr, flush=True)


def build_info(streaming: bool) -> Info:
    attribution = Attribution(name="voicepipe tests", url="https://example.invalid/voicepipe")
    model = AsrModel(
        name=MODEL_NAME,
        attribution=attribution,
        installed=True,
        description="Deterministic test model (reports sample count and tone)",
        version="1.0",
        languages=list(LANGUAGES),
    )
    program = AsrProgram(
        name=PROGRAM_NAME,
        attribution=attribution,
        installed=True,
        description="voicepipe Wyoming ASR test server",
        version="1.0",
        models=[model],
        supports_transcript_streaming=streaming,
    )
    return Info(asr=[program])


def analyse(pcm: bytes, rate: int, channels: int) -> str:
    """Describe 16-bit little-endian PCM: frame count, rate, tone or silence."""
    samples = array.array("h")
    samples.frombytes(pcm)
    if sys.byteorder == "big":
        samples.byteswap()
    if channels > 1:
        samples = samples[0::channels]
    frames = len(samples)
    prefix = f"samples={frames} rate={rate}"
    if frames == 0:
        return f"{prefix} silence"

    energy = 0
    for s in samples:
        energy += s * s
    rms = math.sqrt(energy / frames)
    dbfs = 20.0 * math.log10(rms / 32768.0) if rms > 0 else -math.inf
    if dbfs < SILENCE_DBFS:
        return f"{prefix} silence"

    # The tone is measured where there is sound: silence around it (pre-roll, trailing
    # silence) must not dilute the estimate. 10 ms blocks above the silence level count.
    block = max(1, rate // 100)
    crossings = 0
    counted = 0
    positive = None
    for start in range(0, frames, block):
        part = samples[start:start + block]
        e = 0
        for v in part:
            e += v * v
        r = math.sqrt(e / len(part))
        if r <= 0 or 20.0 * math.log10(r / 32768.0) < SILENCE_DBFS:
            positive = None
            continue
        if positive is None:
            positive = part[0] >= 0
        for v in part:
            now = v >= 0
            if now != positive:
                crossings += 1
                positive = now
        counted += len(part)
    hz = crossings * rate / (2.0 * max(counted, 1))
    tone = int(math.floor(hz / 10.0 + 0.5)) * 10
    return f"{prefix} tone={tone}"


def describe_event(event: Event) -> str:
    data = dict(event.data or {})
    parts = [event.type]
    for key in sorted(data):
        parts.append(f"{key}={data[key]!r}")
    if event.payload:
        parts.append(f"payload={len(event.payload)}B")
    return " ".join(parts)


def language_supported(language: str) -> bool:
    primary = language.replace("_", "-").split("-")[0].lower()
    return primary in LANGUAGES


class Utterance:
    def __init__(self, rate: int, width: int, channels: int) -> None:
        self.rate = rate
        self.width = width
        self.channels = channels
        self.chunks = 0
        self.pcm = bytearray()
        self.failed = False
        self.transcript_started = False


class TestAsrHandler(AsyncEventHandler):
    def __init__(self, args: argparse.Namespace, info_event: Event, *rest, **kwargs) -> None:
        super().__init__(*rest, **kwargs)
        global _connection_counter
        _connection_counter += 1
        self.conn = _connection_counter
        self.args = args
        self.info_event = info_event
        # Request from the last `transcribe` (None: none sent for this utterance).
        self.request: Optional[Dict[str, Any]] = None
        # True after a rejected transcribe: drop the following utterance quietly.
        self.rejected = False
        self.utt: Optional[Utterance] = None
        self.draining = False
        self.discarded = 0
        peer = self.writer.get_extra_info("peername")
        log(f"conn={self.conn} open peer={peer}")

    # -- helpers ---------------------------------------------------------

    async def send(self, event: Event) -> None:
        log(f"conn={self.conn} send {describe_event(event)}")
        await self.write_event(event)

    async def send_error(self, text: str, code: str) -> None:
        await self.send(Error(text=text, code=code).event())

    async def fail_utterance(self, text: str, code: str) -> None:
        """Send an error and drop the rest of the utterance up to audio-stop."""
        await self.send_error(text, code)
        if self.utt is None:
            # Placeholder so that further chunks are dropped without more errors.
            self.utt = Utterance(0, 0, 0)
        self.utt.failed = True

    def drop_connection(self) -> bool:
        """--fail-after-chunks: drop the connection; returns handle_event's result."""
        transport = self.writer.transport
        if self.args.fail_mode == "reset":
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:
                    # SO_LINGER {on, 0}: close() sends RST instead of FIN.
                    sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                except OSError as err:
                    log(f"conn={self.conn} SO_LINGER failed: {err}")
            transport.abort()
            return False

        # "close": send FIN (the client reads EOF), then read and discard
        # whatever the client still sends, so no RST is provoked. The socket
        # is fully closed when the client closes, or after DRAIN_SECONDS.
        self.draining = True
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(DRAIN_SECONDS, transport.abort)
        return True

    # -- event loop ------------------------------------------------------

    async def run(self) -> None:
        try:
            await super().run()
        except (asyncio.IncompleteReadError, ConnectionError) as err:
            log(f"conn={self.conn} connection lost: {type(err).__name__}: {err}")
        except Exception as err:  # keep the server alive, but say why
            log(f"conn={self.conn} handler failed: {type(err).__name__}: {err}")
        finally:
            if self.discarded:
                log(f"conn={self.conn} discarded {self.discarded} event(s) after the drop")
            log(f"conn={self.conn} closed")

    async def handle_event(self, event: Event) -> bool:
        if self.draining:
            self.discarded += 1
            if self.discarded == 1:
                log(f"conn={self.conn} discarding further input (connection dropped)")
            return True
        log(f"conn={self.conn} recv {describe_event(event)}")

        if Describe.is_type(event.type):
            await self.send(self.info_event)
            return True

        if Ping.is_type(event.type):
            await self.send(Pong(text=Ping.from_event(event).text).event())
            return True

        if Transcribe.is_type(event.type):
            return await self.on_transcribe(event)

        if AudioStart.is_type(event.type):
            return await self.on_audio_start(event)

        if AudioChunk.is_type(event.type):
            return await self.on_audio_chunk(event)

        if AudioStop.is_type(event.type):
            return await self.on_audio_stop(event)

        log(f"conn={self.conn} ignoring unhandled event type {event.type!r}")
        return True

    async def on_transcribe(self, event: Event) -> bool:
        if self.utt is not None:
            if not self.utt.failed:
                await self.fail_utterance(
                    "transcribe received while an audio stream is open", "protocol"
                )
            return True

        if self.args.error_on_transcribe:
            self.request = None
            self.rejected = True
            await self.send_error("transcribe rejected by --error-on-transcribe", "transcribe-rejected")
            return True

        request = Transcribe.from_event(event)
        if request.name is not None and request.name not in (MODEL_NAME, PROGRAM_NAME):
            self.rejected = True
            await self.send_error(f"unknown model {request.name!r}", "unknown-model")
            return True
        if request.language is not None and not language_supported(request.language):
            self.rejected = True
            await self.send_error(
                f"unsupported language {request.language!r}", "unsupported-language"
            )
            return True

        self.rejected = False
        self.request = {"language": request.language, "context": request.context}
        return True

    async def on_audio_start(self, event: Event) -> bool:
        if self.utt is not None:
            if not self.utt.failed:
                await self.fail_utterance(
                    "audio-start received while an audio stream is open", "protocol"
                )
            return True

        try:
            start = AudioStart.from_event(event)
        except (KeyError, TypeError) as err:
            await self.fail_utterance(f"audio-start missing field {err}", "protocol")
            return True

        self.utt = Utterance(start.rate, start.width, start.channels)
        if self.rejected:
            self.utt.failed = True  # error already sent for the transcribe
            return True

        if (
            not isinstance(start.rate, int)
            or not isinstance(start.width, int)
            or not isinstance(start.channels, int)
            or start.rate <= 0
            or start.channels <= 0
            or start.width != 2
        ):
            await self.fail_utterance(
                f"unsupported audio format rate={start.rate} width={start.width} "
                f"channels={start.channels} (need width=2, rate>0, channels>0)",
                "unsupported-audio-format",
            )
        return True

    async def on_audio_chunk(self, event: Event) -> bool:
        utt = self.utt
        if utt is None:
            await self.fail_utterance("audio-chunk received before audio-start", "protocol")
            return True
        if utt.failed:
            return True

        try:
            chunk = AudioChunk.from_event(event)
        except (KeyError, TypeError) as err:
            await self.fail_utterance(f"audio-chunk missing field {err}", "protocol")
            return True

        if (chunk.rate, chunk.width, chunk.channels) != (utt.rate, utt.width, utt.channels):
            await self.fail_utterance(
                f"audio-chunk format rate={chunk.rate} width={chunk.width} "
                f"channels={chunk.channels} does not match audio-start "
                f"rate={utt.rate} width={utt.width} channels={utt.channels}",
                "audio-format-mismatch",
            )
            return True

        utt.chunks += 1
        utt.pcm.extend(chunk.audio)

        if self.args.fail_after_chunks is not None and utt.chunks >= self.args.fail_after_chunks:
            log(
                f"conn={self.conn} --fail-after-chunks {self.args.fail_after_chunks}: "
                f"dropping connection (--fail-mode {self.args.fail_mode})"
            )
            return self.drop_connection()

        if self.args.streaming and utt.chunks % self.args.chunk_every == 0:
            if not utt.transcript_started:
                await self.send(TranscriptStart(language=self.language()).event())
                utt.transcript_started = True
            frames = len(utt.pcm) // (utt.width * utt.channels)
            await self.send(TranscriptChunk(text=f"samples={frames}").event())
        return True

    async def on_audio_stop(self, event: Event) -> bool:
        utt = self.utt
        request = self.request
        self.utt = None
        self.request = None
        self.rejected = False

        if utt is None:
            await self.send_error("audio-stop received without audio-start", "protocol")
            return True
        if utt.failed:
            log(f"conn={self.conn} utterance dropped (error already sent)")
            return True

        frame = utt.width * utt.channels
        if len(utt.pcm) % frame != 0:
            await self.send_error(
                f"audio is {len(utt.pcm)} bytes, not a whole number of "
                f"{frame}-byte frames",
                "partial-frame",
            )
            return True

        text = analyse(bytes(utt.pcm), utt.rate, utt.channels)
        language = request["language"] if request else None
        context = request["context"] if request else None

        if self.args.streaming and not utt.transcript_started:
            await self.send(TranscriptStart(language=language).event())
            utt.transcript_started = True

        if self.args.delay_ms > 0:
            await asyncio.sleep(self.args.delay_ms / 1000.0)

        final = Transcript(text=text, language=language, context=context).event()
        if self.args.streaming and self.args.stop_before_transcript:
            await self.send(TranscriptStop().event())
            await self.send(final)
        elif self.args.streaming:
            await self.send(final)
            await self.send(TranscriptStop().event())
        else:
            await self.send(final)

        if self.args.close_after_transcript:
            log(f"conn={self.conn} --close-after-transcript: closing")
            return False
        return True

    def language(self) -> Optional[str]:
        return self.request["language"] if self.request else None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", default="tcp://127.0.0.1:0",
                        help="tcp://HOST:PORT (PORT 0 picks a free port)")
    parser.add_argument("--streaming", action="store_true",
                        help="advertise and send transcript-start/-chunk/-stop")
    parser.add_argument("--chunk-every", type=int, default=4, metavar="N",
                        help="with --streaming: one transcript-chunk per N audio chunks (default 4)")
    parser.add_argument("--stop-before-transcript", action="store_true",
                        help="with --streaming: send transcript-stop before the final transcript")
    parser.add_argument("--fail-after-chunks", type=int, default=None, metavar="N",
                        help="drop the connection after the N-th audio chunk of an utterance")
    parser.add_argument("--fail-mode", choices=("close", "reset"), default="close",
                        help="how --fail-after-chunks drops the connection: 'close' sends FIN "
                             "(client reads EOF; later input is discarded), 'reset' sends RST "
                             "(default close)")
    parser.add_argument("--error-on-transcribe", action="store_true",
                        help="answer every transcribe with an error event")
    parser.add_argument("--delay-ms", type=int, default=0, metavar="N",
                        help="wait N ms before sending the final transcript")
    parser.add_argument("--close-after-transcript", action="store_true",
                        help="close the connection after each final transcript (like wyoming-faster-whisper)")
    args = parser.parse_args(argv)
    if args.chunk_every < 1:
        parser.error("--chunk-every must be >= 1")
    if args.fail_after_chunks is not None and args.fail_after_chunks < 1:
        parser.error("--fail-after-chunks must be >= 1")
    if args.delay_ms < 0:
        parser.error("--delay-ms must be >= 0")
    parsed = urlparse(args.uri)
    if parsed.scheme != "tcp" or parsed.hostname is None or parsed.port is None:
        parser.error("--uri must be tcp://HOST:PORT")
    return args


async def main_async(args: argparse.Namespace) -> None:
    parsed = urlparse(args.uri)
    # Port 0 is fine here: AsyncServer.from_uri only needs a port to be given.
    server = AsyncServer.from_uri(args.uri)
    info_event = build_info(args.streaming).event()
    await server.start(partial(TestAsrHandler, args, info_event))

    port = parsed.port
    listener = getattr(server, "_server", None)
    if listener is not None and listener.sockets:
        port = listener.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    log(
        f"listening on tcp://{parsed.hostname}:{port} streaming={args.streaming} "
        f"chunk_every={args.chunk_every} stop_before_transcript={args.stop_before_transcript} "
        f"fail_after_chunks={args.fail_after_chunks} fail_mode={args.fail_mode} "
        f"error_on_transcribe={args.error_on_transcribe} delay_ms={args.delay_ms} "
        f"close_after_transcript={args.close_after_transcript}"
    )

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
    # A parent may hand down a mask that blocks SIGTERM/SIGINT (threads of a test runner often
    # block them); unblock them so that stopping the server works.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
