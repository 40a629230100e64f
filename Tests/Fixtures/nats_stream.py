#!/usr/bin/env python3
"""Prints every message of a JetStream stream as one JSON line {"seq", "subject", "msg_id", "data"}, read with
nats-py (an independent client): python3 nats_stream.py nats://127.0.0.1:4222 VOICEPIPE"""
import asyncio, json, sys

import nats


async def main(url, stream):
    nc = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=1)
    js = nc.jetstream()
    info = await js.stream_info(stream)
    if info.state.messages:
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            m = await js.get_msg(stream, seq)
            print(json.dumps({"seq": seq, "subject": m.subject, "msg_id": (m.headers or {}).get("Nats-Msg-Id"),
                              "data": json.loads(m.data.decode())}), flush=True)
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
