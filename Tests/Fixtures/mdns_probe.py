#!/usr/bin/env python3
"""mDNS / DNS-SD probe (RFC 6762 / RFC 6763) over IPv4, Python standard library only.

A reference peer for checking a DNS-SD responder or browser from outside: it browses for a
service type and prints what it finds, watches for services coming and going, publishes a
service, or dumps every mDNS packet it hears.

  mdns_probe.py browse _voicepipe-intercom._udp [--timeout 3] [--first] [--json]
  mdns_probe.py watch  _voicepipe-intercom._udp [--interval 1] [--lost-after 3] [--json]
  mdns_probe.py publish "intercom on vp-a" _voicepipe-intercom._udp 5006 v=1 [--ttl 120] [--host vp-a]
  mdns_probe.py dump [--json]

Common options: -i/--interface IFNAME (repeatable; default: every up, multicast-capable
interface with an IPv4 address, loopback excluded).

Output, one line per event (or one JSON object per line with --json):
  + "NAME" TYPE host=H port=P addr=A[,A] txt=k=v[,k=v] ttl=T if=IF from=SRC   found / resolved
  = ...                                                                        changed
  - "NAME" TYPE reason=goodbye|expired|no-answer                               gone
browse prints every resolved instance once and exits 0 if it found one (1 if none).

The socket is bound to 0.0.0.0:5353 with SO_REUSEADDR, so the probe runs beside an
avahi-daemon on the same host (SO_REUSEPORT alone is refused there: the sockets belong to
different users). Multicast replies reach every socket on the port; unicast replies do not,
so the probe never sets the QU bit.

publish is a test responder, not a full one: it answers PTR/SRV/TXT/A/ANY queries (and
_services._dns-sd._udp enumeration), announces twice on start, and sends goodbyes (TTL 0) on
SIGINT/SIGTERM; it does not probe for name conflicts.
"""

import argparse
import fcntl
import json
import random
import select
import signal
import socket
import struct
import sys
import time

MDNS_ADDR = "224.0.0.251"
MDNS_PORT = 5353
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux value; the name is missing before Python 3.12
T_A, T_PTR, T_TXT, T_AAAA, T_SRV, T_NSEC, T_ANY = 1, 12, 16, 28, 33, 47, 255
TYPE_NAMES = {T_A: "A", T_PTR: "PTR", T_TXT: "TXT", T_AAAA: "AAAA", T_SRV: "SRV", T_NSEC: "NSEC", T_ANY: "ANY"}
CLASS_IN, CACHE_FLUSH, QU_BIT = 1, 0x8000, 0x8000
SERVICES_META = (b"_services", b"_dns-sd", b"_udp", b"local")

# ---------------------------------------------------------------------------------------------
# Names: tuples of byte labels. The instance label may hold dots, so names are never split on
# them after parsing. Comparison is ASCII case-insensitive (RFC 6762 section 16).


def labels(text):
    return tuple(p.encode() for p in text.rstrip(".").split(".") if p)


def key(name):
    return tuple(label.lower() for label in name)


def show(name):
    out = []
    for label in name:
        s = label.decode("utf-8", "replace")
        out.append(s.replace("\\", "\\\\").replace(".", "\\."))
    return ".".join(out) + "."


def service_type(text):
    """'_x._udp' or '_x._udp.local' -> labels ending in local."""
    name = labels(text)
    return name if key(name[-1:]) == (b"local",) else name + (b"local",)


# ---------------------------------------------------------------------------------------------
# Wire format


def enc_name(name):
    out = bytearray()
    for label in name:
        if not 0 < len(label) < 64:
            raise ValueError(f"bad label {label!r}")
        out.append(len(label))
        out += label
    return bytes(out) + b"\0"


def read_name(buf, off):
    out, end, hops = [], None, 0
    while True:
        if off >= len(buf):
            raise ValueError("name runs past the packet")
        n = buf[off]
        if n == 0:
            off += 1
            break
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(buf):
                raise ValueError("truncated pointer")
            if end is None:
                end = off + 2
            hops += 1
            if hops > 64:
                raise ValueError("pointer loop")
            off = ((n & 0x3F) << 8) | buf[off + 1]
            continue
        if n & 0xC0:
            raise ValueError("bad label type")
        out.append(bytes(buf[off + 1 : off + 1 + n]))
        off += 1 + n
    return tuple(out), (end if end is not None else off)


