// swift-tools-version: 6.1
// An app that embeds voicepipe's core node types (files, devices, DSP, codecs): it builds PipelineCore and
// CoreNodes, not SwiftNIO, BoringSSL or AsyncHTTPClient.
import PackageDescription

let package = Package(
    name: "speech-spans",
    // voicepipe's own floor: without it SwiftPM assumes an older macOS and refuses the dependency.
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "voicepipe", path: "../.."),
        // PipelineCore is a package of its own (a shared library that plugins link too): name it as well.
        .package(path: "../../Sources/PipelineCore"),
    ],
    targets: [
        .executableTarget(
            name: "speech-spans",
            dependencies: [
                .product(name: "PipelineCore", package: "PipelineCore"),
                .product(name: "CoreNodes", package: "voicepipe"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
