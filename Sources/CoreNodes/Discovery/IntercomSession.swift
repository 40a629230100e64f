import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PipelineCore
import Synchronization
#if canImport(ServiceDiscovery)
import ServiceDiscovery
#endif

/// A control datagram between two intercom peers: one JSON object.
///
/// ```json
/// {"type":"invite","id":"3f2a…","rtp_port":5006,"codec":"opus"}
/// {"type":"accept","id":"9c41…","rtp_port":5008}
/// {"type":"reject","id":"9c41…","reason":"codec mismatch"}
/// {"type":"ping","id":"3f2a…"}
/// {"type":"bye","id":"3f2a…"}
/// ```
/// `id` is always the sender's peer id (the TXT `id` it advertises).
public struct IntercomMessage: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable {
        case invite, accept, reject, ping, bye
    }

    public var type: Kind
    /// The sender's peer id.
    public var id: String
    /// Where the sender receives RTP (`invite`, `accept`).
    public var rtpPort: Int?
    /// The sender's codec (`invite`).
    public var codec: String?
    /// Why (`reject`).
    public var reason: String?

    enum CodingKeys: String, CodingKey {
        case type, id, codec, reason
        case rtpPort = "rtp_port"
    }

    public init(type: Kind, id: String, rtpPort: Int? = nil, codec: String? = nil, reason: String? = nil) {
        self.type = type
        self.id = id
        self.rtpPort = rtpPort
        self.codec = codec
        self.reason = reason
    }

    public static func invite(id: String, rtpPort: Int, codec: String) -> Self { .init(type: .invite, id: id, rtpPort: rtpPort, codec: codec) }
    public static func accept(id: String, rtpPort: Int) -> Self { .init(type: .accept, id: id, rtpPort: rtpPort) }
    public static func reject(id: String, reason: String) -> Self { .init(type: .reject, id: id, reason: reason) }
    public static func ping(id: String) -> Self { .init(type: .ping, id: id) }
    public static func bye(id: String) -> Self { .init(type: .bye, id: id) }

    /// Largest datagram accepted.
    public static let maxSize = 2048

    /// The JSON datagram (keys sorted, absent fields left out).
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { Array($0) } ?? []
    }

    /// Parses a datagram; nil unless it is a well-formed message: a known type, an id of 1 to 64
    /// characters, an RTP port in 1...65535 on `invite` and `accept`, a codec on `invite`.
    public static func decode(_ bytes: [UInt8]) -> IntercomMessage? {
        guard !bytes.isEmpty, bytes.count <= maxSize,
              let m = try? JSONDecoder().decode(IntercomMessage.self, from: Data(bytes)),
              (1...64).contains(m.id.count) else { return nil }
        switch m.type {
        case .invite:
            guard let p = m.rtpPort, (1...65535).contains(p), let c = m.codec, !c.isEmpty else { return nil }
        case .accept:
            guard let p = m.rtpPort, (1...65535).contains(p) else { return nil }
        case .reject, .ping, .bye:
            break
        }
        return m
    }
}

/// The invitation exchange between two intercom peers, as a pure state machine: inputs and the
/// current time in, messages to send and session changes out. No I/O and no clock of its own, so
/// tests drive it step by step; ``IntercomSession`` runs it over UDP.
///
/// Rules:
/// - A peer found by discovery becomes the target when nothing else is going on. Of the two, the
///   peer with the lower id invites at once; the other waits ``Configuration/inviteGrace`` (2 s) for
///   that invite and then invites anyway. Invites are repeated every ``Configuration/inviteRetry``
///   until accepted, rejected, or the peer is lost by discovery.
/// - An invite is accepted when idle, waiting or inviting (on glare, the invite of the lower id wins),
///   unless the codec differs (`reject` "codec mismatch") or another peer is connected (`reject`
///   "busy"). The session is connected once an `accept` is sent or received.
/// - While connected, a `ping` goes out every ``Configuration/pingInterval``; any control message from
///   the peer, or ``Input/heard(host:)`` (RTP arriving), keeps it alive. After
///   ``Configuration/timeout`` of silence the session is disconnected ("timeout") and starts over
///   with the same peer while discovery still lists it.
/// - `bye` ends the session ("bye"); that peer is not invited again until discovery finds it again
///   (it may still invite us). A `reject` holds off invites to that peer for
///   ``Configuration/rejectBackoff``.
/// - A peer that restarts comes back with a new id: discovery reporting the same instance with a new
///   id, or an invite from a new id on the current peer's instance or control host, ends the old
///   session ("peer restarted") before the new one starts.
public struct IntercomSessionState: Sendable {
    /// A host and UDP port.
    public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public init(host: String, port: Int) { self.host = host; self.port = port }
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// The other side.
    public struct Peer: Sendable, Hashable {
        /// Its peer id (TXT `id`, and `id` in its messages).
        public var id: String
        /// Its discovery instance name; nil while known only from its invite.
        public var instance: String?
        /// Where its control messages go.
        public var control: Endpoint
        /// Its codec, when known (TXT `codec` or its invite).
        public var codec: String?
        public init(id: String, instance: String?, control: Endpoint, codec: String? = nil) {
            self.id = id
            self.instance = instance
            self.control = control
            self.codec = codec
        }
    }