class Record:
    __slots__ = ("name", "rtype", "flush", "ttl", "data")

    def __init__(self, name, rtype, ttl, data, flush=False):
        self.name, self.rtype, self.ttl, self.data, self.flush = name, rtype, ttl, data, flush

    def rdata(self):
        t, d = self.rtype, self.data
        if t == T_PTR:
            return enc_name(d)
        if t == T_SRV:
            prio, weight, port, target = d
            return struct.pack("!HHH", prio, weight, port) + enc_name(target)
        if t == T_TXT:
            items = [s if isinstance(s, bytes) else s.encode() for s in d] or [b""]
            return b"".join(bytes([len(s)]) + s for s in items)
        if t == T_A:
            return socket.inet_aton(d)
        if t == T_AAAA:
            return socket.inet_pton(socket.AF_INET6, d)
        return d

    def encode(self, ttl=None):
        rd = self.rdata()
        cls = CLASS_IN | (CACHE_FLUSH if self.flush else 0)
        return enc_name(self.name) + struct.pack("!HHIH", self.rtype, cls, self.ttl if ttl is None else ttl, len(rd)) + rd

    def describe(self):
        t, d = self.rtype, self.data
        if t == T_PTR:
            v = show(d)
        elif t == T_SRV:
            v = f"{d[0]} {d[1]} {d[2]} {show(d[3])}"
        elif t == T_TXT:
            v = " ".join(json.dumps(s.decode("utf-8", "replace")) for s in d)
        elif t in (T_A, T_AAAA):
            v = d
        else:
            v = d.hex() if isinstance(d, bytes) else str(d)
        flush = " flush" if self.flush else ""
        return f"{show(self.name)} {TYPE_NAMES.get(t, t)} ttl={self.ttl}{flush} {v}"


def parse_record(buf, off):
    name, off = read_name(buf, off)
    if off + 10 > len(buf):
        raise ValueError("truncated record")
    rtype, cls, ttl, rdlen = struct.unpack_from("!HHIH", buf, off)
    off += 10
    rd_off, end = off, off + rdlen
    if end > len(buf):
        raise ValueError("truncated rdata")
    if rtype == T_PTR:
        data, _ = read_name(buf, rd_off)
    elif rtype == T_SRV:
        prio, weight, port = struct.unpack_from("!HHH", buf, rd_off)
        target, _ = read_name(buf, rd_off + 6)
        data = (prio, weight, port, target)
    elif rtype == T_TXT:
        data, p = [], rd_off
        while p < end:
            n = buf[p]
            data.append(bytes(buf[p + 1 : p + 1 + n]))
            p += 1 + n
        data = [s for s in data if s]
    elif rtype == T_A and rdlen == 4:
        data = socket.inet_ntoa(buf[rd_off:end])
    elif rtype == T_AAAA and rdlen == 16:
        data = socket.inet_ntop(socket.AF_INET6, bytes(buf[rd_off:end]))
    else:
        data = bytes(buf[rd_off:end])
    return Record(name, rtype, ttl, data, bool(cls & CACHE_FLUSH)), end


class Message:
    def __init__(self, ident=0, flags=0, questions=(), answers=(), authority=(), additional=()):
        self.ident, self.flags = ident, flags
        self.questions = list(questions)  # (name, qtype, unicast_response)
        self.answers, self.authority, self.additional = list(answers), list(authority), list(additional)

    @property
    def is_response(self):
        return bool(self.flags & 0x8000)

    def records(self):
        return self.answers + self.authority + self.additional

    @staticmethod
    def parse(buf):
        ident, flags, qd, an, ns, ar = struct.unpack_from("!6H", buf, 0)
        m, off = Message(ident, flags), 12
        for _ in range(qd):
            name, off = read_name(buf, off)
            qtype, qcls = struct.unpack_from("!HH", buf, off)
            off += 4
            m.questions.append((name, qtype, bool(qcls & QU_BIT)))
        for section, count in ((m.answers, an), (m.authority, ns), (m.additional, ar)):
            for _ in range(count):
                rec, off = parse_record(buf, off)
                section.append(rec)
        return m

    def encode(self, ttl=None):
        out = bytearray(struct.pack("!6H", self.ident, self.flags, len(self.questions), len(self.answers),
                                    len(self.authority), len(self.additional)))
        for name, qtype, qu in self.questions:
            out += enc_name(name) + struct.pack("!HH", qtype, CLASS_IN | (QU_BIT if qu else 0))
        for rec in self.answers + self.authority + self.additional:
            out += rec.encode(ttl)
        return bytes(out)


