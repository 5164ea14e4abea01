// swift-tools-version:6.2
import PackageDescription

// A Vapor app that protects one route with App Attest. It depends on swift-app-attest with the Vapor trait only:
// no database driver, no Hummingbird.
let package = Package(
    name: "VaporApp",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "swift-app-attest", path: "../..", traits: ["Vapor"]),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
    ],
    targets: [
        .target(
            name: "App",
            dependencies: [
                .product(name: "AppAttest", package: "swift-app-attest"),
                .product(name: "AppAttestStore", package: "swift-app-attest"),
                .product(name: "AppAttestLifecycle", package: "swift-app-attest"),
                .product(name: "AppAttestVapor", package: "swift-app-attest"),
                .product(name: "Vapor", package: "vapor"),
            ]
        ),
        .executableTarget(name: "VaporApp", dependencies: ["App"]),
        .testTarget(
            name: "AppTests",
            dependencies: [
                "App",
                .product(name: "AppAttestTesting", package: "swift-app-attest"),
                .product(name: "AppAttestLifecycle", package: "swift-app-attest"),
                .product(name: "AppAttestHTTP", package: "swift-app-attest"),
                .product(name: "VaporTesting", package: "vapor"),
            ]
        ),
    ]
)
