import Foundation
import PipelineCore
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes

@Suite("avatar node against a local stream-service server")
struct AvatarNodeTests {
    @Test func audioIsPacketizedPacedAndTheSessionClosedOnce() async throws {
        let server = IVHServer()
        try await server.start()
        let yaml = """
        version: 1
        name: avatar-audio-test
        nodes:
          tone: { type: tone-source, rate: 16000, channels: 1, frame_ms: 20, duration_ms: 1000, realtime: false }
          \(IVHTest.avatarNode(server, "driver_type: voice, user_id: audio-test"))
        links:
          - tone -> avatar
        """
        let events = try await runGraph(yaml)
        #expect(server.created.count == 1)
        let id = try #require(server.created.first)
        #expect(server.accepted("newsession") == 1)
        #expect(server.accepted("startsession") == 1)
        #expect(server.closes(id) == 1)
        #expect(server.openChannels == 0)

        let audio = server.commands.filter { $0.command == "SEND_AUDIO" }
        #expect(audio.map { $0.audioBytes ?? -1 } == [6400, 6400, 6400, 6400, 6400, 0])
        #expect(audio.map { $0.seq ?? -1 } == [1, 2, 3, 4, 5, 6])
        #expect(audio.map { $0.isFinal ?? false } == [false, false, false, false, false, true])
        #expect(audio.allSatisfy { $0.sessionID == id })
        // Never faster than real time: packet k arrives at least k × 200 ms after the first (less
        // slack for delivery jitter on a loaded machine); an unpaced burst would arrive at once.
        let full = audio.dropLast()
        if let first = full.first {
            for (k, p) in full.enumerated() {
                #expect(first.arrived.duration(to: p.arrived) >= .milliseconds(200 * k - 100), "packet \(k + 1) came too early")
            }
            #expect(first.arrived.duration(to: full.last!.arrived) >= .milliseconds(700))
        }
        let sessions = events.events("avatar_session")
        #expect(sessions.map { $0["state"]?.stringValue } == ["open", "closed"])
        #expect(sessions.first?["session_id"]?.stringValue == id)
        #expect(sessions.first?["play_url"]?.stringValue?.contains(id) == true)
        // Credentials never appear in events.
        let all = events.map { $0.jsonLine() }.joined()
        #expect(!all.contains(server.options.accessToken) && !all.contains(server.options.appkey))
        await server.stop()
    }

