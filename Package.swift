// swift-tools-version:6.0
import PackageDescription

// Layers (STYLE.md §Conventions 1): C system modules → internal wrappers that own C memory → the pure
// `AppAttest` core → tools. The core product builds without any web framework or database driver.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "swift-app-attest",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "AppAttest", targets: ["AppAttest"]),
        .library(name: "AppAttestVectors", targets: ["AppAttestVectors"]),
        .library(name: "AppAttestTesting", targets: ["AppAttestTesting"]),
        .library(name: "AppleDeviceAPI", targets: ["AppleDeviceAPI"]),
        .library(name: "AppAttestStore", targets: ["AppAttestStore"]),
        .library(name: "AppAttestSQLite", targets: ["AppAttestSQLite"]),
        .library(name: "AppAttestPostgres", targets: ["AppAttestPostgres"]),
        .library(name: "AppAttestHummingbird", targets: ["AppAttestHummingbird"]),
        .library(name: "AppAttestVapor", targets: ["AppAttestVapor"]),
        .library(name: "AppAttestServer", targets: ["AppAttestServer"]),
        .library(name: "AppleDeviceAPITesting", targets: ["AppleDeviceAPITesting"]),
        .executable(name: "appattest", targets: ["appattest"]),
        .executable(name: "appattest-store-worker", targets: ["appattest-store-worker"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.4.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/mattpolzin/OpenAPIKit.git", from: "6.4.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
    ],
    targets: [
        // MARK: C system libraries (SPEC §9)
        .systemLibrary(
            name: "CAppAttestOpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CAppAttestCBOR",
            pkgConfig: "libcbor",
            providers: [.apt(["libcbor-dev"])]
        ),

        // MARK: Internal wrappers: the only files that touch C
        .target(
            name: "AppAttestCrypto",
            dependencies: ["CAppAttestOpenSSL"],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestCBOR",
            dependencies: ["CAppAttestCBOR"],
            swiftSettings: strict
        ),

        // MARK: The core: parsing and verification, no I/O
        .target(
            name: "AppAttest",
            dependencies: [
                "AppAttestCrypto",
                "AppAttestCBOR",
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),

        // MARK: Test-vector files (TestVectors/README.md format)
        .target(
            name: "AppAttestVectors",
            dependencies: ["AppAttest"],
            swiftSettings: strict
        ),

        // MARK: A simulated App Attest device and certificate authority, for tests (ours and our users')
        .target(
            name: "AppAttestTesting",
            dependencies: [
                "AppAttest",
                "AppAttestVectors",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),

        // MARK: Apple's server APIs: provider JWT, DeviceCheck two bits, receipt refresh (I/O starts here)
        .target(
            name: "AppleDeviceAPI",
            dependencies: [
                "AppAttest",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // MARK: A local stand-in for Apple's DeviceCheck and receipt servers, for tests
        .target(
            name: "AppleDeviceAPITesting",
            dependencies: [
                "AppAttest",
                "AppAttestTesting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),

        // MARK: Replay-safe state: challenges, attested keys, counters
        .target(
            name: "AppAttestStore",
            dependencies: ["AppAttest", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestSQLite",
            dependencies: ["AppAttestStore", "AppAttest", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestPostgres",
            dependencies: [
                "AppAttestStore", "AppAttest", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // MARK: Adapters
        .target(
            name: "AppAttestHummingbird",
            dependencies: [
                "AppAttest", "AppAttestStore", .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestVapor",
            dependencies: ["AppAttest", "AppAttestStore", .product(name: "Vapor", package: "vapor")],
            swiftSettings: strict
        ),

        // MARK: `appattest serve`: the verification service (Hummingbird), as a library so that tests drive it
        .target(
            name: "AppAttestServer",
            dependencies: [
                "AppAttest", "AppAttestCrypto", "AppAttestStore", "AppAttestSQLite", "AppAttestPostgres",
                "AppAttestHummingbird", "AppleDeviceAPI",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            resources: [.copy("openapi.yaml")],
            swiftSettings: strict
        ),
        // A process that drives a store, for the multi-process and SIGKILL tests and the store benchmark.
        .executableTarget(
            name: "appattest-store-worker",
            dependencies: ["AppAttestStore", "AppAttestSQLite", "AppAttestPostgres", "AppAttestTesting", "AppAttest"],
            swiftSettings: strict
        ),

        // MARK: The command
        .executableTarget(
            name: "appattest",
            dependencies: [
                "AppAttest",
                "AppAttestVectors",
                "AppAttestTesting",
                "AppleDeviceAPI",
                "AppleDeviceAPITesting",
                "AppAttestStore",
                "AppAttestSQLite",
                "AppAttestPostgres",
                "AppAttestCrypto",
                "AppAttestCBOR",
                "AppAttestServer",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),

        // MARK: Fuzzing: a replayer normally, a libFuzzer target when built by Fuzz/run.sh
        .executableTarget(
            name: "appattest-fuzz",
            dependencies: ["AppAttest", "AppAttestCBOR"],
            swiftSettings: strict
        ),

        // MARK: Tests
        .testTarget(
            name: "AppAttestCBORTests",
            dependencies: ["AppAttestCBOR"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestTests",
            dependencies: ["AppAttest", "AppAttestVectors", "AppAttestCBOR"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppleDeviceAPITests",
            dependencies: ["AppleDeviceAPI", "AppleDeviceAPITesting", "AppAttestTesting", "AppAttest"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestStoreTests",
            dependencies: [
                "AppAttestStore", "AppAttestSQLite", "AppAttestPostgres", "AppAttestTesting", "AppAttest",
                "appattest-store-worker", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestHummingbirdTests",
            dependencies: [
                "AppAttestHummingbird", "AppAttestStore", "AppAttestTesting", "AppAttest",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestVaporTests",
            dependencies: [
                "AppAttestVapor", "AppAttestStore", "AppAttestTesting", "AppAttest",
                .product(name: "VaporTesting", package: "vapor"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestServerTests",
            dependencies: [
                "AppAttestServer", "AppAttestStore", "AppAttestSQLite", "AppAttestTesting", "AppAttest",
                "AppleDeviceAPITesting", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "OpenAPIKit", package: "OpenAPIKit"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestTestingTests",
            dependencies: ["AppAttestTesting", "AppAttest", "AppAttestVectors"],
            swiftSettings: strict
        ),
    ]
)
