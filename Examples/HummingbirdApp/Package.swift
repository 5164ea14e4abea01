// swift-tools-version:6.2
import PackageDescription

// A Hummingbird app that protects one route with App Attest. It depends on swift-app-attest with the Hummingbird
// trait only: no database driver, no Vapor.
let package = Package(
    name: "HummingbirdApp",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "swift-app-attest", path: "../..", traits: ["Hummingbird"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
    ],
    targets: [
        .target(
            name: "App",
            dependencies: [
                .product(name: "AppAttest", package: "swift-app-attest"),
                .product(name: "AppAttestStore", package: "swift-app-attest"),
                .product(name: "AppAttestLifecycle", package: "swift-app-attest"),
                .product(name: "AppAttestHummingbird", package: "swift-app-attest"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ]
        ),
        .executableTarget(name: "HummingbirdApp", dependencies: ["App"]),
        .testTarget(
            name: "AppTests",
            dependencies: [
                "App",
                .product(name: "AppAttestTesting", package: "swift-app-attest"),
                .product(name: "AppAttestLifecycle", package: "swift-app-attest"),
                .product(name: "AppAttestHTTP", package: "swift-app-attest"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
    ]
)