    public struct Configuration: Sendable, Hashable {
        /// Our peer id: random 64-bit hex, also advertised as TXT `id`.
        public var id: String
        /// Where we receive RTP.
        public var rtpPort: Int
        /// Our codec name; an invite with a different one is rejected (ASCII case ignored).
        public var codec: String
        /// Silence after which a connected peer is gone.
        public var timeout: Duration = .seconds(3)
        /// How long the peer with the higher id waits for the other's invite before inviting itself.
        public var inviteGrace: Duration = .seconds(2)
        /// Time between repeated invites.
        public var inviteRetry: Duration = .seconds(1)
        /// Time between pings while connected.
        public var pingInterval: Duration = .seconds(1)
        /// No invites to a peer for this long after it rejected one.
        public var rejectBackoff: Duration = .seconds(5)

        public init(id: String, rtpPort: Int, codec: String) {
            self.id = id
            self.rtpPort = rtpPort
            self.codec = codec
        }
    }

    public enum Input: Sendable, Hashable {
        /// Discovery resolved a peer (again, or with changed details).
        case found(Peer)
        /// Discovery lost the instance.
        case lost(instance: String)
        /// A control message arrived from `from`.
        case received(IntercomMessage, from: Endpoint)
        /// Media (RTP) arrived from `host`: proof of life.
        case heard(host: String)
        /// Time passed; call every 100 ms or so.
        case tick
        /// We are going away: `bye` to the peer.
        case stop
    }

    public enum Output: Sendable, Hashable {
        /// Send this datagram to the endpoint.
        case send(IntercomMessage, to: Endpoint)
        /// A session started: send RTP to `rtp`.
        case connected(peer: Peer, rtp: Endpoint)
        /// The session ended: "timeout", "bye", "peer restarted", "stopped".
        case disconnected(peer: Peer, reason: String)
        /// Our invite was rejected (`reason` from the peer).
        case rejected(peer: Peer, reason: String)
    }

    public enum Phase: Sendable, Hashable {
        /// No target.
        case idle
        /// The peer has the lower id and should invite us; we invite at `since` + grace.
        case waiting(peer: Peer, since: Duration)
        /// We invited the peer, last at `lastSent`.
        case inviting(peer: Peer, lastSent: Duration)
        /// In a session.
        case connected(peer: Peer, rtp: Endpoint, lastHeard: Duration, lastPing: Duration)
        /// ``Input/stop`` was handled; nothing more happens.
        case stopped
    }

    public let configuration: Configuration
    public private(set) var phase: Phase = .idle
    /// Peers discovery currently lists, in the order found.
    public private(set) var known: [Peer] = []
    /// Why a peer is not invited for now.
    private enum Hold: Sendable {
        /// It said `bye`: until discovery finds it again.
        case untilFound
        /// It rejected our invite: until then.
        case until(Duration)
    }
    private var holdOff: [String: Hold] = [:]

    public init(configuration: Configuration) { self.configuration = configuration }

    /// The connected peer, if any.
    public var connectedPeer: Peer? {
        if case .connected(let peer, _, _, _) = phase { return peer }
        return nil
    }

    /// Takes one input at time `now` (any monotonic origin) and returns what to do, in order.
    public mutating func handle(_ input: Input, now: Duration) -> [Output] {
        if case .stopped = phase { return [] }
        var out: [Output] = []
        switch input {
        case .found(let peer): found(peer, now: now, out: &out)
        case .lost(let instance): lost(instance, now: now, out: &out)
        case .received(let message, let from): received(message, from: from, now: now, out: &out)
        case .heard(let host): heard(host, now: now)
        case .tick: tick(now: now, out: &out)
        case .stop: stop(out: &out)
        }
        return out
    }

