import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A file copy of the messages a ``JetStreamPublisher`` holds, so that events held while NATS is away
/// outlive the process: a worker that crashes (or is stopped) during an outage leaves its file behind,
/// and the next publisher started on the same directory adopts it and sends what it holds, under the
/// original message ids (the stream's duplicate window drops what had in fact been stored).
///
/// One file per publisher, `<directory>/<name>.spool`, locked (`flock`) while its process lives, so a
/// live publisher's file is never adopted. A line per record: `{"i":id,"s":subject,"p":base64}` when a
/// message is queued, `{"d":id}` when it is settled (acknowledged, refused for good, or dropped for room).
/// The file is emptied whenever nothing is held, so it stays as small as the backlog. Lines are written
/// with one `write` each (no `fsync`): a killed process loses nothing, a machine that loses power may
/// lose the last lines. A torn last line is ignored.
final class PublishSpool: @unchecked Sendable {
    let path: String
    private var fd: Int32
    private var bytes = 0
    /// Settled records since the file last started over: when they outnumber `rewriteAfter`, the file is
    /// rewritten with only what is held (a long outage with drops would otherwise grow it without end).
    private var settledRecords = 0
    /// Settled records not yet written.
    private var pendingSettled: [UInt8] = []
    let rewriteAfter: Int

    /// Creates (and locks) this publisher's file.
    init(directory: String, name: String, rewriteAfter: Int = 10_000) throws {
        self.rewriteAfter = max(16, rewriteAfter)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw NATSError.spool("cannot create the spool directory \(directory): \(error.localizedDescription)")
        }
        path = (directory as NSString).appendingPathComponent(name + ".spool")
        fd = try Self.openLocked(path)
    }

    private static func openLocked(_ path: String) throws -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw NATSError.spool("cannot open \(path): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw NATSError.spool("cannot lock \(path): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    deinit { if fd >= 0 { close(fd) } }

    /// The publisher ended: the file stays (if it holds anything) and becomes adoptable.
    func release() {
        guard fd >= 0 else { return }
        flush()
        close(fd)
        fd = -1
    }

    /// A message queued: written at once (a process killed the next instant has it on file).
    func append(_ m: OutboundMessage) {
        var line: [UInt8] = []
        line.reserveCapacity(m.payload.count * 4 / 3 + m.id.utf8.count + m.subject.utf8.count + 24)
        line += Array(#"{"i":"#.utf8)
        Self.quote(m.id, into: &line)
        line += Array(#","p":""#.utf8)
        line += Array(Data(m.payload).base64EncodedString().utf8)
        line += Array(#"","s":"#.utf8)
        Self.quote(m.subject, into: &line)
        line += Array("}\n".utf8)
        writeAll(line)
    }

    /// A message settled: not to be sent again. `held` gives what is still held, should the file be rewritten.
    /// Settled records are written in batches (``flush()``, or when 64 KiB wait): one lost in a crash only
    /// means that message is sent again, and the stream drops the copy.
    func settled(_ id: String, held: () -> [OutboundMessage]) {
        pendingSettled += Array(#"{"d":"#.utf8)
        Self.quote(id, into: &pendingSettled)
        pendingSettled += Array("}\n".utf8)
        settledRecords += 1
        if settledRecords > rewriteAfter { rewrite(held()) }
        else if pendingSettled.count >= 65_536 { flush() }
    }

    /// Writes the settled records that wait.
    func flush() {
        guard !pendingSettled.isEmpty else { return }
        writeAll(pendingSettled)
        pendingSettled.removeAll(keepingCapacity: true)
    }

    /// Nothing is held: start the file over.
    func reset() {
        pendingSettled.removeAll(keepingCapacity: true)
        guard fd >= 0, bytes > 0 else { return }
        _ = ftruncate(fd, 0)
        bytes = 0
        settledRecords = 0
    }

    /// Replaces the file with one holding only `messages` (written aside, then renamed over it, so a crash
    /// meanwhile leaves one whole file or the other).
    func rewrite(_ messages: [OutboundMessage]) {
        guard fd >= 0 else { return }
        let temporary = path + ".new"
        guard let newFD = try? Self.openLocked(temporary) else { return }
        let old = fd
        fd = newFD
        bytes = 0
        settledRecords = 0
        pendingSettled.removeAll(keepingCapacity: true)
        for m in messages { append(m) }
        guard rename(temporary, path) == 0 else {
            // Keep the old file; drop the new one.
            close(newFD)
            _ = unlink(temporary)
            fd = old
            return
        }
        close(old)
    }

    /// The publisher ended with nothing held: the file goes.
    func remove() {
        _ = unlink(path)
    }

    private func writeAll(_ bytes: [UInt8]) {
        guard fd >= 0 else { return }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            offset += n
        }
        self.bytes += offset
    }

    /// A JSON string literal.
    static func quote(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), b]
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 15)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The messages still held in a spool file's text, in order (settled ones and a torn last line left out).
    static func pending(in text: String) -> [OutboundMessage] {
        var order: [String] = []
        var messages: [String: OutboundMessage] = [:]
        for line in text.split(separator: "\n") {
            guard let o = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: String] else { continue }
            if let id = o["d"] {
                messages[id] = nil
            } else if let id = o["i"], let subject = o["s"], let p = o["p"], let payload = Data(base64Encoded: p) {
                if messages[id] == nil { order.append(id) }
                messages[id] = OutboundMessage(subject: subject, payload: Array(payload), id: id)
            }
        }
        return order.compactMap { messages.removeValue(forKey: $0) }
    }

    /// Spool files in `directory` that no live process holds (their publisher ended or died): each one's
    /// pending messages, and a function that deletes the file once they are safely queued elsewhere.
    static func orphans(in directory: String, except own: String?) -> [(path: String, messages: [OutboundMessage], remove: () -> Void)] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var found: [(String, [OutboundMessage], () -> Void)] = []
        // A rewrite interrupted by a crash leaves a partial `.spool.new` beside the whole `.spool`.
        for name in names where name.hasSuffix(".spool.new") {
            let path = (directory as NSString).appendingPathComponent(name)
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            if fd >= 0 { if flock(fd, LOCK_EX | LOCK_NB) == 0 { _ = unlink(path) }; close(fd) }
        }
        for name in names.sorted() where name.hasSuffix(".spool") {
            let path = (directory as NSString).appendingPathComponent(name)
            if path == own { continue }
            let fd = open(path, O_RDWR | O_CLOEXEC)
            guard fd >= 0 else { continue }
            // Locked: its publisher is alive.
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { close(fd); continue }
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            found.append((path, pending(in: text), { _ = unlink(path); close(fd) }))
        }
        return found
    }
}
