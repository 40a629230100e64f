import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PipelineCore
import Synchronization

/// A service instance found by ``MulticastDNS``, resolved to addresses.
public struct DiscoveredPeer: Sendable, Hashable {
    /// The instance label (`intercom on kitchen`), without the service type.
    public var instance: String
    /// The SRV target host (`voicepipe-1a2b3c4d.local`).
    public var host: String
    /// The host's IPv4 addresses, dotted quads, sorted.
    public var addresses: [String]
    /// The SRV port.
    public var port: Int
    /// The TXT `key=value` pairs; keys lowered.
    public var txt: [String: String]

    public init(instance: String, host: String, addresses: [String], port: Int, txt: [String: String]) {
        self.instance = instance
        self.host = host
        self.addresses = addresses
        self.port = port
        self.txt = txt
    }
}

/// A self-contained multicast DNS responder and browser (RFC 6762, DNS-SD per RFC 6763) for one
/// service type, over IPv4.
///
/// It publishes one instance — PTR, SRV and TXT records, plus an A record for a host label of its own
/// (`voicepipe-<random>.local`; the machine's `hostname.local` is left to avahi) — and browses the same
/// type, reporting peers as they are resolved and lost:
///
/// - One UDP socket on `0.0.0.0:5353` with `SO_REUSEADDR` and `SO_REUSEPORT`, so it runs beside an
///   avahi-daemon. It joins 224.0.0.251 on every up, multicast-capable, non-loopback interface with an
///   IPv4 address, by interface index (no route needed), and sends on each of them in turn
///   (`IP_MULTICAST_IF`). Interfaces are rescanned every few seconds.
/// - Announces twice, 1 s apart; answers queries for the type, the instance, the host label and
///   `_services._dns-sd._udp.local` with multicast responses (shared PTR answers after 20–120 ms,
///   honouring known answers); answers a legacy unicast query (source port ≠ 5353) by unicast. It never
///   sets the QU bit: a unicast reply to port 5353 reaches only one of the sockets sharing the port.
/// - Sends goodbyes (TTL 0) on ``stop()``.
/// - Queries every `queryInterval` without known answers, so every live peer answers every round; a
///   peer is lost on a goodbye, when its PTR expires, or after `lostAfter` rounds without an answer.
/// - Skips its own instance, recognised by the TXT `id` (every instance carries one).
/// - If another host announces a different SRV for our instance name and wins the tie-break of
///   RFC 6762 §8.2 (the lexicographically later data), the instance is renamed `name (2)`, `name (3)`…
///   and announced again; ``instance`` tells the current name.
///
/// It does not probe before announcing and does not publish IPv6 (AAAA) records.
///
/// ```swift
/// let mdns = try MulticastDNS(serviceType: "_voicepipe-intercom._udp", instance: "intercom on kitchen",
///                             port: 5006, txt: ["ctl": "40000"])
/// for await event in try mdns.start() {
///     if case .found(let peer) = event { print(peer.instance, peer.addresses) }
/// }
/// ```
public final class MulticastDNS: Sendable {
    /// What the browser reports.
    public enum Event: Sendable {
        /// An instance was resolved (SRV, TXT and at least one address), or what it resolves to changed.
        case found(DiscoveredPeer)
        /// A reported instance went away: goodbye, PTR expiry or `lostAfter` unanswered query rounds.
        case lost(instance: String)
        /// A problem that does not stop the responder (a send failing on one interface, no usable
        /// interface); reported once until it changes.
        case error(String)
    }

    /// A failure to set up the socket (for example port 5353 cannot be bound), or a bad argument.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var message: String
        init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// The browsed and published type, ending in `local`.
    public let serviceType: DNSMessage.Name
    /// The host name of our A records: `voicepipe-<8 hex digits>.local`.
    public let hostName: DNSMessage.Name
    /// The SRV port.
    public let port: Int
    /// The TXT pairs published; always holds `id`.
    public let txt: [String: String]
    /// This instance's id (TXT `id`): instances carrying it are our own and not reported.
    public let peerID: String
    /// TTL of our records, seconds.
    public let ttl: UInt32
    /// Time between browse queries.
    public let queryInterval: Duration
    /// Unanswered query rounds before a peer is lost; 0 leaves only goodbyes and TTL expiry.
    public let lostAfter: Int

