// swift-tools-version: 6.1
// An example of a user's own package that adds node types to voicepipe and runs the same CLI.
import PackageDescription

let package = Package(
    name: "voicepipe-custom",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "voicepipe", path: "../.."),
        .package(path: "../../Sources/PipelineCore"),
    ],
    targets: [
        .executableTarget(
            name: "voicepipe-custom",
            dependencies: [
                .product(name: "PipelineCore", package: "PipelineCore"),
                .product(name: "Nodes", package: "voicepipe"),
                .product(name: "VoicepipeCLI", package: "voicepipe"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
