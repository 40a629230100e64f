import Foundation
import Testing
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes
import VoicepipeTesting

@Suite("IVH protocol: signature, packets, pushes, error codes")
struct IVHProtocolTests {
    @Test func documentedSignatureVector() {
        let params = ["appkey": "e38267c0e86411ebb02aed82acb0ed99", "timestamp": "1646636485"]
        #expect(IVHSignature.canonical(params) == "appkey=e38267c0e86411ebb02aed82acb0ed99&timestamp=1646636485")
        #expect(IVHSignature.sign(params, accessToken: "f68f2d10ae9e4604b76fb05cf46bccec") == "BfWuaC9kmaicCggXc693uK+sZQ8qe88O4HVQNTdwZuo=")
        let query = IVHSignature.query(appkey: "e38267c0e86411ebb02aed82acb0ed99", accessToken: "f68f2d10ae9e4604b76fb05cf46bccec", timestamp: 1646636485)
        #expect(query == "appkey=e38267c0e86411ebb02aed82acb0ed99&timestamp=1646636485&signature=BfWuaC9kmaicCggXc693uK%2BsZQ8qe88O4HVQNTdwZuo%3D")
    }

    @Test func requestIDIsSignedInSortedOrder() {
        let params = ["timestamp": "1", "requestid": "m123", "appkey": "k", "signature": "ignored"]
        #expect(IVHSignature.canonical(params) == "appkey=k&requestid=m123&timestamp=1")
        let q = IVHSignature.query(appkey: "k", accessToken: "t", timestamp: 1, requestID: "m123")
        #expect(q.hasPrefix("appkey=k&requestid=m123&timestamp=1&signature="))
        let sig = String(q.split(separator: "=", maxSplits: 4).last!)
        #expect(!sig.contains("+") && !sig.contains("/"))
        #expect(sig.removingPercentEncoding == IVHSignature.sign(params, accessToken: "t"))
    }

    @Test func packetsAreFixedSizeNumberedAndEndWithFinal() {
        var p = AudioPacketizer(packetBytes: 6400, makeID: { "utt" })
        var out: [IVHCommand] = []
        for _ in 0..<16 { out += p.push([UInt8](repeating: 1, count: 640), endsUtterance: false) }   // 10,240 bytes
        #expect(out.count == 1)
        out += p.push([UInt8](repeating: 2, count: 640), endsUtterance: true)                          // 10,880 in all
        let packets = out.compactMap { c -> (Int, Int, Bool)? in
            if case .audio(_, let seq, let pcm, let final) = c { return (seq, pcm.count, final) }
            return nil
        }
        // The audio, then a separate, empty packet with IsFinal, as the audio-driving page requires.
        #expect(packets.map(\.0) == [1, 2, 3])
        #expect(packets.map(\.1) == [6400, 4480, 0])
        #expect(packets.map(\.2) == [false, false, true])
        // A new utterance starts again from 1; an exact multiple is followed by the empty final packet too.
        let next = p.push([UInt8](repeating: 3, count: 12800), endsUtterance: true)
        #expect(next.map { if case .audio(_, let s, let b, let f) = $0 { "\(s):\(b.count):\(f)" } else { "" } } == ["1:6400:false", "2:6400:false", "3:0:true"])
        // End of stream with an utterance open sends an empty final packet.
        _ = p.push([UInt8](repeating: 4, count: 6400), endsUtterance: false)
        let tail = p.finish()
        #expect(tail.map { if case .audio(_, let s, let b, let f) = $0 { "\(s):\(b.count):\(f)" } else { "" } } == ["2:0:true"])
        #expect(p.finish().isEmpty)
    }

    @Test func samplesAreLittleEndian() {
        #expect(AudioPacketizer.bytes([0x0102, -2]) == [0x02, 0x01, 0xFE, 0xFF])
    }