    /// A file read faster than real time fills the command queue before the channel opens: every
    /// packet must still leave, paced, before the empty `IsFinal` one (none dropped, none counted).
    @Test(arguments: [(4400, 6400, 2000), (3000, 3200, 400)])
    func aTurnLongerThanTheQueueIsSentWhole(durationMs: Int, packetBytes: Int, heldMs: Int) async throws {
        let server = IVHServer()
        try await server.start()
        let yaml = """
        version: 1
        name: avatar-long-turn
        nodes:
          tone: { type: tone-source, rate: 16000, channels: 1, frame_ms: 20, duration_ms: \(durationMs), realtime: false }
          \(IVHTest.avatarNode(server, "driver_type: 2, packet_bytes: \(packetBytes), held_ms: \(heldMs)"))
        links:
          - tone -> avatar
        """
        let pipeline = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry())
        let events = try await IVHTest.run(pipeline)
        let audio = server.commands.filter { $0.command == "SEND_AUDIO" }
        let expected = durationMs * 32 / packetBytes
        #expect(audio.count == expected + 1, "\(audio.count - 1) of \(expected) packets sent")
        #expect(audio.dropLast().allSatisfy { $0.audioBytes == packetBytes && $0.isFinal == false })
        #expect(audio.last?.isFinal == true && audio.last?.audioBytes == 0)
        #expect(audio.map { $0.seq ?? -1 } == Array(1...(expected + 1)))
        if let first = audio.first, let last = audio.dropLast().last {
            let ms = (expected - 1) * packetBytes / 32
            #expect(first.arrived.duration(to: last.arrived) >= .milliseconds(ms - 150), "paced at real time")
        }
        #expect(events.events("error").isEmpty, "\(events.events("error"))")
        #expect(pipeline.nodeStats.first { $0.id == "avatar" }?.counters["dropped_packets"] == nil)
        #expect(server.closes(try #require(server.created.first)) == 1)
        await server.stop()
    }

    @Test func textDrivesTheAvatarAndPushesBecomeEvents() async throws {
        let server = IVHServer()
        try await server.start()
        let release = TestFlag()
        let yaml = """
        version: 1
        name: avatar-text-test
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: text"))
        links:
          - say -> avatar.text
        """
        let pipeline = try Pipeline(yaml: yaml, registry: IVHTest.registry(texts: ["hello there"], release: release))
        let events = try await IVHTest.run(pipeline) { e in
            if e.name == "avatar_status", e["status"]?.stringValue == "speak_over" { release.set() }
        }
        #expect(release.isSet)
        let texts = server.commands.filter { $0.command == "SEND_TEXT" }
        #expect(texts.map(\.text) == ["hello there"])
        #expect(server.commands.allSatisfy { $0.command != "SEND_AUDIO" })
        #expect(events.events("avatar_status").compactMap { $0["status"]?.stringValue } == ["speak_start", "speak_over"])
        let avatarTexts = events.events("avatar_text").map { "\($0["kind"]?.stringValue ?? ""):\($0["text"]?.stringValue ?? "")" }
        #expect(avatarTexts == ["input:hello there", "speech:echo: hello there"])
        #expect(server.closes(try #require(server.created.first)) == 1)
        await server.stop()
    }

    /// Every push the SDK exposes becomes an event; a type without one becomes `avatar_push`.
    @Test func everyPushBecomesAnEvent() async throws {
        let server = IVHServer()
        try await server.start()
        let release = TestFlag()
        let pushed = TestFlag()
        let yaml = """
        version: 1
        name: avatar-push-test
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: text"))
        links:
          - say -> avatar.text
        """
        let options = #"{\"style\":1,\"title\":\"Pick one\",\"options\":[\"a\",\"b\"]}"#
        let pushes = [
            #"{"Header":{"Code":0},"Payload":{"Type":2,"Text":"choose","TextDisplay":"choose","TextPro":"<speak>choose</speak>","SpeechId":9,"Uninterrupt":true,"Muted":false,"InteractionType":"OptionInfo","InteractionContent":"\#(options)","ChatStatus":4}}"#,
            #"{"Header":{"Code":0},"Payload":{"Type":1,"Text":"stop","InterruptResult":2,"InterruptMessage":"sentence cannot be interrupted"}}"#,
            #"{"Header":{"Code":0},"Payload":{"Type":42,"Text":"something new","Extra":{"n":1.5}}}"#,
        ]
        let pipeline = try Pipeline(yaml: yaml, registry: IVHTest.registry(texts: ["hello"], release: release))
        let events = try await IVHTest.run(pipeline) { e in
            if e.name == "avatar_status", e["status"]?.stringValue == "speak_over", !pushed.isSet {
                pushed.set()
                for p in pushes { server.push(p) }
            }
            if e.name == "avatar_push" { release.set() }
        }
        #expect(release.isSet)
        let interaction = try #require(events.events("avatar_interaction").first)
        #expect(interaction["kind"]?.stringValue == "options")
        guard case .object(let content)? = interaction["content"] else { Issue.record("content \(String(describing: interaction["content"]))"); return }
        #expect(content["title"] == .string("Pick one"))
        let speech = try #require(events.events("avatar_text").first { $0["text"]?.stringValue == "choose" })
        #expect(speech["text_pro"]?.stringValue == "<speak>choose</speak>")
        #expect(speech["uninterrupt"] == .bool(true))
        #expect(events.events("avatar_status").contains { $0["status"]?.stringValue == "script_ended" })
        let input = try #require(events.events("avatar_text").first { $0["text"]?.stringValue == "stop" })
        #expect(input["interrupt_result"] == .int(2))
        let unknown = try #require(events.events("avatar_push").first)
        #expect(unknown["type"] == .int(42))
        guard case .object(let payload)? = unknown["payload"] else { Issue.record("payload"); return }
        #expect(payload["Text"] == .string("something new"))
        await server.stop()
    }

    /// newsession's optional SessionId and ExtraInfo.UserInfo, a delayed startsession, and
    /// configsession with the layout once the session runs.
    @Test func sessionOptionsStartDelayAndLayout() async throws {
        let server = IVHServer()
        try await server.start()
        let release = TestFlag()
        let yaml = """
        version: 1
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: 1, session_id: my-session-7, user_info: \"likes jazz\", start_delay_ms: 300, space_param: { BackgroundUrl: \"https://example.com/bg.png\", ImagePosition: 0.25, ImagePositionVertical: -0.1, ImageZoom: 1.5 }"))
        links:
          - say -> avatar.text
        """
        let pipeline = try Pipeline(yaml: yaml, registry: IVHTest.registry(texts: ["hi"], release: release))
        _ = try await IVHTest.run(pipeline) { e in
            if e.name == "avatar_status", e["status"]?.stringValue == "speak_over" { release.set() }
        }
        let calls = server.calls
        #expect(server.created == ["my-session-7"])
        let created = try #require(calls.first { $0.operation == "newsession" })
        let payload = try #require((try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])?["Payload"] as? [String: Any])
        #expect(payload["SessionId"] as? String == "my-session-7")
        #expect((payload["ExtraInfo"] as? [String: Any])?["UserInfo"] as? String == "likes jazz")
        let order = calls.map(\.operation).filter { ["newsession", "startsession", "configsession"].contains($0) }
        #expect(order == ["newsession", "startsession", "configsession"])
        #expect(calls.first { $0.operation == "configsession" }?.accepted == true, "the layout numbers go out as JSON numbers")
        await server.stop()
    }

    @Test func heartbeatsFollowTheInjectedClock() async throws {
        let server = IVHServer()
        try await server.start()
        let release = TestFlag()
        let clock = ManualClock()
        let yaml = """
        version: 1
        name: avatar-heartbeat-test
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: text, heartbeat_s: 30"))
        links:
          - say -> avatar.text
        """
        let pipeline = try Pipeline(yaml: yaml, registry: IVHTest.registry(release: release), clock: clock)
        let run = Task { try await IVHTest.run(pipeline) }
        // Other tasks may sleep on the clock too: wait for the heartbeat timer itself, due at 30 s.
        let first = ManualClock.Instant(offset: .seconds(30)), second = ManualClock.Instant(offset: .seconds(60))
        #expect(await server.wait { server.connections == 1 && clock.deadlines.contains(first) })
        let heartbeats: @Sendable () -> Int = { server.commands.filter { $0.command == "SEND_HEARTBEAT" }.count }
        #expect(heartbeats() == 0)
        clock.advance(by: .seconds(29))
        // Nobody was due at 29 s: the heartbeat timer still sleeps (counted once the channel has closed, below).
        #expect(clock.deadlines.contains(first))
        #expect(heartbeats() == 0)
        clock.advance(by: .seconds(1))
        #expect(await server.wait { heartbeats() == 1 })
        #expect(server.commands.first { $0.command == "SEND_HEARTBEAT" }?.text == "PING")
        #expect(await server.wait { clock.deadlines.contains(second) })
        clock.advance(by: .seconds(30))
        #expect(await server.wait { heartbeats() == 2 })
        release.set()
        _ = try await run.value
        // Once the channel has closed the server has read everything sent on it: two heartbeats, none
        // before 30 s or in between.
        #expect(await server.wait { server.openChannels == 0 })
        #expect(heartbeats() == 2)
        #expect(server.closes(try #require(server.created.first)) == 1)
        await server.stop()
    }

    @Test func speechStartInterruptsAndSliceEndsTheUtterance() async throws {
        let server = IVHServer()
        try await server.start()
        var registry = BuiltinNodes.registry()
        registry.register(ScriptedAudioSource.descriptor(count: 16))
        let yaml = """
        version: 1
        name: avatar-barge-in-test
        nodes:
          mic: { type: script-audio }
          \(IVHTest.avatarNode(server, "driver_type: voice, barge_in: true"))
        links:
          - mic -> avatar
        """
        _ = try await runGraph(yaml, registry: registry)
        let commands = server.commands
        #expect(commands.first?.command == "SEND_TEXT")
        #expect(commands.first?.text == "" && commands.first?.interrupt == true)
        let audio = commands.filter { $0.command == "SEND_AUDIO" }
        // The slice's audio, then the separate empty IsFinal packet the audio-driving page requires.
        #expect(audio.map { $0.audioBytes ?? -1 } == [6400, 3840, 0])
        #expect(audio.map { $0.isFinal ?? false } == [false, false, true])
        await server.stop()
    }

    @Test func anErrorCodeIsSurfacedClearly() async throws {
        var options = IVHServer.Options()
        options.failures = ["newsession": 100008]
        let server = IVHServer(options)
        try await server.start()
        let yaml = """
        version: 1
        name: avatar-quota-test
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: text"))
        links:
          - say -> avatar.text
        """
        let error = await #expect(throws: PipelineError.self) {
            _ = try await runGraph(yaml, registry: IVHTest.registry(release: TestFlag()))
        }
        #expect(error?.node == "avatar")
        #expect(error?.code == "ivh_100008")
        #expect(error?.message.contains("over quota") == true)
        #expect(error?.message.contains("100008") == true)
        #expect(server.created.isEmpty)
        await server.stop()
    }

    @Test func aSessionThatFailsToStartIsStillClosed() async throws {
        var options = IVHServer.Options()
        options.failures = ["startsession": 110014]
        let server = IVHServer(options)
        try await server.start()
        let yaml = """
        version: 1
        name: avatar-start-failure-test
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: text"))
        links:
          - say -> avatar.text
        """
        let error = await #expect(throws: PipelineError.self) {
            _ = try await runGraph(yaml, registry: IVHTest.registry(release: TestFlag()))
        }
        #expect(error?.message.contains("not ready") == true)
        let id = try #require(server.created.first)
        #expect(server.closes(id) == 1)
        #expect(server.openSessions.isEmpty)
        await server.stop()
    }

    @Test func aPreparingSessionIsPolledUntilReady() async throws {
        var options = IVHServer.Options()
        options.initialStatus = 3
        options.readyAfterPolls = 2
        let server = IVHServer(options)
        try await server.start()
        let yaml = """
        version: 1
        name: avatar-preparing-test
        nodes:
          say: { type: script-text }
          \(IVHTest.avatarNode(server, "driver_type: text, poll_ms: 100"))
        links:
          - say -> avatar.text
        """
        let release = TestFlag()
        release.set()
        let events = try await runGraph(yaml, registry: IVHTest.registry(release: release))
        #expect(server.accepted("statsession") == 2)
        #expect(server.accepted("startsession") == 1)
        let open = events.events("avatar_session").first
        #expect(open?["play_url"]?.stringValue?.isEmpty == false)
        #expect(server.closes(try #require(server.created.first)) == 1)
        await server.stop()
    }

    @Test func aDroppedChannelIsReopenedAndAudioResumes() async throws {
        let server = IVHServer()
        try await server.start()
        let yaml = """
        version: 1
        name: avatar-drop-test
        nodes:
          tone: { type: tone-source, rate: 16000, channels: 1, frame_ms: 20, duration_ms: 2000, realtime: false }
          \(IVHTest.avatarNode(server, "driver_type: voice"))
        links:
          - tone -> avatar
        """
        let pipeline = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry())
        let run = Task { try await IVHTest.run(pipeline) }
        let audioCount: @Sendable () -> Int = { server.commands.filter { $0.command == "SEND_AUDIO" }.count }
        #expect(await server.wait { audioCount() >= 3 })
        server.dropChannels()
        let events = try await run.value
        #expect(server.connections == 2)
        let audio = server.commands.filter { $0.command == "SEND_AUDIO" }
        let seqs = audio.compactMap(\.seq)
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count, "no packet sent twice: \(seqs)")
        #expect(audio.count >= 10, "at most the packet in flight is lost: \(seqs)")
        #expect(audio.last?.isFinal == true && audio.last?.connection == 2)
        #expect(audio.contains { $0.connection == 2 && $0.audioBytes == 6400 })
        let channel = events.events("avatar_channel").map { $0["state"]?.stringValue ?? "" }
        #expect(channel == ["connected", "disconnected", "connected"])
        #expect(pipeline.nodeStats.first { $0.id == "avatar" }?.counters["reconnects"] == 1)
        #expect(server.closes(try #require(server.created.first)) == 1)
        await server.stop()
    }

    @Test func validationRefusesAudioThatIsNot16kMono() throws {
        let yaml = """
        version: 1
        name: avatar-format-test
        nodes:
          tone: { type: tone-source, rate: 8000, channels: 1, duration_ms: 100 }
          avatar: { type: avatar, appkey: k, access_token: t }
        links:
          - tone -> avatar
        """
        #expect(throws: (any Error).self) { _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry()) }
    }

    /// The SDK's DriverType values written as YAML numbers, and protocol options with their types.
    @Test(arguments: ["2", "3", "1", "\"2\"", "audio"])
    func enumerationsThatListNumbersAcceptNumbers(driverType: String) throws {
        let yaml = """
        version: 1
        nodes:
          tone: { type: tone-source, rate: 16000, channels: 1, duration_ms: 100 }
          avatar: { type: avatar, appkey: k, access_token: t, driver_type: \(driverType), protocol_options: { TrtcRoomId: 1234, TrtcUseExternalApp: true } }
        links:
          - tone -> avatar
        """
        let g = try GraphValidator.validate(GraphLoader.parse(yaml), registry: BuiltinNodes.registry())
        let c = try #require(g.node("avatar")?.configuration as? AvatarNode.Configuration)
        #expect(c.protocolOptions?["TrtcRoomId"] == .int(1234))
        #expect(c.protocolOptions?["TrtcUseExternalApp"] == .bool(true))
        #expect(throws: (any Error).self) {
            _ = try GraphValidator.validate(GraphLoader.parse(yaml.replacingOccurrences(of: "driver_type: \(driverType)", with: "driver_type: 7")),
                                            registry: BuiltinNodes.registry())
        }
    }
}

