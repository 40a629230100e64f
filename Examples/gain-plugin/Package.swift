// swift-tools-version: 6.1
// A voicepipe plugin: a shared library with one node type, loaded at run time by the stock
// `voicepipe` binary (`--plugin` or a graph's `plugins:` list). It depends on PipelineCore only,
// so it builds in a minute or two without the rest of voicepipe.
import PackageDescription

let package = Package(
    name: "gain-plugin",
    platforms: [.macOS(.v15)],
    products: [
        // libgain.so: `plugins: [gain]` finds it in VOICEPIPE_PLUGIN_PATH.
        .library(name: "gain", type: .dynamic, targets: ["GainPlugin"]),
    ],
    dependencies: [
        .package(path: "../../Sources/PipelineCore"),
    ],
    targets: [
        .target(
            name: "GainPlugin",
            dependencies: [.product(name: "PipelineCore", package: "PipelineCore")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "GainPluginTests",
            dependencies: ["GainPlugin", .product(name: "VoicepipeTesting", package: "PipelineCore")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
