import Foundation

/// A text message from the real-time recognition service:
/// `{"code": 0, "message": "success", "voice_id": "...", "message_id": "...", "result": {...}, "final": 1}`.
public struct TencentServerMessage: Sendable, Decodable, Equatable {
    /// 0 = fine; anything else is an error, after which the server closes the connection.
    public var code: Int
    /// What happened, for a person.
    public var message: String
    /// The connection's voice id.
    public var voiceID: String?
    /// This message's id.
    public var messageID: String?
    /// The latest recognition result.
    public var result: TencentResult?
    /// True when the whole stream has been recognized (`final: 1`).
    public var isFinal: Bool

    enum CodingKeys: String, CodingKey {
        case code, message, result, final
        case voiceID = "voice_id"
        case messageID = "message_id"
    }

    /// Creates a message.
    public init(code: Int, message: String, voiceID: String? = nil, messageID: String? = nil, result: TencentResult? = nil, isFinal: Bool = false) {
        self.code = code
        self.message = message
        self.voiceID = voiceID
        self.messageID = messageID
        self.result = result
        self.isFinal = isFinal
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        code = try c.decodeLoose(.code) ?? 0
        message = try c.decodeIfPresent(String.self, forKey: .message) ?? ""
        voiceID = try c.decodeIfPresent(String.self, forKey: .voiceID)
        messageID = try c.decodeIfPresent(String.self, forKey: .messageID)
        result = try c.decodeIfPresent(TencentResult.self, forKey: .result)
        isFinal = (try c.decodeLoose(.final) ?? 0) == 1
    }

    /// Parses one text message.
    public static func parse(_ text: String) throws -> TencentServerMessage {
        try JSONDecoder().decode(TencentServerMessage.self, from: Data(text.utf8))
    }

    /// What the documented error codes mean.
    public static func describe(code: Int) -> String {
        switch code {
        case 4000: "audio sent faster than the service accepts (at most 3 s of audio per second)"
        case 4001: "invalid parameter"
        case 4002: "authentication failed (check the secret id, secret key and the clock)"
        case 4003: "the service is not enabled for this AppID"
        case 4004: "no free quota left"
        case 4005: "the account is in arrears"
        case 4006: "too many concurrent connections for this account"
        case 4007: "audio decoding failed (the audio does not match voice_format)"
        case 4008: "the client sent no audio for more than 15 s"
        case 4009: "the client connection was closed"
        case 4010: "the client sent an unknown text message"
        case 5000, 5001, 5002: "server error (load or network), retry"
        case 6001: "called from outside mainland China: use the international endpoint"
        default: "error"
        }
    }

    /// Codes after which reconnecting cannot help: parameters, credentials, account, an audio
    /// format the service cannot decode, a message it does not know, a region it refuses.
    public static func isFatal(code: Int) -> Bool { (4001...4005).contains(code) || [4007, 4010, 6001].contains(code) }
}

/// The `result` of a server message.
public struct TencentResult: Sendable, Decodable, Equatable {
    /// 0 = an utterance begins, 1 = a partial (unstable) text, 2 = the utterance's final text.
    public var sliceType: Int
    /// Index of the utterance within the connection.
    public var index: Int
    /// Start of the utterance, in ms of audio sent on this connection.
    public var startTime: Int64
    /// End of the recognized audio, in ms of audio sent on this connection.
    public var endTime: Int64
    /// The text.
    public var text: String
    /// Number of words in ``words``.
    public var wordSize: Int
    /// Word timings (`word_list`, with `word_info` set).
    public var words: [TencentWord]

    enum CodingKeys: String, CodingKey {
        case sliceType = "slice_type", index, startTime = "start_time", endTime = "end_time"
        case text = "voice_text_str", wordSize = "word_size", words = "word_list"
    }

    /// Creates a result.
    public init(sliceType: Int, index: Int, startTime: Int64, endTime: Int64, text: String, wordSize: Int = 0, words: [TencentWord] = []) {
        self.sliceType = sliceType
        self.index = index
        self.startTime = startTime
        self.endTime = endTime
        self.text = text
        self.wordSize = wordSize
        self.words = words
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        sliceType = try c.decodeLoose(.sliceType, in: 0...2) ?? 1
        index = try c.decodeLoose(.index, in: 0...Int(Int32.max)) ?? 0
        // Times count milliseconds of audio on one connection: anything outside 0...10^10 ms (115
        // days) is a broken or hostile server, refused before it reaches media-time arithmetic.
        startTime = Int64(try c.decodeLoose(.startTime, in: 0...Self.maximumTimeMs) ?? 0)
        endTime = Int64(try c.decodeLoose(.endTime, in: 0...Self.maximumTimeMs) ?? 0)
        text = try c.decodeIfPresent(String.self, forKey: .text) ?? ""
        wordSize = try c.decodeLoose(.wordSize, in: 0...1_000_000) ?? 0
        words = try c.decodeIfPresent([TencentWord].self, forKey: .words) ?? []
        guard words.count <= 100_000 else {
            throw DecodingError.dataCorruptedError(forKey: .words, in: c, debugDescription: "`word_list` has \(words.count) entries")
        }
    }

    /// Largest `start_time` / `end_time` accepted, in milliseconds.
    public static let maximumTimeMs = 10_000_000_000
}

/// One entry of a result's `word_list`: `{"word": "...", "start_time": 0, "end_time": 240, "stable_flag": 1}`,
/// times in milliseconds from the start of the result's sentence.
public struct TencentWord: Sendable, Decodable, Equatable {
    /// The word.
    public var word: String
    /// Start, in ms from the sentence's start.
    public var startTime: Int64
    /// End, in ms from the sentence's start.
    public var endTime: Int64
    /// 1 once the service will not change the word.
    public var stable: Bool

    enum CodingKeys: String, CodingKey {
        case word, startTime = "start_time", endTime = "end_time", stable = "stable_flag"
    }

    /// Creates a word.
    public init(word: String, startTime: Int64, endTime: Int64, stable: Bool) {
        self.word = word
        self.startTime = startTime
        self.endTime = endTime
        self.stable = stable
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        word = try c.decodeIfPresent(String.self, forKey: .word) ?? ""
        startTime = Int64(try c.decodeLoose(.startTime, in: 0...TencentResult.maximumTimeMs) ?? 0)
        endTime = Int64(try c.decodeLoose(.endTime, in: 0...TencentResult.maximumTimeMs) ?? 0)
        stable = (try c.decodeLoose(.stable, in: 0...1) ?? 0) == 1
    }
}

extension KeyedDecodingContainer {
    /// An integer given as a number or as a string of digits; absent or null is `nil`. Anything
    /// else — a fraction, a number out of range, text — is a decoding error, never a default.
    package func decodeLoose(_ key: Key, in range: ClosedRange<Int>? = nil) throws -> Int? {
        guard contains(key), (try? decodeNil(forKey: key)) != true else { return nil }
        let value: Int
        if let i = try? decode(Int.self, forKey: key) {
            value = i
        } else if let s = try? decode(String.self, forKey: key), let i = Int(s.trimmingCharacters(in: .whitespaces)) {
            value = i
        } else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "`\(key.stringValue)` is not an integer")
        }
        if let range, !range.contains(value) {
            throw DecodingError.dataCorruptedError(forKey: key, in: self,
                                                   debugDescription: "`\(key.stringValue)` \(value) is outside \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }
}