@Suite("avatar example pipelines")
struct AvatarPipelineTests {
    @Test func avatarAudioRunsWithAToneInsteadOfTheMicrophone() async throws {
        let server = IVHServer()
        try await server.start()
        let path = IVHTest.packageRoot.appendingPathComponent("pipelines/avatar-audio.yaml").path
        let sets = ["mic.type=tone-source", "mic.duration_ms=1500", "mic.realtime=false", "mic.level_db=-10",
                    "avatar.base_url=\(server.baseURL)", "avatar.appkey=\(server.options.appkey)",
                    "avatar.access_token=\(server.options.accessToken)", "out.path=\(temporaryPath("events.jsonl"))"]
        let pipeline = try Pipeline(path: path, registry: BuiltinNodes.registry(), overrides: sets.map { try Override(parsing: $0) })
        let events = try await IVHTest.run(pipeline)
        let id = try #require(server.created.first)
        #expect(server.closes(id) == 1)
        #expect(events.events("avatar_session").count == 2)
        let audio = server.commands.filter { $0.command == "SEND_AUDIO" }
        #expect(audio.allSatisfy { ($0.audioBytes ?? 0) <= 6400 })
        if let last = audio.last { #expect(last.isFinal == true) }
        await server.stop()
    }

    @Test func avatarTextValidates() throws {
        let path = IVHTest.packageRoot.appendingPathComponent("pipelines/avatar-text.yaml").path
        // The avatar answers through a responder: chat by default, webhook with RESPONDER=webhook.
        for (responder, type) in [(nil, "chat"), ("webhook", "webhook")] {
            let environment = responder.map { ["RESPONDER": $0] } ?? [:]
            let graph = try GraphValidator.load(path: path, registry: BuiltinNodes.registry(), environment: environment)
            #expect(graph.node("reply")?.descriptor.type == type)
            #expect(graph.links.contains { $0.fromNode == "asr" && $0.fromPort == "text" && $0.toNode == "reply" && $0.toPort == "in" })
            #expect(graph.links.contains { $0.fromNode == "reply" && $0.fromPort == "text" && $0.toNode == "avatar" && $0.toPort == "text" })
        }
    }
}