    // MARK: - Inputs

    private mutating func found(_ peer: Peer, now: Duration, out: inout [Output]) {
        guard peer.id != configuration.id else { return }
        if let i = known.firstIndex(where: { $0.id == peer.id || (peer.instance != nil && $0.instance == peer.instance) }) {
            known[i] = peer
        } else {
            known.append(peer)
        }
        holdOff[peer.id] = nil   // found again: invitable again
        switch phase {
        case .connected(let current, let rtp, let heard, let ping):
            if current.id == peer.id {
                var updated = current
                if updated.instance == nil { updated.instance = peer.instance }
                if updated.codec == nil { updated.codec = peer.codec }
                phase = .connected(peer: updated, rtp: rtp, lastHeard: heard, lastPing: ping)
            } else if peer.instance != nil && current.instance == peer.instance {
                out.append(.disconnected(peer: current, reason: "peer restarted"))
                phase = .idle
            }
        case .waiting(let current, _), .inviting(let current, _):
            if current.id == peer.id || (peer.instance != nil && current.instance == peer.instance) {
                // Same peer, new details or a new incarnation: start over with what discovery says.
                phase = .idle
            }
        case .idle, .stopped:
            break
        }
        engage(now: now, out: &out)
    }

    private mutating func lost(_ instance: String, now: Duration, out: inout [Output]) {
        known.removeAll { $0.instance == instance }
        switch phase {
        case .waiting(let current, _), .inviting(let current, _):
            if current.instance == instance {
                phase = .idle
                engage(now: now, out: &out)
            }
        case .connected, .idle, .stopped:
            // A connected session is judged by its own keep-alive, not by multicast DNS.
            break
        }
    }

    private mutating func received(_ message: IntercomMessage, from: Endpoint, now: Duration, out: inout [Output]) {
        guard message.id != configuration.id else { return }
        switch message.type {
        case .invite: invited(message, from: from, now: now, out: &out)
        case .accept: accepted(message, from: from, now: now, out: &out)
        case .reject:
            guard case .inviting(let current, _) = phase, current.id == message.id else { return }
            out.append(.rejected(peer: current, reason: message.reason ?? "rejected"))
            holdOff[current.id] = .until(now + configuration.rejectBackoff)
            phase = .idle
            engage(now: now, out: &out)
        case .ping:
            switch phase {
            case .connected(let current, let rtp, _, let ping) where current.id == message.id:
                phase = .connected(peer: current, rtp: rtp, lastHeard: now, lastPing: ping)
            case .waiting(let current, _) where current.id == message.id,
                 .inviting(let current, _) where current.id == message.id:
                // It believes it is connected to us and we do not: invite now; it answers `accept`.
                out.append(.send(invite, to: from))
                phase = .inviting(peer: current, lastSent: now)
            default:
                break
            }
        case .bye:
            switch phase {
            case .connected(let current, _, _, _) where current.id == message.id:
                out.append(.disconnected(peer: current, reason: "bye"))
                phase = .idle
            case .waiting(let current, _) where current.id == message.id,
                 .inviting(let current, _) where current.id == message.id:
                phase = .idle
            default:
                return
            }
            holdOff[message.id] = .untilFound
            engage(now: now, out: &out)
        }
    }

    private mutating func invited(_ message: IntercomMessage, from: Endpoint, now: Duration, out: inout [Output]) {
        guard let codec = message.codec, let rtpPort = message.rtpPort else { return }
        guard codec.lowercased() == configuration.codec.lowercased() else {
            out.append(.send(.reject(id: configuration.id, reason: "codec mismatch: \(configuration.codec)"), to: from))
            return
        }
        let listed = known.first { $0.id == message.id }
        let peer = Peer(id: message.id, instance: listed?.instance, control: from, codec: codec)
        switch phase {
        case .connected(let current, let rtp, _, let ping):
            if current.id == message.id {
                // Our accept was lost, or it timed out while we did not: accept again.
                phase = .connected(peer: current, rtp: rtp, lastHeard: now, lastPing: ping)
                out.append(.send(.accept(id: configuration.id, rtpPort: configuration.rtpPort), to: from))
                return
            }
            let sameInstance = peer.instance != nil && peer.instance == current.instance
            guard sameInstance || current.control.host == from.host else {
                out.append(.send(.reject(id: configuration.id, reason: "busy"), to: from))
                return
            }
            out.append(.disconnected(peer: current, reason: "peer restarted"))
        case .inviting(let current, _) where current.id == message.id:
            // Glare: both invited. The invite of the lower id wins; ours is repeated to make that quick.
            if Self.precedes(configuration.id, message.id) {
                out.append(.send(invite, to: from))
                phase = .inviting(peer: current, lastSent: now)
                return
            }
        case .inviting(let current, _):
            // Another peer invites while ours has not answered: take the one that asks.
            out.append(.send(.bye(id: configuration.id), to: current.control))
        case .idle, .waiting, .stopped:
            break
        }
        holdOff[peer.id] = nil
        let rtp = Endpoint(host: from.host, port: rtpPort)
        phase = .connected(peer: peer, rtp: rtp, lastHeard: now, lastPing: now)
        out.append(.send(.accept(id: configuration.id, rtpPort: configuration.rtpPort), to: from))
        out.append(.connected(peer: peer, rtp: rtp))
    }