# ---------------------------------------------------------------------------------------------
# Interfaces and the socket

SIOCGIFFLAGS, SIOCGIFADDR = 0x8913, 0x8915
IFF_UP, IFF_LOOPBACK, IFF_MULTICAST = 0x1, 0x8, 0x1000


def if_ipv4(name):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16s16x", name.encode()[:15])
        flags = struct.unpack_from("H", fcntl.ioctl(s, SIOCGIFFLAGS, req), 16)[0]
        try:
            addr = socket.inet_ntoa(fcntl.ioctl(s, SIOCGIFADDR, req)[20:24])
        except OSError:
            addr = None
        return flags, addr
    finally:
        s.close()


def interfaces(wanted):
    """[(ifindex, name, ipv4)] for the interfaces to use."""
    out = []
    for index, name in socket.if_nameindex():
        if wanted and name not in wanted:
            continue
        try:
            flags, addr = if_ipv4(name)
        except OSError:
            continue
        if not addr or not flags & IFF_UP:
            continue
        if not wanted and (flags & IFF_LOOPBACK or not flags & IFF_MULTICAST):
            continue
        out.append((index, name, addr))
    if wanted and len(out) != len(set(wanted)):
        missing = set(wanted) - {n for _, n, _ in out}
        sys.exit(f"mdns_probe: interface(s) {', '.join(sorted(missing))} missing, down or without IPv4")
    if not out:
        sys.exit("mdns_probe: no usable interface (up, multicast, IPv4); name one with -i")
    return out


class Transport:
    def __init__(self, ifaces):
        self.ifaces = ifaces
        self.by_index = {i: (n, a) for i, n, a in ifaces}
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:  # Accepted only where every socket on the port has it and the same owner.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        except OSError:
            pass
        s.bind(("0.0.0.0", MDNS_PORT))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        for index, name, _ in ifaces:
            mreqn = struct.pack("4s4si", socket.inet_aton(MDNS_ADDR), socket.inet_aton("0.0.0.0"), index)
            try:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
            except OSError as e:
                print(f"mdns_probe: cannot join {MDNS_ADDR} on {name}: {e}", file=sys.stderr)
        self.sock = s

    def send(self, data, index=None, dest=(MDNS_ADDR, MDNS_PORT)):
        targets = [index] if index is not None else list(self.by_index)
        for i in targets:
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                                 struct.pack("4s4si", b"\0" * 4, b"\0" * 4, i))
            try:
                self.sock.sendto(data, dest)
            except OSError as e:
                print(f"mdns_probe: send on {self.by_index[i][0]}: {e}", file=sys.stderr)

    def recv(self, timeout):
        """(Message, (src_ip, src_port), ifindex) or None on timeout; undecodable packets skipped."""
        end = time.monotonic() + max(0.0, timeout)
        while True:
            left = end - time.monotonic()
            r, _, _ = select.select([self.sock], [], [], max(0.0, left))
            if not r:
                return None
            data, anc, _, src = self.sock.recvmsg(9000, socket.CMSG_SPACE(12))
            index = None
            for level, ctype, cdata in anc:
                if level == socket.IPPROTO_IP and ctype == IP_PKTINFO:
                    index = struct.unpack_from("i", cdata)[0]
            if index is not None and index not in self.by_index:
                continue
            try:
                return Message.parse(data), src, index
            except (ValueError, struct.error, IndexError):
                continue


# ---------------------------------------------------------------------------------------------
# Output