    private let control: MDNSControl

    /// Creates a responder and browser; nothing is sent before ``start()``.
    ///
    /// - Parameters:
    ///   - serviceType: `_name._udp` or `_name._tcp`, with or without `.local`.
    ///   - instance: the instance label, 1 to 63 bytes of UTF-8 (dots allowed).
    ///   - port: the SRV port.
    ///   - txt: TXT pairs; an `id` is added (random 64-bit hex) when missing.
    ///   - queryInterval: time between browse queries.
    ///   - lostAfter: unanswered query rounds before a peer is lost (0: only goodbyes and expiry).
    ///   - ttl: TTL of our records, seconds. Short, so that other caches forget a crashed peer soon.
    public init(serviceType: String, instance: String, port: Int, txt: [String: String],
                queryInterval: Duration = .seconds(1), lostAfter: Int = 3, ttl: UInt32 = 10) throws {
        var type = DNSMessage.Name(serviceType)
        if type.labels.last.map(DNSMessage.Name.lowerASCII) != "local" { type.labels.append("local") }
        guard type.labels.count == 3, type.labels.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 63 }) else {
            throw Failure("service type \(serviceType) is not of the form _name._udp")
        }
        guard !instance.isEmpty, instance.utf8.count <= 63 else {
            throw Failure("instance name must be 1 to 63 bytes of UTF-8")
        }
        guard (0...65535).contains(port) else { throw Failure("port \(port) out of range") }
        guard queryInterval > .zero else { throw Failure("queryInterval must be positive") }
        var pairs: [String: String] = [:]
        for (k, v) in txt { pairs[DNSMessage.Name.lowerASCII(k)] = v }
        let id = pairs["id"].flatMap { $0.isEmpty ? nil : $0 } ?? String(format: "%016llx", UInt64.random(in: .min ... .max))
        pairs["id"] = id
        for s in DNSMessage.txtStrings(pairs) where s.count > 255 {
            throw Failure("TXT entry longer than 255 bytes: \(String(decoding: s.prefix(40), as: UTF8.self))…")
        }
        self.serviceType = type
        self.hostName = DNSMessage.Name(labels: [String(format: "voicepipe-%08x", UInt32.random(in: .min ... .max)), "local"])
        self.port = port
        self.txt = pairs
        self.peerID = id
        self.ttl = ttl
        self.queryInterval = queryInterval
        self.lostAfter = max(0, lostAfter)
        self.control = MDNSControl(instance: instance)
    }

    /// The instance label currently published (changes after a name conflict).
    public var instance: String { control.state.withLock { $0.instance } }

    /// Binds the socket, joins the group on every usable interface and starts announcing and browsing
    /// on a thread of its own. The stream ends after ``stop()``.
    /// - Throws: ``Failure`` when the socket cannot be set up (port 5353 taken without address reuse,
    ///   no permission), or when already started.
    public func start() throws -> AsyncStream<Event> {
        let first = control.state.withLock { c -> Bool in
            defer { c.started = true }
            return !c.started && !c.stopped
        }
        guard first else { throw Failure("already started") }
        let fd = try MDNSSocket.open()
        var pipeFDs: [Int32] = [-1, -1]
        guard pipe(&pipeFDs) == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw Failure("pipe(): \(why)")
        }
        for end in pipeFDs {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        let wakeRead = pipeFDs[0]
        control.state.withLock { $0.wakeFD = pipeFDs[1] }
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(1024))
        let setup = MDNSEngine.Setup(
            fd: fd, wakeFD: wakeRead, serviceType: serviceType, hostName: hostName, port: UInt16(port),
            txt: DNSMessage.txtStrings(txt), peerID: peerID, ttl: ttl, queryInterval: queryInterval, lostAfter: lostAfter)
        // The thread holds the control block, not `self`: dropping the last reference stops it.
        let control = self.control
        let instance = self.instance
        let thread = Thread {
            let engine = MDNSEngine(setup: setup, instance: instance, emit: { continuation.yield($0) },
                                    rename: { name in control.state.withLock { $0.instance = name } })
            engine.run { control.state.withLock { $0.stopped } }
            Glibc.close(wakeRead)
            continuation.finish()
            control.finished.store(true, ordering: .releasing)
        }
        thread.name = "mdns"
        thread.start()
        return stream
    }

    /// Sends goodbyes for our records, closes the socket and ends the event stream. Waits (up to
    /// about 2 s) for the goodbyes to go out, so it may be called just before the process exits.
    public func stop() {
        let wake = control.state.withLock { c -> Int32 in
            defer { c.stopped = true; c.wakeFD = -1 }
            return c.started && !c.stopped ? c.wakeFD : -1
        }
        guard wake >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(wake, &byte, 1)
        let deadline = ContinuousClock.now + .seconds(2)
        while !control.finished.load(ordering: .acquiring) && ContinuousClock.now < deadline { usleep(2000) }
        Glibc.close(wake)
    }

    deinit { stop() }
}