    private mutating func accepted(_ message: IntercomMessage, from: Endpoint, now: Duration, out: inout [Output]) {
        guard let rtpPort = message.rtpPort else { return }
        switch phase {
        case .inviting(let current, _) where current.id == message.id:
            var peer = current
            peer.control = from
            let rtp = Endpoint(host: from.host, port: rtpPort)
            phase = .connected(peer: peer, rtp: rtp, lastHeard: now, lastPing: now)
            out.append(.connected(peer: peer, rtp: rtp))
        case .connected(let current, let rtp, _, let ping) where current.id == message.id:
            phase = .connected(peer: current, rtp: rtp, lastHeard: now, lastPing: ping)
        default:
            // An accept we no longer want (we moved on): tell it, so it does not wait for a timeout.
            out.append(.send(.bye(id: configuration.id), to: from))
        }
    }

    private mutating func heard(_ host: String, now: Duration) {
        if case .connected(let peer, let rtp, _, let ping) = phase, host == peer.control.host || host == rtp.host {
            phase = .connected(peer: peer, rtp: rtp, lastHeard: now, lastPing: ping)
        }
    }

    private mutating func tick(now: Duration, out: inout [Output]) {
        switch phase {
        case .idle:
            engage(now: now, out: &out)
        case .waiting(let peer, let since):
            if now - since >= configuration.inviteGrace {
                out.append(.send(invite, to: peer.control))
                phase = .inviting(peer: peer, lastSent: now)
            }
        case .inviting(let peer, let last):
            if now - last >= configuration.inviteRetry {
                out.append(.send(invite, to: peer.control))
                phase = .inviting(peer: peer, lastSent: now)
            }
        case .connected(let peer, let rtp, let heard, let ping):
            if now - heard >= configuration.timeout {
                out.append(.disconnected(peer: peer, reason: "timeout"))
                phase = .idle
                engage(now: now, out: &out)
            } else if now - ping >= configuration.pingInterval {
                out.append(.send(.ping(id: configuration.id), to: peer.control))
                phase = .connected(peer: peer, rtp: rtp, lastHeard: heard, lastPing: now)
            }
        case .stopped:
            break
        }
    }

    private mutating func stop(out: inout [Output]) {
        switch phase {
        case .connected(let peer, _, _, _):
            out.append(.send(.bye(id: configuration.id), to: peer.control))
            out.append(.disconnected(peer: peer, reason: "stopped"))
        case .inviting(let peer, _):
            out.append(.send(.bye(id: configuration.id), to: peer.control))
        case .idle, .waiting, .stopped:
            break
        }
        phase = .stopped
    }

    // MARK: - Helpers

    private var invite: IntercomMessage {
        .invite(id: configuration.id, rtpPort: configuration.rtpPort, codec: configuration.codec)
    }

    /// When idle, targets the first listed peer not held off: invites it at once if our id is the
    /// lower one, else waits for its invite.
    private mutating func engage(now: Duration, out: inout [Output]) {
        guard case .idle = phase else { return }
        let target = known.first { peer in
            switch holdOff[peer.id] {
            case nil: true
            case .untilFound: false
            case .until(let time): now >= time
            }
        }
        guard let peer = target else { return }
        holdOff[peer.id] = nil
        if Self.precedes(configuration.id, peer.id) {
            out.append(.send(invite, to: peer.control))
            phase = .inviting(peer: peer, lastSent: now)
        } else {
            phase = .waiting(peer: peer, since: now)
        }
    }

    /// Whether id `a` is lower than `b`: numerically for hex ids, else by their text.
    static func precedes(_ a: String, _ b: String) -> Bool {
        if let x = UInt64(a, radix: 16), let y = UInt64(b, radix: 16), x != y { return x < y }
        return a < b
    }
}

