#!/usr/bin/env python3
"""A Wyoming satellite client written with the `wyoming` package: asks for `info`, then streams each
WAV file given as one session (audio-start, chunks, audio-stop) over one connection.

    wyoming_satellite_client.py HOST PORT FILE.wav [FILE.wav ...]

Prints `info <json>` (the wake words offered), then per file every `detection <name>` and one
`transcript <text>` (or `error <code> <text>`)."""
import asyncio, json, sys, wave

from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.wake import Detection


async def main(host, port, files):
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Describe().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 10)
            if Info.is_type(event.type):
                info = Info.from_event(event)
                print("info", json.dumps({"wake": [m.name for p in info.wake for m in p.models]}), flush=True)
                break
        for path in files:
            with wave.open(path) as w:
                rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
                audio = w.readframes(w.getnframes())
            await client.write_event(AudioStart(rate=rate, width=width, channels=channels).event())
            step = rate * width * channels // 10
            for i in range(0, len(audio), step):
                await client.write_event(AudioChunk(rate=rate, width=width, channels=channels, audio=audio[i:i + step]).event())
            await client.write_event(AudioStop().event())
            while True:
                event = await asyncio.wait_for(client.read_event(), 60)
                if event is None:
                    print("closed", flush=True)
                    return
                if Detection.is_type(event.type):
                    print("detection", Detection.from_event(event).name, flush=True)
                elif Transcript.is_type(event.type):
                    print("transcript", Transcript.from_event(event).text, flush=True)
                    break
                elif Error.is_type(event.type):
                    e = Error.from_event(event)
                    print("error", e.code, e.text, flush=True)
                    break


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