/// What ``MulticastDNS`` shares with its thread.
private final class MDNSControl: Sendable {
    struct State {
        var started = false
        var stopped = false
        var wakeFD: Int32 = -1
        var instance: String
    }
    let state: LockedValue<State>
    let finished = Atomic<Bool>(false)
    init(instance: String) { state = LockedValue(State(instance: instance)) }
}

// MARK: - Socket

/// The IPv4 multicast DNS socket calls.
private enum MDNSSocket {
    static let port: UInt16 = 5353
    static let group: [UInt8] = [224, 0, 0, 251]

    static func open() throws(MulticastDNS.Failure) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw MulticastDNS.Failure("socket(): \(String(cString: strerror(errno)))") }
        func option(_ level: Int32, _ name: Int32, _ value: Int32) -> Bool {
            var v = value
            return setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size)) == 0
        }
        _ = option(SOL_SOCKET, SO_REUSEADDR, 1)
        // Beside avahi (another user) SO_REUSEPORT alone is refused, but with SO_REUSEADDR set too the
        // bind succeeds either way; it only matters between sockets of one user.
        _ = option(SOL_SOCKET, SO_REUSEPORT, 1)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr = in_addr(s_addr: 0)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw MulticastDNS.Failure("cannot bind UDP 0.0.0.0:5353: \(why)")
        }
        let ip = Int32(IPPROTO_IP)
        guard option(ip, IP_MULTICAST_TTL, 255), option(ip, IP_MULTICAST_LOOP, 1), option(ip, IP_PKTINFO, 1) else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw MulticastDNS.Failure("setsockopt(IP_MULTICAST_*): \(why)")
        }
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        return fd
    }

    static func inAddr(_ bytes: [UInt8]) -> in_addr {
        var a = in_addr()
        withUnsafeMutableBytes(of: &a.s_addr) { dst in
            for i in 0..<min(4, bytes.count) { dst[i] = bytes[i] }
        }
        return a
    }

    static func bytes(_ a: in_addr) -> [UInt8] {
        withUnsafeBytes(of: a.s_addr) { Array($0) }
    }

    /// Joins the group on interface `index`; returns nil or the error text.
    static func join(fd: Int32, index: Int32) -> String? {
        var m = ip_mreqn()
        m.imr_multiaddr = inAddr(group)
        m.imr_ifindex = index
        if setsockopt(fd, Int32(IPPROTO_IP), IP_ADD_MEMBERSHIP, &m, socklen_t(MemoryLayout<ip_mreqn>.size)) == 0 || errno == EADDRINUSE {
            return nil
        }
        return String(cString: strerror(errno))
    }

    /// Sends to 224.0.0.251:5353 out of interface `index`; returns nil or the error text.
    static func sendMulticast(fd: Int32, _ bytes: [UInt8], index: Int32) -> String? {
        var m = ip_mreqn()
        m.imr_ifindex = index
        guard setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &m, socklen_t(MemoryLayout<ip_mreqn>.size)) == 0 else {
            return "IP_MULTICAST_IF: \(String(cString: strerror(errno)))"
        }
        return send(fd: fd, bytes, to: group, port: port)
    }

    /// Sends a datagram to `address:port`; returns nil or the error text.
    static func send(fd: Int32, _ bytes: [UInt8], to address: [UInt8], port: UInt16) -> String? {
        var to = sockaddr_in()
        to.sin_family = sa_family_t(AF_INET)
        to.sin_port = port.bigEndian
        to.sin_addr = inAddr(address)
        let n = bytes.withUnsafeBytes { buf in
            withUnsafePointer(to: &to) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        return n < 0 ? String(cString: strerror(errno)) : nil
    }

    /// One received datagram: payload, source address and port, and the interface it came in on.
    struct Datagram {
        var bytes: [UInt8]
        var source: [UInt8]
        var sourcePort: UInt16
        var interface: Int32?
    }

    /// Reads one datagram without blocking; nil when none is waiting (or on a read error).
    static func receive(fd: Int32, buffer: inout [UInt8]) -> Datagram? {
        var control = [UInt8](repeating: 0, count: 128)
        var from = sockaddr_in()
        var header = msghdr()
        let n: Int = buffer.withUnsafeMutableBytes { buf in
            control.withUnsafeMutableBytes { ctl in
                withUnsafeMutablePointer(to: &from) { fromPointer in
                    var iov = iovec(iov_base: buf.baseAddress, iov_len: buf.count)
                    return withUnsafeMutablePointer(to: &iov) { iovPointer in
                        header.msg_name = UnsafeMutableRawPointer(fromPointer)
                        header.msg_namelen = socklen_t(MemoryLayout<sockaddr_in>.size)
                        header.msg_iov = iovPointer
                        header.msg_iovlen = 1
                        header.msg_control = ctl.baseAddress
                        header.msg_controllen = ctl.count
                        return recvmsg(fd, &header, Int32(MSG_DONTWAIT))
                    }
                }
            }
        }
        guard n >= 0 else { return nil }
        // A datagram larger than the buffer is not a message we could decode.
        if header.msg_flags & Int32(MSG_TRUNC) != 0 {
            return Datagram(bytes: [], source: bytes(from.sin_addr), sourcePort: UInt16(bigEndian: from.sin_port), interface: nil)
        }
        // Control messages: struct cmsghdr { size_t len; int level; int type; } then data, each
        // aligned to size_t.
        var interface: Int32?
        let controlLength = min(Int(header.msg_controllen), control.count)
        let align = MemoryLayout<Int>.size
        let headerSize = (MemoryLayout<cmsghdr>.size + align - 1) / align * align
        var offset = 0
        control.withUnsafeBytes { raw in
            while offset + headerSize <= controlLength {
                let length = raw.loadUnaligned(fromByteOffset: offset, as: Int.self)
                let level = raw.loadUnaligned(fromByteOffset: offset + align, as: Int32.self)
                let type = raw.loadUnaligned(fromByteOffset: offset + align + 4, as: Int32.self)
                guard length >= headerSize, offset + length <= controlLength else { break }
                if level == Int32(IPPROTO_IP), type == IP_PKTINFO, length - headerSize >= MemoryLayout<in_pktinfo>.size {
                    interface = raw.loadUnaligned(fromByteOffset: offset + headerSize, as: Int32.self)   // ipi_ifindex
                }
                offset += (length + align - 1) / align * align
            }
        }
        return Datagram(bytes: Array(buffer[0..<n]), source: bytes(from.sin_addr),
                        sourcePort: UInt16(bigEndian: from.sin_port), interface: interface)
    }

    /// Up, multicast-capable, non-loopback interfaces with an IPv4 address: index → (name, first address).
    static func interfaces() -> [Int32: (name: String, address: [UInt8])] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [:] }
        defer { freeifaddrs(list) }
        var out: [Int32: (name: String, address: [UInt8])] = [:]
        var cursor = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            let flags = Int(entry.pointee.ifa_flags)
            guard let sa = entry.pointee.ifa_addr, Int32(sa.pointee.sa_family) == AF_INET,
                  flags & IFF_UP != 0, flags & IFF_MULTICAST != 0, flags & IFF_LOOPBACK == 0,
                  let cName = entry.pointee.ifa_name else { continue }
            let index = Int32(bitPattern: if_nametoindex(cName))
            guard index > 0, out[index] == nil else { continue }
            let address = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { bytes($0.pointee.sin_addr) }
            out[index] = (String(cString: cName), address)
        }
        return out
    }
}