// MARK: - UDP runner

/// Runs ``IntercomSessionState`` over a UDP control socket (IPv4) on a thread of its own.
///
/// Feed it discovery results with ``peerFound(_:)`` / ``peerLost(instance:)`` (the peer's TXT must
/// carry `id` and `ctl`, and may carry `codec`), and RTP arrival with ``heard(from:)``; read session
/// changes from the stream ``start()`` returns. Advertise ``controlPort`` as TXT `ctl`.
///
/// ```swift
/// let session = try IntercomSession(configuration: .init(id: id, rtpPort: 5006, codec: "opus"))
/// let mdns = try MulticastDNS(serviceType: "_voicepipe-intercom._udp", instance: name, port: 5006,
///                             txt: ["id": id, "ctl": "\(session.controlPort)", "rtp": "5006", "codec": "opus"])
/// ```
public final class IntercomSession: Sendable {
    public enum Event: Sendable, Hashable {
        case connected(peer: IntercomSessionState.Peer, rtp: IntercomSessionState.Endpoint)
        case disconnected(peer: IntercomSessionState.Peer, reason: String)
        case rejected(peer: IntercomSessionState.Peer, reason: String)
        /// A socket problem that does not stop the session.
        case error(String)
    }

    /// A failure to open the control socket.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// The bound control port (advertise it as TXT `ctl`).
    public let controlPort: Int
    public let configuration: IntercomSessionState.Configuration
    private let core: IntercomSessionCore

    /// Binds the control socket on `bindHost:controlPort` (0: a free port).
    public init(configuration: IntercomSessionState.Configuration, controlPort: Int = 0, bindHost: String = "0.0.0.0") throws {
        guard let host = DNSMessage.ipv4Bytes(bindHost), (0...65535).contains(controlPort) else {
            throw Failure(message: "bad control address \(bindHost):\(controlPort)")
        }
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(message: "socket(): \(String(cString: strerror(errno)))") }
        var address = IntercomSessionCore.socketAddress(host, UInt16(controlPort))
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw Failure(message: "cannot bind UDP \(bindHost):\(controlPort): \(why)")
        }
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        self.controlPort = Int(UInt16(bigEndian: bound.sin_port))
        self.configuration = configuration
        self.core = IntercomSessionCore(fd: fd, state: IntercomSessionState(configuration: configuration))
    }

    /// Starts receiving and ticking (every 100 ms); the stream ends after ``stop()``.
    public func start() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(256))
        guard core.begin(continuation) else {
            continuation.finish()
            return stream
        }
        // The thread holds the core, not `self`: dropping the last reference stops it.
        let core = self.core
        let thread = Thread { core.loop() }
        thread.name = "intercom-ctl"
        thread.start()
        return stream
    }

    /// A peer resolved by discovery. Ignored without TXT `id`, `ctl` and an address, and for our own id.
    public func peerFound(_ peer: DiscoveredPeer) {
        guard let id = peer.txt["id"], !id.isEmpty, let ctl = peer.txt["ctl"].flatMap({ Int($0) }), (1...65535).contains(ctl),
              let host = peer.addresses.first else { return }
        let p = IntercomSessionState.Peer(id: id, instance: peer.instance, control: .init(host: host, port: ctl), codec: peer.txt["codec"])
        core.apply(.found(p))
    }

    /// Discovery lost the instance.
    public func peerLost(instance: String) { core.apply(.lost(instance: instance)) }

    /// RTP (or anything else) arrived from `address` (a host, or `host:port`): the peer is alive.
    public func heard(from address: String) {
        var host = address
        if host.hasPrefix("["), let end = host.firstIndex(of: "]") {
            host = String(host[host.index(after: host.startIndex)..<end])
        } else if host.filter({ $0 == ":" }).count == 1, let colon = host.firstIndex(of: ":") {
            host = String(host[..<colon])
        }
        core.apply(.heard(host: host))
    }

    /// The current state (for inspection).
    public var state: IntercomSessionState { core.box.withLock { $0.state } }

    /// Sends `bye` to a connected peer, stops the thread, closes the socket and ends the stream.
    public func stop() { core.stop() }

    deinit { core.stop() }
}

/// The socket, the state and the thread loop of an ``IntercomSession``.
private final class IntercomSessionCore: Sendable {
    struct Box {
        var state: IntercomSessionState
        var continuation: AsyncStream<IntercomSession.Event>.Continuation?
        var started = false
        var stopped = false
        var lastError: String?
    }

