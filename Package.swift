// swift-tools-version: 6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
]

let core: Target.Dependency = .product(name: "PipelineCore", package: "PipelineCore")
let testing: Target.Dependency = .product(name: "VoicepipeTesting", package: "PipelineCore")

let package = Package(
    name: "voicepipe",
    platforms: [.macOS(.v15)],
    products: [
        // The node types without a network stack (files, devices, DSP, codecs, RTP, wake words): an app that
        // needs only these builds neither SwiftNIO nor BoringSSL.
        .library(name: "CoreNodes", targets: ["CoreNodes"]),
        // Every built-in node type: CoreNodes and the recognizers, synthesis, responders, avatar, HTTP, NATS.
        .library(name: "Nodes", targets: ["Nodes"]),
        .library(name: "VoicepipeCLI", targets: ["VoicepipeCLI"]),
        .library(name: "VoicepipeServe", targets: ["VoicepipeServe"]),
        .library(name: "NATSClient", targets: ["NATSClient"]),
        .library(name: "ServiceDiscovery", targets: ["ServiceDiscovery"]),
        .library(name: "Wyoming", targets: ["Wyoming"]),
        .library(name: "DigitalHuman", targets: ["DigitalHuman"]),
        .library(name: "TencentASR", targets: ["TencentASR"]),
        .executable(name: "voicepipe", targets: ["Runner"]),
    ],
    dependencies: [
        // PipelineCore is its own package (a shared library shared with plugins); see its Package.swift.
        .package(path: "Sources/PipelineCore"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", from: "1.6.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev"])]),
        .systemLibrary(name: "CSpeexDSP", pkgConfig: "speexdsp", providers: [.apt(["libspeexdsp-dev"])]),
        // PulseAudio, PocketSphinx, flite (and each of its voices) and eSpeak NG: loaded at first use (dlopen), as
        // FFmpeg and ONNX Runtime are. The build needs their headers (libpulse-dev, libpocketsphinx-dev,
        // flite1-dev, libespeak-ng-dev); a run loads only what its graph uses (libpulse alone brought some thirty
        // libraries: dbus, systemd, X11, sndfile...), and names the missing library when a node needs it.
        // Opening a library at first use, looking its functions up once, one problem text naming the file and
        // the Debian package: shared by the lazily loaded shims below and CAVCodec.
        .target(name: "CLibraryLoader", path: "Sources/CLibraryLoader", linkerSettings: [.linkedLibrary("dl")]),
        .target(name: "CPulse", dependencies: ["CLibraryLoader"], path: "Sources/CPulse"),
        .target(name: "CPocketSphinx", dependencies: ["CLibraryLoader"], path: "Sources/CPocketSphinx"),
        .target(name: "CFlite", dependencies: ["CLibraryLoader"], path: "Sources/CFlite"),
        .target(name: "CEspeakNG", dependencies: ["CLibraryLoader"], path: "Sources/CEspeakNG"),
        // ONNX Runtime's C API, loaded at run time (dlopen): the build does not need the library.
        .target(name: "COnnxRuntime", path: "Sources/COnnxRuntime", linkerSettings: [.linkedLibrary("dl")]),
        // whisper.cpp's C API, loaded at run time (dlopen): the build does not need the library.
        // zlib (how well a transcript compresses) is opened at run time too: linked into every program, it broke
        // the AAC path of the FFmpeg libraries those load at first use (the intercom test with CODEC=aac).
        .target(name: "CWhisper", path: "Sources/CWhisper", linkerSettings: [.linkedLibrary("dl")]),
        .systemLibrary(name: "CWebRTCAudioProcessing", pkgConfig: "webrtc-audio-processing", providers: [.apt(["libwebrtc-audio-processing-dev"])]),
        // Echo cancellation (webrtc-audio-processing's AEC, speexdsp's MDF) behind a C interface.
        .target(name: "CEchoCancel", dependencies: ["CWebRTCAudioProcessing", "CSpeexDSP"], path: "Sources/CEchoCancel",
                cxxSettings: [.define("WEBRTC_LINUX"), .define("WEBRTC_POSIX"), .define("WEBRTC_AUDIO_PROCESSING_ONLY_BUILD")]),
        // FFmpeg (libavcodec, libavformat, libswresample from Debian) behind a narrow C interface: AAC, audio files.
        // Loaded at first use (dlopen), as ONNX Runtime is: the build needs the headers, a run that reads no
        // compressed file and codes no AAC does not load FFmpeg and the hundred-odd libraries it brings.
        .target(name: "CAVCodec", dependencies: ["CLibraryLoader"], path: "Sources/CAVCodec"),
        .target(
            name: "NATSClient",
            dependencies: [
                core,   // LockedValue, the lock ThreadSanitizer sees
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        // Multicast DNS and DNS-SD (RFC 6762, 6763) for one service type over IPv4: announce, browse,
        // resolve. Foundation and the runtime's LockedValue; the intercom's peer discovery is built on it.
        .target(name: "ServiceDiscovery", dependencies: [core], swiftSettings: strict),
        // The Wyoming protocol (Home Assistant's voice services): events, framing, a client connection.
        .target(
            name: "Wyoming",
            dependencies: [core, .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict
        ),
        // Bounded byte streams and WebSocket connections with a handshake deadline, on SwiftNIO: the transport
        // under the Tencent clients, the digital human and HTTP upload.
        .target(
            name: "BoundedTransport",
            dependencies: [
                core,
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "WSClient", package: "swift-websocket"),
            ],
            swiftSettings: strict
        ),
        // Tencent Cloud's real-time ASR (v2): the signed request, the WebSocket session with reconnection and
        // its audio backlog, the server's messages. The asr node's `tencent` engine is built on it.
        .target(
            name: "TencentASR",
            dependencies: [
                core, "CoreNodes", "BoundedTransport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "WSClient", package: "swift-websocket"),
            ],
            swiftSettings: strict
        ),
        // Tencent Cloud's interactive digital human (IVH): the signed HTTP API and the command channel.
        .target(
            name: "DigitalHuman",
            dependencies: [
                core, "BoundedTransport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "CoreNodes",
            dependencies: [core, "ServiceDiscovery", "CALSA", "CPulse", "COpus", "CSpeexDSP", "COnnxRuntime", "CAVCodec", "CEchoCancel",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        .target(
            name: "Nodes",
            dependencies: [
                core, "CoreNodes", "BoundedTransport", "DigitalHuman", "TencentASR", "NATSClient", "Wyoming", "CPocketSphinx", "CWhisper", "CFlite", "CEspeakNG",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: strict
        ),
        // `voicepipe serve`: one front end per wire protocol (WebSocket JSON events, Tencent's real-time ASR,
        // Wyoming over TCP), the talk page and the live console.
        .target(
            name: "VoicepipeServe",
            dependencies: [
                core, "Nodes", "TencentASR", "NATSClient", "Wyoming",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            // The talk page and the console: compiled into the binary (PackageResources), nothing to install beside it.
            resources: ["talk.html", "talk.js", "capture-worklet.js", "console.html", "console.js", "style.css"]
                .map { .embedInCode("Web/Resources/\($0)") },
            swiftSettings: strict
        ),
        .target(
            name: "VoicepipeCLI",
            dependencies: [
                core, "Nodes", "VoicepipeServe",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "Runner",
            dependencies: [
                core, "Nodes", "DigitalHuman", "VoicepipeCLI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // The "own executable" example (Examples/custom-node, a package of its own for users) compiled
        // here too, so CI checks it without building the dependency tree a second time.
        .executableTarget(
            name: "voicepipe-custom-example",
            dependencies: [core, "Nodes", "VoicepipeCLI"],
            path: "Examples/custom-node/Sources/voicepipe-custom",
            swiftSettings: strict
        ),
        // The embedding example (Examples/embedded-app, a package of its own): CoreNodes alone, no network stack.
        .executableTarget(
            name: "speech-spans",
            dependencies: [core, "CoreNodes"],
            path: "Examples/embedded-app/Sources/speech-spans",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "voicepipe-bench",
            dependencies: [core, "Nodes", "NATSClient", .product(name: "Logging", package: "swift-log")],
            path: "bench/Sources/voicepipe-bench",
            swiftSettings: strict
        ),
        // Fuzz targets for the parsers of untrusted input: libFuzzer's (bench/libfuzz builds them with
        // -sanitize=fuzzer,address) or a built-in mutation fuzzer (bench/fuzz).
        .executableTarget(
            name: "voicepipe-fuzz",
            dependencies: [
                core, "Nodes", "DigitalHuman", "TencentASR", "NATSClient", "ServiceDiscovery", "Wyoming",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            path: "bench/Sources/voicepipe-fuzz",
            swiftSettings: strict
        ),
        .testTarget(
            name: "PipelineCoreTests",
            dependencies: [core, testing],
            swiftSettings: strict
        ),
        .testTarget(
            name: "NodesTests",
            dependencies: [
                core, "CoreNodes", "Nodes", "BoundedTransport", "DigitalHuman", "TencentASR", "NATSClient", "Wyoming", testing,
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "NATSClientTests",
            dependencies: ["NATSClient", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "RunnerTests",
            dependencies: [core, "Nodes", "VoicepipeCLI", "VoicepipeServe", testing],
            swiftSettings: strict
        ),
    ]
)
