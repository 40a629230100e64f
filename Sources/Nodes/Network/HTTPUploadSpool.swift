import Foundation
import PipelineCore

/// Where `http-upload` keeps a copy of what it streams (`spool_dir`), so a failed upload can be
/// sent again later — also by the next run, which picks up files left behind.
///
/// A recording is written to `voicepipe-upload-<ms>-<n>.<ext>.part` while it streams, and renamed
/// to `...<ext>` when complete (a WAV gets its real sizes in the header). A successful upload
/// deletes its file; a failed one stays until a retry succeeds.
struct HTTPUploadSpool: Sendable {
    let directory: String
    static let prefix = "voicepipe-upload-"

    /// Checks the directory (creating it if needed).
    init(directory: String) throws {
        var isDir: ObjCBool = false
        if !FileManager.default.fileExists(atPath: directory, isDirectory: &isDir) {
            do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
                throw NodeError(.spoolUnwritable, "spool_dir \(directory): cannot create the directory (\(error.localizedDescription))")
            }
        } else if !isDir.boolValue {
            throw NodeError(.spoolUnwritable, "spool_dir \(directory): not a directory")
        }
        self.directory = directory
    }

    /// Starts a new recording.
    func create(format: HTTPUploadFormat, index: Int) throws -> HTTPUploadSpoolFile {
        let ms = Int64(Date().timeIntervalSince1970 * 1000)
        let name = "\(Self.prefix)\(ms)-\(index)-\(UInt32.random(in: 0...UInt32.max)).\(format.fileExtension)"
        return try HTTPUploadSpoolFile(path: (directory as NSString).appendingPathComponent(name) + ".part", format: format)
    }

    /// Complete recordings waiting to be uploaded (oldest first). Unfinished `.part` files left
    /// by a crash are completed first, so their audio is not lost either.
    func pending() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var out: [String] = []
        for name in names.sorted() where name.hasPrefix(Self.prefix) {
            let path = (directory as NSString).appendingPathComponent(name)
            if name.hasSuffix(".part") {
                let done = String(path.dropLast(5))
                if (try? FileManager.default.moveItem(atPath: path, toPath: done)) != nil { out.append(done) }
            } else if HTTPUploadFormat.allCases.contains(where: { name.hasSuffix("." + $0.fileExtension) }) {
                out.append(path)
            }
        }
        return out
    }
}

/// One spooled recording being written.
final class HTTPUploadSpoolFile {
    private let handle: FileHandle
    private let partPath: String
    /// Path of the complete recording.
    let path: String
    let format: HTTPUploadFormat
    private(set) var bytes: UInt64 = 0
    private var closed = false

    init(path partPath: String, format: HTTPUploadFormat) throws {
        guard FileManager.default.createFile(atPath: partPath, contents: nil), let h = FileHandle(forWritingAtPath: partPath) else {
            throw NodeError(.spoolUnwritable, "\(partPath): cannot create the spool file")
        }
        handle = h
        self.partPath = partPath
        self.path = String(partPath.dropLast(5))
        self.format = format
    }

    func write(_ data: [UInt8]) throws {
        try handle.write(contentsOf: Data(data))
        bytes += UInt64(data.count)
    }

    /// Closes the recording (a WAV gets its real sizes) and gives it its final name.
    func finish(audioFormat: AudioFormat?) throws {
        guard !closed else { return }
        closed = true
        if format == .wav, let f = audioFormat, bytes >= 44 {
            try handle.seek(toOffset: 0)
            try handle.write(contentsOf: Data(HTTPUploadEncoder.wavHeader(format: f, dataBytes: UInt32(min(bytes - 44, UInt64(UInt32.max - 36))))))
        }
        try handle.close()
        try FileManager.default.moveItem(atPath: partPath, toPath: path)
    }

    deinit { if !closed { try? handle.close() } }
}
