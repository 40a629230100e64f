import Foundation

/// The telephone codecs a `sip` route offers and answers with (`codecs:` in the route, in preference order).
enum TelephoneCodec: String, Sendable, CaseIterable {
    case pcmu, pcma, g722, opus

    /// The payload type RFC 3551 assigns (nil: dynamic).
    var staticPayloadType: UInt8? {
        switch self {
        case .pcmu: 0
        case .pcma: 8
        case .g722: 9
        case .opus: nil
        }
    }

    /// The encoding name and clock rate of its `a=rtpmap` (G.722's RTP clock is 8000 though it samples at 16 kHz, RFC 3551 §4.5.2).
    var rtpmap: (name: String, clock: Int, channels: Int?) {
        switch self {
        case .pcmu: ("PCMU", 8000, nil)
        case .pcma: ("PCMA", 8000, nil)
        case .g722: ("G722", 8000, nil)
        case .opus: ("opus", 48000, 2)
        }
    }

    /// The name in events and logs.
    var name: String { rawValue }
}

/// A session description (RFC 4566), the parts a telephone call needs: the connection address and the
/// first audio stream's port, payload types, their `rtpmap`/`fmtp`, `ptime` and direction.
struct SessionDescription: Sendable, Equatable {
    enum Direction: String, Sendable {
        case sendrecv, sendonly, recvonly, inactive

        /// What the answerer says to this offer (RFC 3264 §6.1).
        var answer: Direction {
            switch self {
            case .sendrecv: .sendrecv
            case .sendonly: .recvonly
            case .recvonly: .sendonly
            case .inactive: .inactive
            }
        }
        /// Whether the side that wrote it sends media.
        var sends: Bool { self == .sendrecv || self == .sendonly }
        var receives: Bool { self == .sendrecv || self == .recvonly }
    }

    struct Format: Sendable, Equatable {
        var payloadType: UInt8
        var name: String?
        var clock: Int?
        var channels: Int?
        var fmtp: String?
    }

    var sessionID = "0"
    var version: UInt64 = 0
    var address: String
    var port: Int
    var formats: [Format]
    var direction = Direction.sendrecv
    var ptime: Int?
    var origin = "-"

