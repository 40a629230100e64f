#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// A resolved IPv4 or IPv6 socket address.
public struct UDPAddress: Sendable, CustomStringConvertible {
    fileprivate var storage: sockaddr_storage
    fileprivate var length: socklen_t

    /// Address family (`AF_INET` or `AF_INET6`).
    public var family: Int32 { Int32(storage.ss_family) }

    /// Resolves `host` (a name or a numeric IPv4/IPv6 address) and `port`; the first result wins.
    /// `passive` resolves a local bind address (an empty host then means every interface).
    /// May block on DNS: call it off the cooperative pool for names.
    public static func resolve(host: String, port: Int, passive: Bool = false) throws -> UDPAddress {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_flags = passive ? AI_PASSIVE : 0
        var result: UnsafeMutablePointer<addrinfo>?
        let h = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let rc = getaddrinfo(h.isEmpty ? nil : h, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            let why = rc != 0 ? String(cString: gai_strerror(rc)) : "no address"
            throw UDPError("address_invalid", "cannot resolve \(host):\(port): \(why)")
        }
        defer { freeaddrinfo(result) }
        var address = UDPAddress(storage: sockaddr_storage(), length: first.pointee.ai_addrlen)
        withUnsafeMutableBytes(of: &address.storage) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        return address
    }

    /// Numeric host and port, `[v6]:port` for IPv6.
    public var description: String {
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var serv = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        var s = storage
        let rc = withUnsafePointer(to: &s) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), &serv, socklen_t(serv.count), NI_NUMERICHOST | NI_NUMERICSERV)
            }
        }
        guard rc == 0 else { return "?" }
        func text(_ c: [CChar]) -> String { String(decoding: c.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        let h = text(host), p = text(serv)
        return family == AF_INET6 ? "[\(h)]:\(p)" : "\(h):\(p)"
    }

    /// The port number.
    public var port: Int {
        var s = storage
        return withUnsafePointer(to: &s) { p -> Int in
            if family == AF_INET6 {
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
            return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
    }
}

/// A failure of a UDP socket call, with the node error code to report.
public struct UDPError: Error, Sendable, CustomStringConvertible {
    /// Stable code (`address_invalid`, `bind_failed`, `socket_failed`, `receive_failed`).
    public var code: String
    /// What happened.
    public var message: String
    init(_ code: String, _ message: String) { self.code = code; self.message = message }
    public var description: String { message }
}

/// A datagram socket over plain POSIX calls.
///
/// `receive(timeoutMs:)` blocks up to its timeout, so call it from a ``BlockingWorker`` thread.
/// `send(_:to:)` never blocks (`MSG_DONTWAIT`): a full send buffer drops the datagram and reports it.
/// Close the socket from the same thread that receives on it, after the last receive.
public final class UDPSocket: Sendable {
    private let fd: Int32
    private let closed = Atomic<Bool>(false)
    /// Address family of the socket.
    public let family: Int32

    /// A socket bound to `host` (numeric; `0.0.0.0`, `::` for every IPv6 and IPv4 interface) and
    /// `port` (0 picks a free one; read it back with ``localPort``).
    public init(bindHost host: String, port: Int) throws {
        let address = try UDPAddress.resolve(host: host, port: port, passive: true)
        family = address.family
        fd = socket(family, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw UDPError("socket_failed", "socket(): \(String(cString: strerror(errno)))") }
        if family == AF_INET6 {
            var off: Int32 = 0  // accept IPv4 too (v4-mapped) when bound to ::
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &off, socklen_t(MemoryLayout<Int32>.size))
        }
        var a = address
        let rc = withUnsafePointer(to: &a.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, a.length) }
        }
        guard rc == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw UDPError("bind_failed", "cannot bind UDP \(address): \(why)")
        }
    }

    /// An unbound socket for sending to addresses of `family` (the system picks the local port).
    public init(family: Int32) throws {
        self.family = family
        fd = socket(family, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw UDPError("socket_failed", "socket(): \(String(cString: strerror(errno)))") }
    }

    /// The local port (after bind, or after the first send).
    public var localPort: Int {
        var s = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &s) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return UDPAddress(storage: s, length: len).port
    }

    /// Sends one datagram; returns 0 or the `errno` of a failed send (`EAGAIN`: send buffer full).
    @discardableResult
    public func send(_ bytes: [UInt8], to address: UDPAddress) -> Int32 {
        var a = address
        let n = bytes.withUnsafeBytes { buf in
            withUnsafePointer(to: &a.storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, a.length)
                }
            }
        }
        return n < 0 ? errno : 0
    }

    /// Waits up to `timeoutMs` for a datagram; `nil` on timeout. Blocking: call from a worker thread.
    public func receive(timeoutMs: Int32, maxSize: Int = 2048) throws -> (bytes: [UInt8], from: UDPAddress)? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = poll(&p, 1, timeoutMs)
        if r == 0 { return nil }
        if r < 0 {
            if errno == EINTR { return nil }
            throw UDPError("receive_failed", "poll(): \(String(cString: strerror(errno)))")
        }
        var buffer = [UInt8](repeating: 0, count: maxSize)
        var from = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let n = buffer.withUnsafeMutableBytes { buf in
            withUnsafeMutablePointer(to: &from) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, &len) }
            }
        }
        if n < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNREFUSED { return nil }
            throw UDPError("receive_failed", "recvfrom(): \(String(cString: strerror(errno)))")
        }
        buffer.removeLast(buffer.count - n)
        return (buffer, UDPAddress(storage: from, length: len))
    }

    /// Closes the socket (once).
    public func close() {
        if !closed.exchange(true, ordering: .acquiringAndReleasing) { _ = Glibc.close(fd) }
    }

    deinit { close() }
}
