#!/usr/bin/env python3
"""A SIP caller over UDP (standard library only) that checks voicepipe's RTP handling.

usage: rtp_probe.py HOST PORT
Offers PCMU with the address of socket C (never used to send), then sends RTP from socket A (which
voicepipe should latch onto and answer: symmetric RTP), 10 packets from socket B (another address),
10 from A with another SSRC, 5 of an unknown payload type and 3 malformed ones; hangs up with BYE.
Prints one JSON line: packets voicepipe sent to A, B and C, and the final status of the INVITE and BYE.
"""
import json, random, socket, struct, sys, time

host, port = sys.argv[1], int(sys.argv[2])
sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); sip.bind(("127.0.0.1", 0)); sip.settimeout(5)
a, b, c = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3))
for s in (a, b, c):
    s.bind(("127.0.0.1", 0)); s.setblocking(False)
lp, cp = sip.getsockname()[1], c.getsockname()[1]
call_id = "%x@probe" % random.getrandbits(64)
def request(method, cseq, to, body=b"", extra=""):
    head = (f"{method} sip:echo@{host}:{port} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{lp};branch=z9hG4bK{random.getrandbits(48):x}\r\n"
            f"From: <sip:probe@127.0.0.1:{lp}>;tag=probe1\r\nTo: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq} {method}\r\n"
            f"Contact: <sip:probe@127.0.0.1:{lp}>\r\nMax-Forwards: 70\r\n{extra}Content-Length: {len(body)}\r\n\r\n")
    sip.sendto(head.encode() + body, (host, port))
def response(method):
    while True:
        data, _ = sip.recvfrom(65536)
        text = data.decode(errors="replace")
        status = int(text.split(" ", 2)[1]) if text.startswith("SIP/2.0") else None
        if status is None or f" {method}\r\n" not in text.split("CSeq:", 1)[1].split("\r\n", 1)[0] + "\r\n":
            continue
        if status >= 200:
            return status, text
sdp = (f"v=0\r\no=probe 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio {cp} RTP/AVP 0\r\n"
       "a=rtpmap:0 PCMU/8000\r\n").encode()
request("INVITE", 1, f"<sip:echo@{host}:{port}>", sdp, "Content-Type: application/sdp\r\n")
status, ok = response("INVITE")
out = {"invite": status}
if status == 200:
    to = [l for l in ok.split("\r\n") if l.lower().startswith("to:")][0][3:].strip()
    media_port = int([l for l in ok.split("\r\n") if l.startswith("m=audio")][0].split()[1])
    request("ACK", 1, to)
    dest = ("127.0.0.1", media_port)
    counts = {"a": 0, "b": 0, "c": 0}
    def drain():
        for name, s in (("a", a), ("b", b), ("c", c)):
            while True:
                try: s.recvfrom(2048); counts[name] += 1
                except BlockingIOError: break
    def rtp(sock, seq, ssrc, pt=0):
        payload = bytes(int(127 + 100 * __import__("math").sin(i / 3)) & 0xff for i in range(160))
        sock.sendto(struct.pack("!BBHII", 0x80, pt, seq & 0xffff, seq * 160, ssrc) + payload, dest)
    seq = 1
    plan = [(a, 1, 0)] * 25 + [(b, 1, 0)] * 10 + [(a, 2, 0)] * 10 + [(a, 1, 99)] * 5 + [(a, 1, 0)] * 25
    for sock, ssrc, pt in plan:
        rtp(sock, seq, ssrc, pt); seq += 1
        time.sleep(0.02); drain()
    for _ in range(3):
        a.sendto(b"\x80\x00", dest); time.sleep(0.02); drain()
    request("BYE", 2, to)
    out["bye"], _ = response("BYE")
    time.sleep(0.1); drain()
    out.update(counts)
print(json.dumps(out))