    struct Problem: Error, Sendable, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// Reads an SDP body; the first `m=audio` line is the call's stream.
    static func parse(_ text: String) throws(Problem) -> SessionDescription {
        var sessionAddress: String?, mediaAddress: String?
        var port: Int?, pts: [UInt8] = [], formats: [UInt8: Format] = [:]
        var sessionDirection: Direction?, mediaDirection: Direction?
        var ptime: Int?, inAudio = false, seenMedia = false, sawVersion = false
        var sessionID = "0", version: UInt64 = 0
        for raw in text.split(whereSeparator: { $0.isNewline }) {
            let line = String(raw)
            guard line.count >= 2, line.dropFirst().first == "=" else { throw Problem(message: "SDP line '\(line.prefix(40))' is not TYPE=VALUE") }
            let type = line.first!, value = String(line.dropFirst(2))
            switch type {
            case "v":
                guard value == "0" else { throw Problem(message: "SDP version \(value) (expected 0)") }
                sawVersion = true
            case "o":
                let f = value.split(separator: " ")
                if f.count >= 3 { sessionID = String(f[1]); version = UInt64(f[2]) ?? 0 }
            case "c":
                let f = value.split(separator: " ")
                guard f.count >= 3, f[0] == "IN", f[1] == "IP4" || f[1] == "IP6" else { throw Problem(message: "SDP connection 'c=\(value)' is not IN IP4|IP6 ADDRESS") }
                let address = String(f[2].split(separator: "/").first ?? f[2])
                if seenMedia { if inAudio { mediaAddress = address } } else { sessionAddress = address }
            case "m":
                seenMedia = true
                let f = value.split(separator: " ")
                inAudio = f.first == "audio" && port == nil
                guard inAudio else { inAudio = false; continue }
                guard f.count >= 4, let p = Int(f[1].split(separator: "/").first ?? ""), (0...65535).contains(p) else {
                    throw Problem(message: "SDP media 'm=\(value)' is not 'audio PORT RTP/AVP PT…'")
                }
                guard f[2].hasPrefix("RTP/AVP") || f[2] == "RTP/SAVP" || f[2].hasPrefix("UDP/TLS") else {
                    throw Problem(message: "SDP media transport \(f[2]) is not RTP/AVP")
                }
                port = p
                for t in f.dropFirst(3) {
                    guard let pt = UInt8(t), pt < 128 else { throw Problem(message: "SDP payload type '\(t)' is not 0…127") }
                    pts.append(pt)
                }
            case "a":
                guard !seenMedia || inAudio else { continue }
                let (name, arg) = value.firstIndex(of: ":").map { (String(value[..<$0]), String(value[value.index(after: $0)...])) } ?? (value, "")
                switch name {
                case "rtpmap":
                    let parts = arg.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, let pt = UInt8(parts[0]) else { continue }
                    let enc = parts[1].split(separator: "/")
                    var f = formats[pt] ?? Format(payloadType: pt)
                    f.name = enc.first.map(String.init)
                    f.clock = enc.count > 1 ? Int(enc[1]) : nil
                    f.channels = enc.count > 2 ? Int(enc[2]) : nil
                    formats[pt] = f
                case "fmtp":
                    let parts = arg.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, let pt = UInt8(parts[0]) else { continue }
                    var f = formats[pt] ?? Format(payloadType: pt)
                    f.fmtp = String(parts[1])
                    formats[pt] = f
                case "ptime": ptime = Int(arg)
                case "sendrecv", "sendonly", "recvonly", "inactive":
                    if seenMedia { mediaDirection = Direction(rawValue: name) } else { sessionDirection = Direction(rawValue: name) }
                default: break
                }
            default: break
            }
        }
        guard sawVersion else { throw Problem(message: "SDP without v=0") }
        guard let port else { throw Problem(message: "SDP without an audio stream (m=audio)") }
        guard let address = mediaAddress ?? sessionAddress else { throw Problem(message: "SDP without a connection address (c=)") }
        var d = SessionDescription(sessionID: sessionID, version: version, address: address, port: port,
                                   formats: pts.map { formats[$0] ?? Format(payloadType: $0) })
        d.direction = mediaDirection ?? sessionDirection ?? .sendrecv
        // An old-style hold: c=0.0.0.0 (RFC 2543).
        if address == "0.0.0.0" && d.direction == .sendrecv { d.direction = .sendonly }
        d.ptime = ptime
        return d
    }

    /// The wire form (what voicepipe offers or answers).
    func text() -> String {
        let ip = address.contains(":") ? "IP6" : "IP4"
        var s = "v=0\r\no=voicepipe \(sessionID) \(version) IN \(ip) \(address)\r\ns=voicepipe\r\nc=IN \(ip) \(address)\r\nt=0 0\r\n"
        s += "m=audio \(port) RTP/AVP \(formats.map { String($0.payloadType) }.joined(separator: " "))\r\n"
        for f in formats {
            if let name = f.name, let clock = f.clock {
                s += "a=rtpmap:\(f.payloadType) \(name)/\(clock)\(f.channels.map { "/\($0)" } ?? "")\r\n"
            }
            if let fmtp = f.fmtp { s += "a=fmtp:\(f.payloadType) \(fmtp)\r\n" }
        }
        if let ptime { s += "a=ptime:\(ptime)\r\n" }
        s += "a=\(direction.rawValue)\r\n"
        return s
    }

    /// The encoding name of a payload type (from `rtpmap`, else RFC 3551's static assignment).
    func encoding(of f: Format) -> (name: String, clock: Int)? {
        if let n = f.name { return (n.lowercased(), f.clock ?? 8000) }
        switch f.payloadType {
        case 0: return ("pcmu", 8000)
        case 8: return ("pcma", 8000)
        case 9: return ("g722", 8000)
        case 13: return ("cn", 8000)
        default: return nil
        }
    }
}