    @Test func commandsEncodeTheDocumentedShape() throws {
        let json = IVHCommand.audio(reqID: "r1", seq: 3, pcm: [1, 2, 3, 4], isFinal: true).json(sessionID: "m1")
        let root = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(root["Header"] is [String: Any])
        let p = try #require(root["Payload"] as? [String: Any])
        #expect(p["Command"] as? String == "SEND_AUDIO")
        #expect(p["SessionId"] as? String == "m1")
        #expect(p["ReqId"] as? String == "r1")
        let d = try #require(p["Data"] as? [String: Any])
        #expect(d["Audio"] as? String == Data([1, 2, 3, 4]).base64EncodedString())
        #expect(d["Seq"] as? Int == 3)
        #expect(d["IsFinal"] as? Bool == true)
        let hb = try #require(try JSONSerialization.jsonObject(with: Data(IVHCommand.heartbeat.json(sessionID: "m1").utf8)) as? [String: Any])
        #expect(((hb["Payload"] as? [String: Any])?["Data"] as? [String: Any])?["Text"] as? String == "PING")
        #expect(IVHCommand.audio(reqID: "r", seq: 1, pcm: [UInt8](repeating: 0, count: 6400), isFinal: false).audioDuration == .milliseconds(200))
    }

    @Test func pushesDecode() {
        func wrap(_ payload: String) -> String { #"{"Header":{"Code":0},"Payload":"# + payload + "}" }
        #expect(IVHPush.decode(wrap(#"{"Type":1,"Text":"hi","SessionId":"m"}"#)) == .inputText("hi"))
        #expect(IVHPush.decode(wrap(#"{"Type":2,"Text":"<s>x</s>","TextDisplay":"x","SpeechId":4}"#)) == .speechText("x", speechID: 4))
        #expect(IVHPush.decode(wrap(#"{"Type":3,"SpeakStatus":"speak_start","SpeechId":4}"#)) == .speakStatus("speak_start", speechID: 4))
        #expect(IVHPush.decode(#"{"Type":3,"SpeakStatus":"speak_over"}"#) == .speakStatus("speak_over", speechID: nil))
        #expect(IVHPush.decode(wrap(#"{"Type":5,"Text":"risky"}"#)) == .riskNotice("risky"))
        #expect(IVHPush.decode(wrap(#"{"Type":7,"Text":"dropped"}"#)) == .discardedText("dropped"))
        #expect(IVHPush.decode(#"{"Header":{"Code":110013,"Message":"closed"},"Payload":{}}"#) == .error(code: 110013, message: "closed"))
        #expect(IVHPush.decode("not json") == nil)
    }

    @Test func errorCodesCarryTheirDocumentedMeaning() {
        #expect(IVHError(.api(100008), "", operation: "newsession").description.contains("over quota"))
        #expect(IVHError(.api(110006), "", operation: "closesession").description.contains("no such session"))
        #expect(IVHError(.api(100005), "sig", operation: "x").description.contains("no permission"))
        for code in [100009, 110001, 110002, 110004, 110005, 110007, 110008] {
            #expect(IVHResultCode.table[code] != nil, "\(code) has its documented meaning")
        }
        #expect(IVHError(.api(100008), "", operation: "newsession").stableCode == "ivh_100008")
        #expect(IVHResultCode.meaning(424242).text == "unknown error code")
    }

    @Test func driverTypesParse() {
        #expect(IVHDriverType(name: "text") == .text)
        #expect(IVHDriverType(name: "2") == .audio)
        #expect(IVHDriverType(name: "VOICE") == .voice)
        #expect(IVHDriverType(name: "video") == nil)
        #expect(!IVHDriverType.text.acceptsAudio)
    }
}

@Suite("avatar driving rules")
struct DrivingGateTests {
    static func summary(_ packets: [IVHCommand]) -> [String] {
        packets.map { if case .audio(_, let s, let b, let f) = $0 { "\(s):\(b.count):\(f)" } else { $0.name } }
    }

    @Test func audioWaitsForSpeakOverAfterAnInterrupt() async {
        let clock = ManualClock()
        let gate = DrivingGate(packetBytes: 640, maxWait: .seconds(5), clock: clock)
        await gate.observe(.speakStatus("speak_start", speechID: 1), details: [:])
        await gate.interrupted()
        async let packets = gate.audio([UInt8](repeating: 1, count: 640), endsUtterance: false)
        // The audio waits on the node's clock; 300 ms pass and it still waits.
        #expect(await clock.waitForSleepers(1))
        for _ in 0..<30 { await clock.advance(by: .milliseconds(10), waitingFor: 1) }
        #expect(await clock.waitForSleepers(1), "audio left before speak_over")
        await gate.observe(.speakStatus("speak_over", speechID: 1), details: [:])
        clock.advance(by: .milliseconds(10))
        #expect(Self.summary(await packets) == ["1:640:false"])
        #expect(clock.now.offset < .seconds(5), "audio left at speak_over, not at the time limit")
    }