    let fd: Int32
    let clock = ContinuousClock()
    let origin: ContinuousClock.Instant
    let box: LockedValue<Box>
    let finished = Atomic<Bool>(false)
    let closed = Atomic<Bool>(false)

    init(fd: Int32, state: IntercomSessionState) {
        self.fd = fd
        self.origin = clock.now
        self.box = LockedValue(Box(state: state))
    }

    var now: Duration { clock.now - origin }

    func begin(_ continuation: AsyncStream<IntercomSession.Event>.Continuation) -> Bool {
        box.withLock { b in
            guard !b.started, !b.stopped else { return false }
            b.started = true
            b.continuation = continuation
            return true
        }
    }

    func apply(_ input: IntercomSessionState.Input) {
        box.withLock { b in
            guard !b.stopped else { return }
            let outputs = b.state.handle(input, now: now)
            perform(outputs, in: &b)
        }
    }

    func stop() {
        let running = box.withLock { b -> Bool? in
            guard !b.stopped else { return nil }
            b.stopped = true
            perform(b.state.handle(.stop, now: now), in: &b)
            b.continuation?.finish()
            b.continuation = nil
            return b.started
        }
        guard let running else { return }   // stopped before
        if running {
            // The loop notices within one poll timeout (100 ms) and closes the socket.
            let deadline = clock.now + .seconds(1)
            while !finished.load(ordering: .acquiring) && clock.now < deadline { usleep(2000) }
        } else {
            closeSocket()
        }
    }

    private func closeSocket() {
        if !closed.exchange(true, ordering: .acquiringAndReleasing) { Glibc.close(fd) }
    }

    /// Sends and reports outputs; called with the lock held so that events keep their order.
    private func perform(_ outputs: [IntercomSessionState.Output], in b: inout Box) {
        for output in outputs {
            switch output {
            case .send(let message, let to):
                if let error = send(message.encoded(), to: to) { report("send to \(to): \(error)", in: &b) }
            case .connected(let peer, let rtp):
                b.continuation?.yield(.connected(peer: peer, rtp: rtp))
            case .disconnected(let peer, let reason):
                b.continuation?.yield(.disconnected(peer: peer, reason: reason))
            case .rejected(let peer, let reason):
                b.continuation?.yield(.rejected(peer: peer, reason: reason))
            }
        }
    }

    private func report(_ message: String, in b: inout Box) {
        guard b.lastError != message else { return }
        b.lastError = message
        b.continuation?.yield(.error(message))
    }

    func loop() {
        var buffer = [UInt8](repeating: 0, count: IntercomMessage.maxSize + 1)
        while !box.withLock({ $0.stopped }) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, 100)
            while let (bytes, from) = receive(&buffer) {
                guard let message = IntercomMessage.decode(bytes) else { continue }
                apply(.received(message, from: from))
            }
            apply(.tick)
        }
        closeSocket()
        finished.store(true, ordering: .releasing)
    }

    private func receive(_ buffer: inout [UInt8]) -> ([UInt8], IntercomSessionState.Endpoint)? {
        var from = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let n = buffer.withUnsafeMutableBytes { buf in
            withUnsafeMutablePointer(to: &from) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, &length) }
            }
        }
        // EAGAIN: drained. Other errors (an ICMP error left on the socket) carry no datagram either.
        guard n >= 0 else { return nil }
        let host = withUnsafeBytes(of: from.sin_addr.s_addr) { DNSMessage.ipv4String(Array($0)) } ?? "?"
        return (Array(buffer[0..<n]), .init(host: host, port: Int(UInt16(bigEndian: from.sin_port))))
    }

    private func send(_ bytes: [UInt8], to endpoint: IntercomSessionState.Endpoint) -> String? {
        guard let host = DNSMessage.ipv4Bytes(endpoint.host), (1...65535).contains(endpoint.port) else { return "not an IPv4 endpoint" }
        var to = Self.socketAddress(host, UInt16(endpoint.port))
        let n = bytes.withUnsafeBytes { buf in
            withUnsafePointer(to: &to) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        return n < 0 ? String(cString: strerror(errno)) : nil
    }

    static func socketAddress(_ host: [UInt8], _ port: UInt16) -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = port.bigEndian
        withUnsafeMutableBytes(of: &a.sin_addr.s_addr) { dst in
            for i in 0..<min(4, host.count) { dst[i] = host[i] }
        }
        return a
    }
}