/// The outcome of an offer/answer exchange (RFC 3264) for one call.
struct MediaNegotiation: Sendable, Equatable {
    var codec: TelephoneCodec
    /// The codec's payload type on this call (the offerer's number).
    var payloadType: UInt8
    /// `telephone-event/8000`'s payload type, when both sides have it.
    var telephoneEvent: UInt8?
    /// Comfort noise (PT 13), when offered.
    var comfortNoise: UInt8?
    var ptime: Int
    /// Where to send RTP (until the caller's own packets show another address) and what the caller said it does.
    var remoteAddress: String
    var remotePort: Int
    var remoteDirection: SessionDescription.Direction

    enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// No codec in common: 488.
        case noCommonCodec(offered: [String])
        var description: String {
            switch self {
            case .noCommonCodec(let offered): "no codec in common (offered: \(offered.joined(separator: ", ")))"
            }
        }
    }

    /// Picks the first of `preferences` the offer has (its payload type kept), plus telephone-event.
    static func negotiate(offer: SessionDescription, preferences: [TelephoneCodec]) throws(Failure) -> MediaNegotiation {
        var chosen: (TelephoneCodec, UInt8)?
        for codec in preferences {
            if let f = offer.formats.first(where: { f in
                guard let e = offer.encoding(of: f) else { return false }
                return e.name == codec.rtpmap.name.lowercased() && e.clock == codec.rtpmap.clock
            }) {
                chosen = (codec, f.payloadType)
                break
            }
        }
        guard let (codec, pt) = chosen else {
            throw .noCommonCodec(offered: offer.formats.map { offer.encoding(of: $0)?.name ?? "pt \($0.payloadType)" })
        }
        let te = offer.formats.first { $0.name?.lowercased() == "telephone-event" && ($0.clock ?? 8000) == 8000 }?.payloadType
        let cn = offer.formats.first { offer.encoding(of: $0)?.name == "cn" && offer.encoding(of: $0)?.clock == 8000 }?.payloadType
        let ptime = offer.ptime.map { [10, 20, 30, 40, 60].contains($0) ? $0 : 20 } ?? 20
        return MediaNegotiation(codec: codec, payloadType: pt, telephoneEvent: te, comfortNoise: cn, ptime: ptime,
                                remoteAddress: offer.address, remotePort: offer.port, remoteDirection: offer.direction)
    }

    /// The answer: the chosen codec, telephone-event and CN if offered, our direction for the offer's.
    func answer(address: String, port: Int, sessionID: String, version: UInt64) -> SessionDescription {
        var formats = [SessionDescription.Format(payloadType: payloadType, name: codec.rtpmap.name, clock: codec.rtpmap.clock, channels: codec.rtpmap.channels,
                                                 fmtp: codec == .opus ? "useinbandfec=1" : nil)]
        if let te = telephoneEvent { formats.append(.init(payloadType: te, name: "telephone-event", clock: 8000, fmtp: "0-16")) }
        if let cn = comfortNoise { formats.append(.init(payloadType: cn, name: "CN", clock: 8000)) }
        var d = SessionDescription(sessionID: sessionID, version: version, address: address, port: port, formats: formats)
        d.direction = remoteDirection.answer
        d.ptime = ptime
        return d
    }

    /// The offer voicepipe makes when it places a call: every codec of `preferences` and telephone-event.
    static func offer(preferences: [TelephoneCodec], address: String, port: Int, sessionID: String) -> SessionDescription {
        var formats: [SessionDescription.Format] = []
        var dynamic: UInt8 = 111
        for c in preferences {
            let pt = c.staticPayloadType ?? dynamic
            if c.staticPayloadType == nil { dynamic += 1 }
            formats.append(.init(payloadType: pt, name: c.rtpmap.name, clock: c.rtpmap.clock, channels: c.rtpmap.channels,
                                 fmtp: c == .opus ? "useinbandfec=1" : nil))
        }
        formats.append(.init(payloadType: 101, name: "telephone-event", clock: 8000, fmtp: "0-16"))
        var d = SessionDescription(sessionID: sessionID, version: 1, address: address, port: port, formats: formats)
        d.ptime = 20
        return d
    }
}