// MARK: - Engine

/// The responder and browser state, confined to the thread ``MulticastDNS/start()`` creates.
private final class MDNSEngine {
    struct Setup: Sendable {
        var fd: Int32
        var wakeFD: Int32
        var serviceType: DNSMessage.Name
        var hostName: DNSMessage.Name
        var port: UInt16
        var txt: [[UInt8]]
        var peerID: String
        var ttl: UInt32
        var queryInterval: Duration
        var lostAfter: Int
    }

    /// A browsed instance.
    struct Browsed {
        var label: String
        var ptrExpiry: ContinuousClock.Instant?
        var srv: (port: UInt16, target: DNSMessage.Name)?
        var txt: [[UInt8]]?
        var heardSinceQuery = true
        var missedRounds = 0
        var reported: DiscoveredPeer?
        var isOwn = false
    }

    typealias Instant = ContinuousClock.Instant

    let setup: Setup
    let emit: (MulticastDNS.Event) -> Void
    let rename: (String) -> Void
    let servicesMeta = DNSMessage.Name(labels: ["_services", "_dns-sd", "_udp", "local"])
    let baseInstance: String
    var instanceLabel: String
    var renames = 0
    var interfaces: [Int32: (name: String, address: [UInt8])] = [:]
    var instances: [DNSMessage.Name: Browsed] = [:]
    /// Host name → address → expiry.
    var hosts: [DNSMessage.Name: [[UInt8]: Instant]] = [:]
    /// Responses waiting for their random delay: (due, interface, message).
    var pending: [(due: Instant, interface: Int32, message: DNSMessage)] = []
    /// Announcements still to send: (due, interface or nil for all).
    var announcements: [(due: Instant, interface: Int32?)] = []
    var nextQuery: Instant
    var nextScan: Instant
    /// The last query we sent, per interface, to recognise it when multicast loop brings it back.
    var lastQuery: [Int32: (bytes: [UInt8], at: Instant)] = [:]
    var lastError: String?
    var buffer = [UInt8](repeating: 0, count: DNSMessage.maxMessageSize + 1)

