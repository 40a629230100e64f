#!/usr/bin/env python3
"""A Wyoming text-to-speech client written with the `wyoming` package (as Home Assistant's is): asks for
`info`, then has each text spoken over one connection — with `synthesize`, or streamed
(`synthesize-start`, the text in chunks of a few characters, `synthesize-stop`) with --stream — and
writes each answer's audio to OUT_DIR/N.wav.

    wyoming_tts_client.py HOST PORT OUT_DIR [--stream] TEXT [TEXT ...]

Prints `info <json>`, then per text `audio <rate> <width> <channels> <chunks> <seconds> <first_chunk_ms>`
(first_chunk_ms: from the request's first event to the first audio-chunk), `stopped` after a stream's
synthesize-stopped, or `error <code> <text>`."""
import asyncio, json, os, sys, time, wave

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped


async def main(host, port, out_dir, stream, texts):
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Describe().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 10)
            if Info.is_type(event.type):
                info = Info.from_event(event)
                print("info", json.dumps({
                    "tts": [p.name for p in info.tts], "asr": [p.name for p in info.asr],
                    "voices": [v.name for p in info.tts for v in p.voices],
                    "languages": [l for p in info.tts for v in p.voices for l in v.languages],
                    "streaming": [p.supports_synthesize_streaming for p in info.tts]}), flush=True)
                break
        for n, text in enumerate(texts):
            began = time.monotonic()
            if stream:
                await client.write_event(SynthesizeStart().event())
                for i in range(0, len(text), 7):
                    await client.write_event(SynthesizeChunk(text=text[i:i + 7]).event())
                    await asyncio.sleep(0.01)
                # What a client sends for servers that do not stream: ignored by one that does.
                await client.write_event(Synthesize(text=text).event())
                await client.write_event(SynthesizeStop().event())
            else:
                await client.write_event(Synthesize(text=text).event())
            rate = width = channels = None
            audio, chunks, first = bytearray(), 0, None
            while True:
                event = await asyncio.wait_for(client.read_event(), 120)
                if event is None:
                    print("closed", flush=True)
                    return
                if AudioStart.is_type(event.type):
                    s = AudioStart.from_event(event)
                    rate, width, channels = s.rate, s.width, s.channels
                elif AudioChunk.is_type(event.type):
                    c = AudioChunk.from_event(event)
                    if first is None:
                        first = (time.monotonic() - began) * 1000
                    chunks += 1
                    audio += c.audio
                elif AudioStop.is_type(event.type):
                    seconds = len(audio) / (rate * width * channels) if rate else 0
                    print("audio", rate, width, channels, chunks, "%.3f" % seconds, "%.0f" % (first or -1), flush=True)
                    with wave.open(os.path.join(out_dir, "%d.wav" % n), "wb") as w:
                        w.setnchannels(channels); w.setsampwidth(width); w.setframerate(rate); w.writeframes(bytes(audio))
                    if not stream:
                        break
                elif SynthesizeStopped.is_type(event.type):
                    print("stopped", flush=True)
                    break
                elif Error.is_type(event.type):
                    e = Error.from_event(event)
                    print("error", e.code, e.text, flush=True)
                    break


if __name__ == "__main__":
    args = sys.argv[1:]
    host, port, out_dir = args[0], int(args[1]), args[2]
    stream = "--stream" in args[3:]
    asyncio.run(main(host, port, out_dir, stream, [a for a in args[3:] if a != "--stream"]))
