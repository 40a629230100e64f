// One intercom peer without audio: advertises itself over multicast DNS, browses for other peers,
// runs the invite/accept session with the first one and prints one JSON object per line:
//
//   {"event":"started","instance":"A","id":"…","ctl":40123,"host":"voicepipe-1a2b3c4d.local","t":…}
//   {"event":"peer_found","instance":"B","host":"…","addresses":["10.77.0.2"],"port":5008,"txt":{…},"t":…}
//   {"event":"connected","peer":"B","address":"10.77.0.2","rtp_port":5008,"t":…}
//   {"event":"disconnected","peer":"B","reason":"timeout","t":…}
//   {"event":"peer_lost","instance":"B","t":…}
//
// Usage: discovery-harness NAME RTP_PORT [--codec opus] [--type _voicepipe-intercom._udp] [--media]
// --media sends a small datagram to the peer's RTP port every 20 ms while connected and counts what
// arrives on ours as proof of life (IntercomSession.heard(from:)), as the intercom node does with RTP.
// SIGINT/SIGTERM: bye, mDNS goodbyes, exit 0. Build with bench/discovery-harness/build.sh.

import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Prints one JSON line (keys sorted) with the event name and a wall-clock time.
func emit(_ event: String, _ fields: [String: Any] = [:]) {
    var object = fields
    object["event"] = event
    object["t"] = (Date().timeIntervalSince1970 * 1000).rounded() / 1000
    if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]),
       let line = String(data: data, encoding: .utf8) {
        // One write per line: lines from several threads never interleave, nothing waits in a buffer.
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
    }
}

/// Write end of the pipe the signal handler wakes the stopping thread with.
nonisolated(unsafe) var signalPipe: Int32 = -1

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("discovery-harness: \(message)\n".utf8))
    exit(2)
}

/// Dummy media: a UDP socket on the RTP port; sends to the connected peer's RTP endpoint and reports
/// arrivals to the session.
final class Media: Sendable {
    let fd: Int32
    let target = Mutex<(host: [UInt8], port: UInt16)?>(nil)

    init(port: Int) {
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = UInt16(port).bigEndian
        let rc = withUnsafePointer(to: &a) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 { fail("cannot bind RTP port \(port): \(String(cString: strerror(errno)))") }
    }

    func run(session: IntercomSession) {
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 1500)
            var payload = [UInt8](repeating: 0, count: 172)
            payload[0] = 0x80
            while true {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if poll(&p, 1, 20) > 0 {
                    var from = sockaddr_in()
                    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                    let n = buffer.withUnsafeMutableBytes { buf in
                        withUnsafeMutablePointer(to: &from) {
                            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, &length) }
                        }
                    }
                    if n > 0, let host = withUnsafeBytes(of: from.sin_addr.s_addr, { DNSMessage.ipv4String(Array($0)) }) {
                        session.heard(from: host)
                    }
                }
                if let t = target.withLock({ $0 }) {
                    var to = sockaddr_in()
                    to.sin_family = sa_family_t(AF_INET)
                    to.sin_port = t.port.bigEndian
                    withUnsafeMutableBytes(of: &to.sin_addr.s_addr) { for i in 0..<4 { $0[i] = t.host[i] } }
                    _ = payload.withUnsafeBytes { buf in
                        withUnsafePointer(to: &to) {
                            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                                sendto(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                            }
                        }
                    }
                }
            }
        }
        thread.start()
    }
}

@main
struct DiscoveryHarness {
    static func main() async {
        var args = Array(CommandLine.arguments.dropFirst())
        var codec = "opus", type = "_voicepipe-intercom._udp", media = false
        var positional: [String] = []
        while !args.isEmpty {
            let a = args.removeFirst()
            switch a {
            case "--codec", "--type":
                guard !args.isEmpty else { fail("\(a) needs a value") }
                if a == "--codec" { codec = args.removeFirst() } else { type = args.removeFirst() }
            case "--media": media = true
            default: positional.append(a)
            }
        }
        guard positional.count == 2, let rtpPort = Int(positional[1]), (1...65535).contains(rtpPort) else {
            fail("usage: discovery-harness NAME RTP_PORT [--codec opus] [--type _voicepipe-intercom._udp] [--media]")
        }
        let name = positional[0]
        let id = String(format: "%016llx", UInt64.random(in: .min ... .max))

        let session: IntercomSession
        let mdns: MulticastDNS
        let mdnsEvents: AsyncStream<MulticastDNS.Event>
        do {
            session = try IntercomSession(configuration: .init(id: id, rtpPort: rtpPort, codec: codec))
            mdns = try MulticastDNS(serviceType: type, instance: name, port: rtpPort,
                                    txt: ["id": id, "ctl": "\(session.controlPort)", "rtp": "\(rtpPort)", "codec": codec])
            mdnsEvents = try mdns.start()
        } catch {
            fail("\(error)")
        }
        let sessionEvents = session.start()
        emit("started", ["instance": name, "id": id, "ctl": session.controlPort, "rtp_port": rtpPort, "host": mdns.hostName.description])

        let mediaLink = media ? Media(port: rtpPort) : nil
        mediaLink?.run(session: session)

        // Orderly exit: bye to the peer, goodbyes on mDNS. The handler only writes to a pipe; a thread
        // reading it does the rest.
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { fail("pipe(): \(String(cString: strerror(errno)))") }
        signalPipe = fds[1]
        let readEnd = fds[0]
        for sig in [SIGINT, SIGTERM] {
            signal(sig) { number in
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(signalPipe, &byte, 1)
            }
        }
        let stopper = Thread {
            var byte: UInt8 = 0
            while read(readEnd, &byte, 1) < 0 && errno == EINTR {}
            session.stop()
            mdns.stop()
            emit("stopped", ["signal": Int(byte)])
            exit(0)
        }
        stopper.start()

        Task {
            for await event in mdnsEvents {
                switch event {
                case .found(let peer):
                    emit("peer_found", ["instance": peer.instance, "host": peer.host, "addresses": peer.addresses,
                                        "port": peer.port, "txt": peer.txt])
                    session.peerFound(peer)
                case .lost(let instance):
                    emit("peer_lost", ["instance": instance])
                    session.peerLost(instance: instance)
                case .error(let message):
                    emit("mdns_error", ["message": message])
                }
            }
        }
        for await event in sessionEvents {
            switch event {
            case .connected(let peer, let rtp):
                emit("connected", ["peer": peer.instance ?? peer.id, "peer_id": peer.id, "address": rtp.host, "rtp_port": rtp.port])
                if let host = DNSMessage.ipv4Bytes(rtp.host) { mediaLink?.target.withLock { $0 = (host, UInt16(rtp.port)) } }
            case .disconnected(let peer, let reason):
                emit("disconnected", ["peer": peer.instance ?? peer.id, "reason": reason])
                mediaLink?.target.withLock { $0 = nil }
            case .rejected(let peer, let reason):
                emit("rejected", ["peer": peer.instance ?? peer.id, "reason": reason])
            case .error(let message):
                emit("session_error", ["message": message])
            }
        }
        // The session's stream ends when the stopping thread stops it; that thread exits the process
        // once the goodbyes are out.
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }
}