    init(setup: Setup, instance: String, emit: @escaping (MulticastDNS.Event) -> Void, rename: @escaping (String) -> Void) {
        self.setup = setup
        self.emit = emit
        self.rename = rename
        self.baseInstance = instance
        self.instanceLabel = instance
        let now = ContinuousClock.now
        nextQuery = now
        nextScan = now
    }

    var instanceName: DNSMessage.Name { setup.serviceType.prepending(instanceLabel) }

    /// Loops until `shouldStop` says so, then sends goodbyes and closes the socket.
    func run(shouldStop: () -> Bool) {
        let now = ContinuousClock.now
        scanInterfaces(now: now, announce: false)
        nextScan = now + .seconds(5)
        if interfaces.isEmpty { report("no up, multicast-capable IPv4 interface") }
        announcements = [(now, nil), (now + .seconds(1), nil)]
        while !shouldStop() {
            let now = ContinuousClock.now
            runTimers(now: now)
            // Rounded up, so that a timer less than 1 ms away does not spin.
            let wait = max(0, min(250, wholeMilliseconds(nextDue() - ContinuousClock.now) + 1))
            var fds = [pollfd(fd: setup.fd, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: setup.wakeFD, events: Int16(POLLIN), revents: 0)]
            let r = poll(&fds, 2, Int32(wait))
            if r < 0 && errno != EINTR {
                report("poll(): \(String(cString: strerror(errno)))")
                usleep(100_000)
                continue
            }
            if fds[1].revents != 0 { break }
            if fds[0].revents & Int16(POLLIN) != 0 {
                while let datagram = MDNSSocket.receive(fd: setup.fd, buffer: &buffer) {
                    handle(datagram, now: ContinuousClock.now)
                }
            }
        }
        announce(ttl: 0, interface: nil)
        Glibc.close(setup.fd)
    }

    // MARK: Timers

    func nextDue() -> Instant {
        var due = min(nextQuery, nextScan)
        for p in pending { due = min(due, p.due) }
        for a in announcements { due = min(due, a.due) }
        return due
    }

