import Foundation
import PipelineCore

/// A simple energy endpointer for the `asr` node when its input carries no VAD or slicer marks.
///
/// A pure state machine: feed it chunks of audio with ``push(_:)`` and it returns what to do, in
/// order — pass audio on, begin an utterance, end one. Chunks are held back for `preRollMs` while
/// nothing is heard, so an utterance begins a little before the level rose.
///
/// A chunk counts as voiced when its level is `marginDB` above a slowly tracked noise floor and
/// above `minimumDB`; an utterance starts after `startMs` of voiced audio and ends after
/// `silenceMs` without.
struct ASREndpointer {
    /// What the caller does next.
    enum Action: Equatable {
        case audio(index: Int)
        case start(index: Int)
        case end
    }

    var startMs: Int64 = 60
    var silenceMs: Int64 = 600
    var preRollMs: Int64 = 300
    var marginDB: Double = 15
    var minimumDB: Double = -50

    private(set) var inSpeech = false
    private var floorDB: Double = -60
    private var voicedMs: Int64 = 0
    private var silentMs: Int64 = 0
    /// Held chunks (index, duration, voiced), oldest first.
    private var held: [(index: Int, ms: Int64)] = []
    private var nextIndex = 0

    init(silenceMs: Int64 = 600) {
        self.silenceMs = silenceMs
    }

    /// Handles the next chunk (numbered in call order from 0) of `durationMs` at `levelDB` dBFS.
    /// Returns actions referring to chunks by their index.
    mutating func push(levelDB: Double, durationMs: Int64) -> [Action] {
        let index = nextIndex
        nextIndex += 1
        let voiced = levelDB > max(floorDB + marginDB, minimumDB)
        if !voiced {
            // Track the floor: fall at once, rise slowly.
            floorDB = levelDB < floorDB ? max(levelDB, -90) : floorDB + 0.02 * (levelDB - floorDB)
        }
        var actions: [Action] = []
        if inSpeech {
            actions.append(.audio(index: index))
            silentMs = voiced ? 0 : silentMs + durationMs
            if silentMs >= silenceMs {
                actions.append(.end)
                inSpeech = false
                voicedMs = 0
                silentMs = 0
            }
            return actions
        }
        held.append((index, durationMs))
        voicedMs = voiced ? voicedMs + durationMs : 0
        if voicedMs >= startMs {
            inSpeech = true
            silentMs = 0
            // Keep the pre-roll before the voiced run; release older chunks as plain audio.
            var keepMs: Int64 = 0
            var firstKept = held.count
            for i in held.indices.reversed() {
                if keepMs >= voicedMs + preRollMs { break }
                keepMs += held[i].ms
                firstKept = i
            }
            for h in held[..<firstKept] { actions.append(.audio(index: h.index)) }
            actions.append(.start(index: held[firstKept].index))
            for h in held[firstKept...] { actions.append(.audio(index: h.index)) }
            held.removeAll()
            return actions
        }
        var total = held.reduce(0) { $0 + $1.ms }
        while held.count > 1, total - held[0].ms >= preRollMs + voicedMs {
            total -= held[0].ms
            actions.append(.audio(index: held.removeFirst().index))
        }
        return actions
    }

    /// End of stream: releases held chunks and ends an open utterance.
    mutating func finish() -> [Action] {
        var actions = held.map { Action.audio(index: $0.index) }
        held.removeAll()
        if inSpeech { actions.append(.end); inSpeech = false }
        return actions
    }

    /// Level of s16 samples in dBFS (AES17: a full-scale sine reads 0; silence reads -100).
    static func level(_ samples: [Int16]) -> Double {
        guard !samples.isEmpty else { return -100 }
        var sum = 0.0
        for s in samples { let x = Double(s); sum += x * x }
        let rms = (sum / Double(samples.count)).squareRoot()
        guard rms > 0 else { return -100 }
        return max(20 * log10(rms / 32768) + 3.0103, -100)
    }
}
