// swift-tools-version: 6.1
// PipelineCore: frames, ports, bounded edges, graph spec + validation, registry, runtime, plugin loading.
//
// It is a package of its own (inside the voicepipe repository) so that
// - its library product is a shared library (`libPipelineCore.so`) that the `voicepipe` executable
//   and every plugin link against: one copy of each type in the process, whoever loaded it;
// - a plugin or a node author's package depends on it alone and builds in a minute or two, without
//   the network, codec and device dependencies of the built-in nodes.
import PackageDescription

let package = Package(
    name: "PipelineCore",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "PipelineCore", type: .dynamic, targets: ["PipelineCore"]),
        .library(name: "VoicepipeTesting", targets: ["VoicepipeTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .target(
            name: "PipelineCore",
            dependencies: [
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: ".",
            exclude: ["Package.swift", "VoicepipeTesting", "Tests"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .target(
            name: "VoicepipeTesting",
            dependencies: ["PipelineCore", .product(name: "Logging", package: "swift-log")],
            path: "VoicepipeTesting",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The runtime's tests (Tests/PipelineCoreTests of the repository, linked here) so that they can be
        // built and run on this package alone: scripts/sanitize.sh runs them under ThreadSanitizer.
        // (Named apart from the repository's own PipelineCoreTests target, which builds the same files.)
        .testTarget(
            name: "RuntimeTests",
            dependencies: ["PipelineCore", "VoicepipeTesting"],
            path: "Tests/PipelineCoreTests",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