class Out:
    def __init__(self, as_json):
        self.as_json = as_json

    def emit(self, event, **fields):
        if self.as_json:
            print(json.dumps({"event": event, "time": round(time.time(), 3), **fields}), flush=True)
            return
        sign = {"add": "+", "update": "=", "remove": "-"}.get(event, event)
        parts = [sign, json.dumps(fields.pop("name")), fields.pop("type")]
        for k, v in fields.items():
            if isinstance(v, list):
                v = ",".join(v)
            elif isinstance(v, dict):
                v = ",".join(f"{a}={b}" if b is not None else a for a, b in v.items())
            parts.append(f"{k}={v}")
        print(" ".join(parts), flush=True)


# ---------------------------------------------------------------------------------------------
# Browser


class Instance:
    def __init__(self, name):
        self.name = name
        self.ptr_expiry = 0.0
        self.last_heard = 0.0
        self.srv = None  # (port, target)
        self.srv_ttl = 0
        self.txt = None
        self.ifindex = None
        self.src = None
        self.reported = None  # the tuple last printed


class Browser:
    def __init__(self, transport, stype, out, interval, lost_after):
        self.t, self.stype, self.out = transport, stype, out
        self.interval, self.lost_after = interval, lost_after
        self.instances = {}  # key(name) -> Instance
        self.addrs = {}  # key(host) -> {ip: expiry}

    def query(self, questions):
        self.t.send(Message(questions=[(n, q, False) for n, q in questions]).encode())

    def round(self):
        qs = [(self.stype, T_PTR)]
        for inst in self.instances.values():
            if inst.srv is None or inst.txt is None:
                qs += [(inst.name, T_SRV), (inst.name, T_TXT)]
            elif not self.live_addrs(inst.srv[1]):
                qs.append((inst.srv[1], T_A))
        self.query(qs)

    def live_addrs(self, host):
        now = time.monotonic()
        return sorted(a for a, exp in self.addrs.get(key(host), {}).items() if exp > now)

    def handle(self, msg, src, ifindex):
        if not msg.is_response or src[1] != MDNS_PORT:
            return
        now = time.monotonic()
        touched = set()
        for rec in msg.records():
            k = key(rec.name)
            if rec.rtype == T_PTR and key(rec.name) == key(self.stype):
                ik = key(rec.data)
                inst = self.instances.get(ik)
                if rec.ttl == 0:
                    if inst:
                        self.remove(ik, "goodbye")
                    continue
                if inst is None:
                    inst = self.instances[ik] = Instance(rec.data)
                inst.ptr_expiry = now + rec.ttl
                inst.last_heard = now
                inst.ifindex, inst.src = ifindex, src[0]
                touched.add(ik)
            elif rec.rtype == T_SRV and k in self.instances:
                if rec.ttl == 0:
                    self.remove(k, "goodbye")
                    continue
                inst = self.instances[k]
                inst.srv, inst.srv_ttl, inst.last_heard = (rec.data[2], rec.data[3]), rec.ttl, now
                touched.add(k)
            elif rec.rtype == T_TXT and k in self.instances:
                self.instances[k].txt = rec.data
                touched.add(k)
            elif rec.rtype == T_A:
                table = self.addrs.setdefault(k, {})
                if rec.flush:
                    for a in list(table):
                        if a != rec.data:
                            table[a] = min(table[a], now + 1)  # RFC 6762 10.2: flush after 1 s
                table[rec.data] = now + rec.ttl if rec.ttl else now + 1
                touched |= {ik for ik, i in self.instances.items() if i.srv and key(i.srv[1]) == k}
        for ik in touched:
            if ik in self.instances:
                self.report(self.instances[ik])

    def fields(self, inst):
        port, target = inst.srv
        txt = {}
        for s in inst.txt or []:
            a, eq, b = s.decode("utf-8", "replace").partition("=")
            txt[a] = b if eq else None
        iface = self.t.by_index.get(inst.ifindex, ("?",))[0]
        return dict(name=inst.name[0].decode("utf-8", "replace"), type=show(self.stype), host=show(target),
                    port=port, addr=self.live_addrs(target), txt=txt, ttl=inst.srv_ttl, **{"if": iface},
                    **{"from": inst.src})

    def report(self, inst):
        if inst.srv is None or inst.txt is None or not self.live_addrs(inst.srv[1]):
            return
        f = self.fields(inst)
        state = (f["host"], f["port"], tuple(f["addr"]), tuple(sorted(f["txt"].items(), key=str)))
        if state != inst.reported:
            self.out.emit("add" if inst.reported is None else "update", **f)
            inst.reported = state

    def remove(self, ik, reason):
        inst = self.instances.pop(ik, None)
        if inst and inst.reported is not None:
            self.out.emit("remove", name=inst.name[0].decode("utf-8", "replace"), type=show(self.stype),
                          reason=reason)

    def expire(self):
        now = time.monotonic()
        for ik, inst in list(self.instances.items()):
            if inst.ptr_expiry and now > inst.ptr_expiry:
                self.remove(ik, "expired")
            elif self.lost_after and now - inst.last_heard > self.lost_after * self.interval + 0.5:
                self.remove(ik, "no-answer")

    def run_once(self, timeout, first):
        end, nxt, step = time.monotonic() + timeout, 0.0, 0.25
        while time.monotonic() < end:
            if time.monotonic() >= nxt:
                self.round()
                nxt, step = time.monotonic() + step, min(step * 2, 1.0)
            got = self.t.recv(min(nxt, end) - time.monotonic())
            if got:
                self.handle(*got)
                if first and any(i.reported for i in self.instances.values()):
                    return True
        return any(i.reported for i in self.instances.values())

    def run_forever(self):
        nxt = 0.0
        while True:
            now = time.monotonic()
            if now >= nxt:
                self.expire()
                self.round()
                nxt = now + self.interval
            got = self.t.recv(min(nxt - time.monotonic(), 0.25))
            if got:
                self.handle(*got)
            self.expire()