    func runTimers(now: Instant) {
        if now >= nextScan {
            scanInterfaces(now: now, announce: true)
            nextScan = now + .seconds(5)
        }
        if !announcements.isEmpty {
            let due = announcements.filter { $0.due <= now }
            announcements.removeAll { $0.due <= now }
            for a in due { announce(ttl: setup.ttl, interface: a.interface) }
        }
        if !pending.isEmpty {
            let due = pending.filter { $0.due <= now }
            pending.removeAll { $0.due <= now }
            for p in due { sendMulticast(p.message, interface: p.interface) }
        }
        if now >= nextQuery {
            browseRound(now: now)
            nextQuery = now + setup.queryInterval
        }
    }

    func scanInterfaces(now: Instant, announce: Bool) {
        let found = MDNSSocket.interfaces()
        for (index, entry) in found {
            let old = interfaces[index]
            if old == nil, let error = MDNSSocket.join(fd: setup.fd, index: index) {
                report("cannot join 224.0.0.251 on \(entry.name): \(error)")
                continue
            }
            interfaces[index] = entry
            if announce && (old == nil || old?.address != entry.address) {
                announcements += [(now, index), (now + .seconds(1), index)]
            }
        }
        for index in interfaces.keys where found[index] == nil { interfaces[index] = nil }
    }

    // MARK: Responder

    func records(interface: Int32, ttl: UInt32) -> (ptr: DNSMessage.Record, srv: DNSMessage.Record, txt: DNSMessage.Record,
                                                     a: DNSMessage.Record?, meta: DNSMessage.Record) {
        let name = instanceName
        let address = interfaces[interface]?.address
        return (
            DNSMessage.Record(name: setup.serviceType, ttl: ttl, data: .ptr(name)),
            DNSMessage.Record(name: name, ttl: ttl, data: .srv(priority: 0, weight: 0, port: setup.port, target: setup.hostName), cacheFlush: true),
            DNSMessage.Record(name: name, ttl: ttl, data: .txt(setup.txt), cacheFlush: true),
            address.map { DNSMessage.Record(name: setup.hostName, ttl: ttl, data: .a($0), cacheFlush: true) },
            DNSMessage.Record(name: servicesMeta, ttl: ttl, data: .ptr(setup.serviceType))
        )
    }

    /// Announces our records (a goodbye with TTL 0) on one interface or all.
    func announce(ttl: UInt32, interface: Int32?) {
        for index in interface.map({ [$0] }) ?? Array(interfaces.keys) where interfaces[index] != nil {
            let r = records(interface: index, ttl: ttl)
            var answers = [r.ptr, r.srv, r.txt]
            if let a = r.a { answers.append(a) }
            sendMulticast(DNSMessage(flags: DNSMessage.responseFlags, answers: answers), interface: index)
        }
    }

    func answer(_ query: DNSMessage, from datagram: MDNSSocket.Datagram, interface: Int32, now: Instant) {
        let r = records(interface: interface, ttl: setup.ttl)
        let name = instanceName
        // Known-answer suppression (RFC 6762 §7.1): the querier already holds our PTR with at least
        // half its TTL left.
        let known = query.answers.contains {
            $0.name == setup.serviceType && $0.data == .ptr(name) && $0.ttl >= setup.ttl / 2
        }
        var answers: [DNSMessage.Record] = [], extra: [DNSMessage.Record] = []
        var shared = false
        for q in query.questions where q.recordClass == DNSMessage.classIN || q.recordClass == 255 {
            let any = q.type == .any
            if q.name == setup.serviceType && (q.type == .ptr || any) {
                if !known {
                    answers.append(r.ptr)
                    extra += [r.srv, r.txt]
                    if let a = r.a { extra.append(a) }
                    shared = true
                }
            } else if q.name == servicesMeta && (q.type == .ptr || any) {
                answers.append(r.meta)
                shared = true
            } else if q.name == name {
                if q.type == .srv || any {
                    answers.append(r.srv)
                    if let a = r.a { extra.append(a) }
                }
                if q.type == .txt || any { answers.append(r.txt) }
            } else if q.name == setup.hostName && (q.type == .a || any), let a = r.a {
                answers.append(a)
            }
        }
        guard !answers.isEmpty else { return }
        var seen = Set(answers)
        extra = extra.filter { seen.insert($0).inserted }
        if datagram.sourcePort != MDNSSocket.port {
            // Legacy unicast query (RFC 6762 §6.7): reply to the sender with its id and questions,
            // no cache-flush bits, TTL at most 10 s.
            func legacy(_ record: DNSMessage.Record) -> DNSMessage.Record {
                var r = record
                r.cacheFlush = false
                r.ttl = min(r.ttl, 10)
                return r
            }
            let questions = query.questions.map { DNSMessage.Question(name: $0.name, type: $0.type, recordClass: $0.recordClass) }
            let reply = DNSMessage(id: query.id, flags: DNSMessage.responseFlags, questions: questions,
                                   answers: answers.map(legacy), additionals: extra.map(legacy))
            if let bytes = try? reply.encode(), let error = MDNSSocket.send(fd: setup.fd, bytes, to: datagram.source, port: datagram.sourcePort) {
                report("unicast reply: \(error)")
            }
            return
        }
        let reply = DNSMessage(flags: DNSMessage.responseFlags, answers: answers, additionals: extra)
        if shared {
            // Shared records are answered after 20–120 ms so that responders do not collide (§6).
            pending.append((now + .milliseconds(Int.random(in: 20...120)), interface, reply))
        } else {
            sendMulticast(reply, interface: interface)
        }
    }

