import Foundation
import Nodes
import PipelineCore

/// Process-wide signal handling, installed first thing in ``Voicepipe/main(registry:commands:arguments:)``.
///
/// SIGINT, SIGTERM, SIGHUP and every other signal that would end the process (``stopSignals``)
/// are caught from the start: the C handler only writes the signal
/// number to a pipe (async-signal-safe) and a dedicated thread acts on it, so exactly one action
/// happens per signal delivered. SIGPIPE is ignored: a closed pipe is an error on the write that
/// hit it, reported by the node that wrote, not a silent death of the process.
///
/// - While `voicepipe run` has pipelines running, the first signal asks them to stop gracefully
///   (sources stop, queues drain, sinks finalize); a signal that arrives during start-up or while
///   the graphs are still loading is held and acted on as soon as they start.
/// - A second signal, or a signal outside a run, exits at once with 128 + the signal number, after
///   rewriting the header of every WAV file still open so it matches the samples written.
enum SignalCenter {
    private struct State {
        var installed = false
        var holding = true
        var pending: Int32?
        var received = 0
        var action: (@Sendable () -> Void)?
    }
    private static let state = LockedValue(State())
    nonisolated(unsafe) static var writeEnd: Int32 = -1

    /// Installs the handlers (once per process).
    static func install() {
        let first = state.withLock { s -> Bool in defer { s.installed = true }; return !s.installed }
        guard first else { return }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        writeEnd = fds[1]
        let readEnd = fds[0]
        signal(SIGPIPE, SIG_IGN)
        for sig in stopSignals {
            var action = sigaction()
            #if os(Linux)
            action.__sigaction_handler.sa_handler = { sig in
                var byte = UInt8(truncatingIfNeeded: sig)
                _ = write(SignalCenter.writeEnd, &byte, 1)
            }
            #else
            action.__sigaction_u.__sa_handler = { sig in
                var byte = UInt8(truncatingIfNeeded: sig)
                _ = write(SignalCenter.writeEnd, &byte, 1)
            }
            #endif
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(sig, &action, nil)
        }
        let thread = Thread {
            var byte: UInt8 = 0
            while true {
                let n = read(readEnd, &byte, 1)
                if n < 0 && errno == EINTR { continue }
                guard n == 1 else { return }
                handle(Int32(byte))
            }
        }
        thread.name = "voicepipe-signals"
        thread.start()
    }

    /// Every signal whose default action ends the process, so that none of them (SIGUSR1, SIGALRM,
    /// a real-time signal...) leaves a WAV header at zero length: each is handled as SIGTERM is.
    /// Signals that report a fault in the process itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT,
    /// SIGSYS, SIGTRAP) keep their default action, and SIGPIPE is ignored.
    static var stopSignals: [Int32] {
        var list = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
                    SIGIO, SIGPWR, SIGSTKFLT, SIGXCPU, SIGXFSZ]
        list += Array(__libc_current_sigrtmin()...__libc_current_sigrtmax())
        return list
    }

    private enum Decision { case act(@Sendable () -> Void), hold, exit }

    private static func handle(_ sig: Int32) {
        let decision = state.withLock { s -> Decision in
            s.received += 1
            if s.received > 1 { return .exit }
            if let a = s.action { return .act(a) }
            if s.holding { s.pending = sig; return .hold }
            return .exit
        }
        switch decision {
        case .act(let a): a()
        case .hold: break
        case .exit:
            let second = state.withLock { $0.received > 1 }
            WAVWriter.finalizeAllForExit()
            if second { FileHandle.standardError.write(Data("\nvoicepipe: second signal, exiting at once\n".utf8)) }
            // At once means without exit handlers and library destructors: the pipelines may be ending
            // on another thread, which runs those itself, and two threads tearing libraries down at
            // once (a decoder still running in whisper.cpp's ggml) crashes. Buffered output is flushed.
            fflush(nil)
            _exit(128 + sig)
        }
    }

    /// From now on a first signal is held until ``onFirstSignal(_:)`` names what to do.
    static func hold() {
        state.withLock { $0.holding = true }
    }

    /// The graceful action for the first signal; runs at once if one is already held.
    static func onFirstSignal(_ action: @escaping @Sendable () -> Void) {
        let pending = state.withLock { s -> Bool in
            s.action = action
            defer { s.pending = nil }
            return s.pending != nil
        }
        if pending { action() }
    }

    /// Back to "a signal exits at once" (the pipelines have ended).
    static func release() {
        state.withLock { s in
            s.action = nil
            s.holding = false
            s.pending = nil
        }
    }

    /// For commands that never run pipelines: a signal held since start-up exits now, and later
    /// ones exit at once.
    static func releaseForNonRunCommand() {
        let pending = state.withLock { s -> Int32? in
            s.holding = false
            defer { s.pending = nil }
            return s.pending
        }
        if let pending {
            WAVWriter.finalizeAllForExit()
            exit(128 + pending)
        }
    }
}
