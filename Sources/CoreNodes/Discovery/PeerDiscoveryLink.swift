import Foundation
import PipelineCore
import Synchronization
#if canImport(ServiceDiscovery)
import ServiceDiscovery
#endif

/// `rtp-send` with no `host`: finds the peer by DNS-SD and keeps the call up.
///
/// The node advertises `service` (``MulticastDNS``, with TXT `id`, `ctl` = the invitation channel's UDP
/// port, `rtp` = `receive_port`, `codec`), browses for the same service, and runs the invitation/accept
/// exchange with what it finds (``IntercomSession``: the lower id invites, pings every second, a peer
/// silent for 3 s is gone, a returning one is invited again). While connected, packets go to the peer's
/// advertised RTP port; while not, they are dropped and counted (`no_peer`). Events: `peer_found`,
/// `peer_lost`, `connected`, `disconnected` (with `reason`), and `error` for a rejected invitation.
final class PeerDiscoveryLink: Sendable {
    struct Settings: Sendable {
        var service: String
        var name: String
        var receivePort: Int
        var controlPort: Int
    }

    private let settings: Settings
    private let destination = LockedValue<UDPAddress?>(nil)
    private let generation = Atomic<Int>(0)
    /// Instance names of the peers found so far, by their TXT `id` (a peer may invite before its
    /// advertisement is resolved here).
    private let names = LockedValue<[String: String]>([:])
    private let parts = LockedValue<(session: IntercomSession?, mdns: MulticastDNS?, task: Task<Void, Never>?)>((nil, nil, nil))

    init(settings: Settings) { self.settings = settings }

    /// Where packets go now (nil: no peer connected).
    var current: UDPAddress? { destination.withLock { $0 } }

    /// Bumped at every (re)connection, so the sender can mark the next packet as a new talkspurt.
    var connections: Int { generation.load(ordering: .relaxed) }

    /// Starts advertising, browsing and answering invitations for `codec`. Blocking (socket setup): call
    /// it off the node's executor.
    func start(codec: String, context: NodeContext) throws {
        let id = String(format: "%016llx", UInt64.random(in: .min ... .max))
        let session: IntercomSession
        let mdns: MulticastDNS
        let mdnsEvents: AsyncStream<MulticastDNS.Event>
        do {
            session = try IntercomSession(configuration: .init(id: id, rtpPort: settings.receivePort, codec: codec),
                                          controlPort: settings.controlPort)
            mdns = try MulticastDNS(serviceType: settings.service, instance: settings.name, port: settings.receivePort,
                                    txt: ["id": id, "ctl": "\(session.controlPort)", "rtp": "\(settings.receivePort)", "codec": codec])
            mdnsEvents = try mdns.start()
        } catch let e as MulticastDNS.Failure {
            throw NodeError(.discoveryFailed, "rtp-send: cannot advertise or browse \(settings.service): \(e.message)")
        } catch {
            throw NodeError(.discoveryFailed, "rtp-send: cannot start peer discovery: \(error)")
        }
        let sessionEvents = session.start()
        context.logger.info("advertising '\(settings.name)' as \(settings.service) (RTP port \(settings.receivePort), invitations on UDP \(session.controlPort)); looking for a peer")
        let task = Task { [self] in
            async let browsing: Void = self.follow(mdnsEvents, session: session, context: context)
            async let calling: Void = self.follow(sessionEvents, context: context)
            _ = await (browsing, calling)
        }
        parts.withLock { $0 = (session, mdns, task) }
    }

    private func follow(_ mdnsEvents: AsyncStream<MulticastDNS.Event>, session: IntercomSession, context: NodeContext) async {
        for await event in mdnsEvents {
            switch event {
            case .found(let peer):
                try? await context.emit(.peerFound, [("instance", .string(peer.instance)), ("host", .string(peer.host)),
                                                       ("address", .string(peer.addresses.first ?? "")), ("port", .int(Int64(peer.port))),
                                                       ("codec", .string(peer.txt["codec"] ?? ""))])
                if let id = peer.txt["id"] { names.withLock { $0[id] = peer.instance } }
                session.peerFound(peer)
            case .lost(let instance):
                try? await context.emit(.peerLost, [("instance", .string(instance))])
                session.peerLost(instance: instance)
            case .error(let message):
                context.logger.warning("discovery: \(message)")
            }
        }
    }

    private func follow(_ sessionEvents: AsyncStream<IntercomSession.Event>, context: NodeContext) async {
        for await event in sessionEvents {
            switch event {
            case .connected(var peer, let rtp):
                if peer.instance == nil { peer.instance = names.withLock { $0[peer.id] } }
                let address = try? UDPAddress.resolve(host: rtp.host, port: rtp.port)
                destination.withLock { $0 = address }
                generation.add(1, ordering: .relaxed)
                context.count("connections")
                context.logger.notice("connected to '\(peer.instance ?? peer.id)': sending RTP to \(rtp)")
                try? await context.emit(.connected, [("peer", .string(peer.instance ?? peer.id)), ("address", .string(rtp.host)),
                                                      ("port", .int(Int64(rtp.port)))])
            case .disconnected(var peer, let reason):
                if peer.instance == nil { peer.instance = names.withLock { $0[peer.id] } }
                destination.withLock { $0 = nil }
                context.logger.notice("'\(peer.instance ?? peer.id)' disconnected (\(reason)); waiting for it to come back")
                try? await context.emit(.disconnected, [("peer", .string(peer.instance ?? peer.id)), ("reason", .string(reason))])
            case .rejected(let peer, let reason):
                try? await context.emitError(code: "peer_rejected", message: "'\(peer.instance ?? peer.id)' declined the call: \(reason)")
            case .error(let message):
                context.logger.warning("invitation channel: \(message)")
            }
        }
    }

    /// Says goodbye (bye to the peer, mDNS goodbyes) and stops. Blocking for up to ~3 s: call it off the executor.
    func stop() {
        let (session, mdns, task) = parts.withLock { p in defer { p = (nil, nil, nil) }; return p }
        session?.stop()
        mdns?.stop()
        task?.cancel()
        destination.withLock { $0 = nil }
    }
}