# ---------------------------------------------------------------------------------------------
# Responder (test publisher)


class Responder:
    def __init__(self, transport, instance, stype, port, txt, host, ttl, host_ttl):
        self.t, self.stype, self.ttl = transport, stype, ttl
        self.iname = (instance.encode(),) + stype
        self.host = labels(host) + (b"local",) if not host.endswith(".local") else labels(host)
        self.port, self.txt, self.host_ttl = port, [s.encode() for s in txt], host_ttl

    def records(self, ifindex):
        addr = self.t.by_index[ifindex][1]
        return {
            "ptr": Record(self.stype, T_PTR, self.ttl, self.iname),
            "srv": Record(self.iname, T_SRV, self.ttl, (0, 0, self.port, self.host), flush=True),
            "txt": Record(self.iname, T_TXT, self.ttl, self.txt, flush=True),
            "a": Record(self.host, T_A, self.host_ttl, addr, flush=True),
            "meta": Record(SERVICES_META, T_PTR, self.ttl, self.stype),
        }

    def announce(self, ttl=None):
        for index in self.t.by_index:
            r = self.records(index)
            msg = Message(flags=0x8400, answers=[r["ptr"], r["srv"], r["txt"], r["a"]])
            self.t.send(msg.encode(ttl), index)

    def answer(self, msg, src, ifindex):
        if msg.is_response or ifindex is None:
            return
        r = self.records(ifindex)
        known = {(key(a.name), a.rtype, key(a.data) if a.rtype == T_PTR else None) for a in msg.answers
                 if a.ttl > self.ttl // 2}
        answers, extra = [], []
        for qname, qtype, _ in msg.questions:
            q = key(qname)
            if q == key(self.stype) and qtype in (T_PTR, T_ANY):
                if (q, T_PTR, key(self.iname)) not in known:
                    answers.append(r["ptr"])
                    extra += [r["srv"], r["txt"], r["a"]]
            elif q == key(SERVICES_META) and qtype in (T_PTR, T_ANY):
                answers.append(r["meta"])
            elif q == key(self.iname):
                if qtype in (T_SRV, T_ANY):
                    answers.append(r["srv"])
                    extra.append(r["a"])
                if qtype in (T_TXT, T_ANY):
                    answers.append(r["txt"])
            elif q == key(self.host) and qtype in (T_A, T_ANY):
                answers.append(r["a"])
        if not answers:
            return
        seen = {id(a) for a in answers}
        extra = [e for e in extra if id(e) not in seen and not seen.add(id(e))]
        if src[1] != MDNS_PORT:
            # Legacy unicast query (RFC 6762 6.7): reply to the sender, echo id and question, TTL <= 10,
            # no cache-flush bits.
            for rec in answers + extra:
                rec.flush = False
            reply = Message(msg.ident, 0x8400, [(n, t, False) for n, t, _ in msg.questions], answers, (), extra)
            self.t.sock.sendto(reply.encode(min(self.ttl, 10)), src)
            return
        # Shared records (PTR) are answered after a random 20-120 ms (RFC 6762 6).
        time.sleep(random.uniform(0.02, 0.12))
        self.t.send(Message(flags=0x8400, answers=answers, additional=extra).encode(), ifindex)

    def run(self, out):
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        self.announce()
        out.emit("published", name=self.iname[0].decode(), type=show(self.stype), host=show(self.host),
                 port=self.port, ttl=self.ttl, addr=[a for _, _, a in self.t.ifaces])
        second = time.monotonic() + 1.0
        while not stop:
            if second and time.monotonic() >= second:
                self.announce()
                second = None
            try:
                got = self.t.recv(0.2)
            except InterruptedError:
                continue
            if got:
                self.answer(*got)
        self.announce(ttl=0)  # goodbye
        out.emit("goodbye", name=self.iname[0].decode(), type=show(self.stype))


# ---------------------------------------------------------------------------------------------


def dump(transport, out):
    while True:
        got = transport.recv(1.0)
        if not got:
            continue
        msg, src, index = got
        iface = transport.by_index.get(index, ("?",))[0]
        qs = [f"{show(n)} {TYPE_NAMES.get(t, t)}{' QU' if qu else ''}" for n, t, qu in msg.questions]
        rs = [r.describe() for r in msg.records()]
        if out.as_json:
            print(json.dumps({"time": round(time.time(), 3), "from": f"{src[0]}:{src[1]}", "if": iface,
                              "response": msg.is_response, "questions": qs, "records": rs}), flush=True)
        else:
            kind = "response" if msg.is_response else "query"
            print(f"{time.time():.3f} {kind} from {src[0]}:{src[1]} on {iface}", flush=True)
            for q in qs:
                print(f"  ? {q}", flush=True)
            for r in rs:
                print(f"  ! {r}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description="mDNS/DNS-SD probe (IPv4, stdlib only)")
    p.add_argument("-i", "--interface", action="append", default=[], help="interface name (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("browse", help="browse once and print what was found")
    b.add_argument("type")
    b.add_argument("--timeout", type=float, default=3.0)
    b.add_argument("--first", action="store_true", help="exit as soon as one instance is resolved")
    w = sub.add_parser("watch", help="report instances coming and going until interrupted")
    w.add_argument("type")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between queries (>= 1)")
    w.add_argument("--lost-after", type=int, default=0,
                   help="report an instance gone after it missed this many query rounds (0: only TTL/goodbye)")
    pub = sub.add_parser("publish", help="publish one service until SIGINT/SIGTERM (then goodbye)")
    pub.add_argument("name")
    pub.add_argument("type")
    pub.add_argument("port", type=int)
    pub.add_argument("txt", nargs="*")
    pub.add_argument("--host", default=socket.gethostname().split(".")[0])
    pub.add_argument("--ttl", type=int, default=4500, help="PTR/SRV/TXT TTL (Avahi uses 4500 for PTR, 120 SRV)")
    pub.add_argument("--host-ttl", type=int, default=120)
    sub.add_parser("dump", help="print every mDNS packet")
    a = p.parse_args(argv)

    out = Out(a.json)
    t = Transport(interfaces(a.interface))
    try:
        if a.cmd == "browse":
            found = Browser(t, service_type(a.type), out, 1.0, 0).run_once(a.timeout, a.first)
            return 0 if found else 1
        if a.cmd == "watch":
            Browser(t, service_type(a.type), out, max(1.0, a.interval), a.lost_after).run_forever()
        elif a.cmd == "publish":
            Responder(t, a.name, service_type(a.type), a.port, a.txt, a.host, a.ttl, a.host_ttl).run(out)
        elif a.cmd == "dump":
            dump(t, out)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