    /// An SRV for our instance name that is not ours: rename unless our data wins the tie-break.
    func checkConflict(_ response: DNSMessage) {
        let name = instanceName
        for record in response.answers where record.name == name && record.ttl > 0 {
            guard case .srv(_, _, let port, let target) = record.data else { continue }
            if target == setup.hostName { continue }
            // RFC 6762 §8.2: compare the record data; the lexicographically later one keeps the name.
            let ours = Array("\(setup.port) \(setup.hostName.canonical.joined(separator: "."))".utf8)
            let theirs = Array("\(port) \(target.canonical.joined(separator: "."))".utf8)
            guard ours.lexicographicallyPrecedes(theirs) else { continue }
            // No goodbye for the old name: the winner holds the same PTR and instance name, and other
            // caches would drop its records with ours. Our stale SRV/TXT are replaced by its
            // cache-flush records or expire with their short TTL.
            renames += 1
            instanceLabel = "\(baseInstance) (\(renames + 1))"
            rename(instanceLabel)
            let now = ContinuousClock.now
            announcements += [(now, nil), (now + .seconds(1), nil)]
            return
        }
    }

    // MARK: Browser

    func browseRound(now: Instant) {
        for (key, var entry) in instances {
            entry.missedRounds = entry.heardSinceQuery ? 0 : entry.missedRounds + 1
            entry.heardSinceQuery = false
            instances[key] = entry
            if let expiry = entry.ptrExpiry, now >= expiry {
                remove(key)
            } else if setup.lostAfter > 0 && entry.missedRounds >= setup.lostAfter {
                remove(key)
            }
        }
        for (host, table) in hosts {
            let live = table.filter { $0.value > now }
            hosts[host] = live.isEmpty ? nil : live
        }
        var questions = [DNSMessage.Question(name: setup.serviceType, type: .ptr)]
        for (key, entry) in instances where !entry.isOwn {
            if entry.srv == nil { questions.append(.init(name: key, type: .srv)) }
            if entry.txt == nil { questions.append(.init(name: key, type: .txt)) }
            if let target = entry.srv?.target, liveAddresses(target, now: now).isEmpty {
                questions.append(.init(name: target, type: .a))
            }
        }
        let query = DNSMessage(questions: questions)
        guard let bytes = try? query.encode() else { return }
        for index in interfaces.keys {
            lastQuery[index] = (bytes, now)
            if let error = MDNSSocket.sendMulticast(fd: setup.fd, bytes, index: index) {
                report("query on \(interfaces[index]?.name ?? "?"): \(error)")
            }
        }
    }

    func liveAddresses(_ host: DNSMessage.Name, now: Instant) -> [String] {
        (hosts[host] ?? [:]).filter { $0.value > now }.keys.compactMap(DNSMessage.ipv4String).sorted()
    }