    @Test func withoutSpeakOverAudioLeavesAtTheTimeLimit() async {
        let clock = ManualClock()
        let gate = DrivingGate(packetBytes: 640, maxWait: .seconds(3), clock: clock)
        await gate.observe(.speakStatus("speak_start", speechID: 1), details: [:])
        await gate.interrupted()
        async let packets = gate.audio([UInt8](repeating: 1, count: 640), endsUtterance: false)
        var waited = Duration.zero
        while waited < .seconds(3) {
            #expect(await clock.waitForSleepers(1), "audio left after \(waited), before the time limit")
            clock.advance(by: .milliseconds(10))
            waited += .milliseconds(10)
        }
        #expect(Self.summary(await packets) == ["1:640:false"])
        // The next audio does not wait again.
        #expect(Self.summary(await gate.audio([UInt8](repeating: 2, count: 640), endsUtterance: false)) == ["2:640:false"])
    }

    @Test(.timeLimit(.minutes(1)))
    func aCancelledWaitForSpeakOverEndsAtOnce() async {
        // The clock never moves: only the cancellation can end the wait (if it does not, the time limit
        // fails the test instead of leaving it hanging).
        let clock = ManualClock()
        let gate = DrivingGate(packetBytes: 640, maxWait: .seconds(30), clock: clock)
        await gate.observe(.speakStatus("speak_start", speechID: 1), details: [:])
        await gate.interrupted()
        let waiting = Task { await gate.audio([UInt8](repeating: 1, count: 640), endsUtterance: false) }
        #expect(await clock.waitForSleepers(1))
        waiting.cancel()
        // The wait ends without speak_over and without time passing; the audio is packetized as usual
        // and the next audio does not wait again.
        #expect(Self.summary(await waiting.value) == ["1:640:false"])
        #expect(clock.now.offset == .zero)
        #expect(Self.summary(await gate.audio([UInt8](repeating: 2, count: 640), endsUtterance: false)) == ["2:640:false"])
    }

    @Test func anInterruptWhileSilentDoesNotHoldAudio() async {
        let gate = DrivingGate(packetBytes: 640, maxWait: .seconds(30))
        await gate.interrupted()
        let started = ContinuousClock.now
        #expect(Self.summary(await gate.audio([UInt8](repeating: 1, count: 640), endsUtterance: true)) == ["1:640:false", "2:0:true"])
        #expect(ContinuousClock.now - started < .seconds(5))
    }

    @Test func mutedSentencesHoldTheMicrophoneBackUntilOver() async {
        let gate = DrivingGate(packetBytes: 640)
        _ = await gate.audio([UInt8](repeating: 1, count: 640), endsUtterance: false)
        await gate.observe(.speechText("a question", speechID: 2), details: ["muted": .bool(true)])
        // Muted: nothing but the end of the open turn leaves.
        #expect(Self.summary(await gate.audio([UInt8](repeating: 2, count: 640), endsUtterance: false)).isEmpty)
        #expect(Self.summary(await gate.audio([UInt8](repeating: 2, count: 640), endsUtterance: true)) == ["2:0:true"])
        await gate.observe(.speakStatus("speak_over", speechID: 2), details: [:])
        #expect(Self.summary(await gate.audio([UInt8](repeating: 3, count: 640), endsUtterance: false)) == ["1:640:false"])
        #expect(await gate.mutedPackets == 2)
    }

    @Test func aTextEndsTheOpenAudioTurnFirst() async {
        let gate = DrivingGate(packetBytes: 640)
        _ = await gate.audio([UInt8](repeating: 1, count: 1000), endsUtterance: false)
        #expect(Self.summary(await gate.endAudioTurn()) == ["2:360:false", "3:0:true"])
        #expect(await gate.endAudioTurn().isEmpty)
    }
}
