import Foundation
import Logging
import PipelineCore
import Synchronization

/// A file (or standard output) written with POSIX calls, every result checked: a full disk, a
/// closed pipe or an I/O error becomes a ``NodeError`` naming the path, never a silent loss.
/// Partial writes and interrupted calls are retried.
final class FileOutput: @unchecked Sendable {
    /// The path, or `-` for standard output.
    let path: String
    let fd: Int32
    private let owned: Bool
    private var closed = false

    /// Creates (truncates) `path`, or wraps standard output for `-`.
    init(path: String) throws {
        self.path = path
        if path == "-" {
            fd = STDOUT_FILENO
            owned = false
            return
        }
        let dir = (path as NSString).deletingLastPathComponent
        var isDirectory: ObjCBool = false
        if !dir.isEmpty, !FileManager.default.fileExists(atPath: dir, isDirectory: &isDirectory) {
            throw NodeError(.directoryNotFound, "\(path): directory \(dir) does not exist")
        }
        var st = stat()
        if stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFIFO {
            fd = try Self.openFIFO(path)
            isFIFO = true
            owned = true
            return
        }
        let d = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard d >= 0 else {
            let e = errno
            throw NodeError(e == EISDIR ? .pathIsDirectory : .fileUnwritable,
                            "\(path): cannot open for writing: \(String(cString: strerror(e)))")
        }
        fd = d
        owned = true
    }

    /// True for a named pipe: opened and written without blocking, waiting in short polls that
    /// notice when the calling task is cancelled (a stop), so a pipe nobody reads never holds the
    /// process.
    private(set) var isFIFO = false

    private static let logger = Logger(label: "voicepipe")

    /// How long one wait for a pipe's reader lasts before the task is checked for cancellation.
    private static let pollMs: Int32 = 20

    /// Opens a named pipe for writing, waiting for a reader to open it (or the task to be cancelled).
    private static func openFIFO(_ path: String) throws -> Int32 {
        var noticed = false
        while true {
            let d = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            if d >= 0 { return d }
            let e = errno
            guard e == ENXIO || e == EINTR else {
                throw NodeError(.fileUnwritable, "\(path): cannot open the pipe for writing: \(String(cString: strerror(e)))")
            }
            if Task.isCancelled {
                throw NodeError(.outputBlocked, "\(path): no reader opened the pipe before the pipeline stopped; nothing was written")
            }
            if !noticed {
                noticed = true
                Self.logger.notice("\(path): waiting for a reader to open the pipe")
            }
            usleep(useconds_t(pollMs) * 1000)
        }
    }

    /// Waits until a pipe written without blocking has room again; throws once the task is cancelled.
    private func waitWritable() throws {
        var waited: Int32 = 0
        while true {
            if waited == 1000 { Self.logger.warning("\(path): the reader of the pipe is not reading; output waits") }
            if Task.isCancelled {
                throw NodeError(.outputBlocked, "\(path): the reader of the pipe stopped reading; the output is incomplete")
            }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let r = poll(&p, 1, Self.pollMs)
            if r > 0 { return }
            waited += Self.pollMs
            if r < 0 && errno != EINTR { throw failure(errno) }
        }
    }

    /// Writes all of `bytes` at the current position.
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < bytes.count {
            let n = Foundation.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN && isFIFO { try waitWritable(); continue }
                throw failure(errno)
            }
            done += n
        }
    }

    /// Writes `data` at the current position.
    func write(_ data: Data) throws {
        try data.withUnsafeBytes { try write($0) }
    }

    /// Writes `data` at `offset` without moving the position.
    func write(_ data: Data, at offset: Int64) throws {
        try data.withUnsafeBytes { bytes in
            var done = 0
            while done < bytes.count {
                let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
                if n < 0 {
                    if errno == EINTR { continue }
                    if errno == ESPIPE { return }   // a pipe: what was written cannot be rewritten
                    throw failure(errno)
                }
                done += n
            }
        }
    }

    /// Flushes to the device and closes (standard output is flushed, not closed). A failure of
    /// either is reported: some file systems report a full disk only here.
    func close() throws {
        guard !closed else { return }
        closed = true
        guard owned else { return }
        let synced = fsync(fd) == 0 || errno == EINVAL || errno == EROFS   // pipes and devices cannot sync
        let syncError = errno
        let r = Foundation.close(fd)
        let closeError = errno
        if !synced { throw failure(syncError) }
        if r != 0 && closeError != EINTR { throw failure(closeError) }
    }

    func failure(_ e: Int32) -> NodeError {
        let what = path == "-" ? "standard output" : path
        switch e {
        case EPIPE: return NodeError(.outputClosed, "\(what): the reader went away (broken pipe)")
        case ENOSPC: return NodeError(.diskFull, "\(what): no space left on device; the output is incomplete")
        case EDQUOT: return NodeError(.diskFull, "\(what): disk quota exceeded; the output is incomplete")
        default: return NodeError(.writeFailed, "\(what): write failed: \(String(cString: strerror(e)))")
        }
    }

    deinit { if owned && !closed { Foundation.close(fd) } }
}