    func learn(_ response: DNSMessage, now: Instant) {
        let records = response.allRecords.filter { $0.recordClass == DNSMessage.classIN }
        var touched = Set<DNSMessage.Name>()
        // PTRs first: an SRV or TXT is kept only for an instance of our type that a PTR named.
        for record in records where record.name == setup.serviceType {
            guard case .ptr(let target) = record.data, target.labels.count == setup.serviceType.labels.count + 1,
                  DNSMessage.Name(labels: Array(target.labels.dropFirst())) == setup.serviceType else { continue }
            if record.ttl == 0 {
                remove(target)
                continue
            }
            var entry = instances[target] ?? Browsed(label: target.labels[0])
            entry.ptrExpiry = now + .seconds(Int(record.ttl))
            entry.heardSinceQuery = true
            instances[target] = entry
            touched.insert(target)
        }
        for record in records {
            switch record.data {
            case .srv(_, _, let port, let target):
                guard var entry = instances[record.name] else { continue }
                if record.ttl == 0 { remove(record.name); continue }
                entry.srv = (port, target)
                entry.heardSinceQuery = true
                instances[record.name] = entry
                touched.insert(record.name)
            case .txt(let strings):
                guard var entry = instances[record.name] else { continue }
                if record.ttl == 0 { remove(record.name); continue }
                entry.txt = strings
                entry.isOwn = DNSMessage.txtDictionary(strings)["id"] == setup.peerID
                entry.heardSinceQuery = true
                instances[record.name] = entry
                touched.insert(record.name)
            case .a(let address):
                var table = hosts[record.name] ?? [:]
                if record.cacheFlush {
                    // RFC 6762 §10.2: other addresses of this host go after one second.
                    for (other, expiry) in table where other != address { table[other] = min(expiry, now + .seconds(1)) }
                }
                table[address] = now + .seconds(record.ttl == 0 ? 1 : Int(record.ttl))
                hosts[record.name] = table
                for (key, entry) in instances where entry.srv?.target == record.name { touched.insert(key) }
            default:
                continue
            }
        }
        for key in touched { reportIfResolved(key, now: now) }
    }

    func reportIfResolved(_ key: DNSMessage.Name, now: Instant) {
        guard var entry = instances[key], !entry.isOwn, let srv = entry.srv, let txt = entry.txt else { return }
        let addresses = liveAddresses(srv.target, now: now)
        guard !addresses.isEmpty else { return }
        let peer = DiscoveredPeer(instance: entry.label, host: srv.target.description, addresses: addresses,
                                  port: Int(srv.port), txt: DNSMessage.txtDictionary(txt))
        guard peer != entry.reported else { return }
        entry.reported = peer
        instances[key] = entry
        emit(.found(peer))
    }

    func remove(_ key: DNSMessage.Name) {
        guard let entry = instances.removeValue(forKey: key) else { return }
        if entry.reported != nil && !entry.isOwn { emit(.lost(instance: entry.label)) }
    }

    // MARK: Input

    func handle(_ datagram: MDNSSocket.Datagram, now: Instant) {
        guard let interface = datagram.interface, interfaces[interface] != nil,
              let message = try? DNSMessage.decode(datagram.bytes), message.opcode == 0, message.flags & 0x000F == 0 else { return }
        if message.isResponse {
            // RFC 6762 §6: responses not from port 5353 are ignored.
            guard datagram.sourcePort == MDNSSocket.port else { return }
            checkConflict(message)
            learn(message, now: now)
        } else {
            // Our own query, looped back: not worth an answer.
            if let last = lastQuery[interface], last.bytes == datagram.bytes, now - last.at < .milliseconds(100),
               datagram.source == interfaces[interface]?.address {
                return
            }
            answer(message, from: datagram, interface: interface, now: now)
        }
    }

    // MARK: Output

    func sendMulticast(_ message: DNSMessage, interface: Int32) {
        guard interfaces[interface] != nil else { return }
        do {
            let bytes = try message.encode()
            if let error = MDNSSocket.sendMulticast(fd: setup.fd, bytes, index: interface) {
                report("send on \(interfaces[interface]?.name ?? "?"): \(error)")
            }
        } catch {
            report("cannot encode a response: \(error)")
        }
    }

    /// Reports a problem once until a different one happens.
    func report(_ message: String) {
        guard message != lastError else { return }
        lastError = message
        emit(.error(message))
    }
}

/// Whole milliseconds of `d`, rounded down.
private func wholeMilliseconds(_ d: Duration) -> Int {
    let (s, atto) = d.components
    return Int(clamping: s) &* 1000 &+ Int(atto / 1_000_000_000_000_000)
}
