// swift-tools-version:6.2
import PackageDescription

// Layers, one direction: C system modules → internal wrappers that own C memory → the pure `AppAttest` core →
// state and Apple's server APIs → adapters and the `appattest` command.
//
// Traits keep the dependency graph to what a user names. With no trait enabled (the default), a package that
// depends on this one resolves swift-asn1, swift-crypto, swift-certificates, swift-log, swift-metrics,
// swift-distributed-tracing and swift-argument-parser, and nothing else. Each trait below brings exactly the packages
// of its modules.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let sqlite: TargetDependencyCondition? = .when(traits: ["SQLite"])
let postgres: TargetDependencyCondition? = .when(traits: ["PostgreSQL"])
let http: TargetDependencyCondition? = .when(traits: ["HTTP"])
let hummingbird: TargetDependencyCondition? = .when(traits: ["Hummingbird"])
let vapor: TargetDependencyCondition? = .when(traits: ["Vapor"])
let appleAPI: TargetDependencyCondition? = .when(traits: ["AppleServerAPI"])
let service: TargetDependencyCondition? = .when(traits: ["Service"])
let serviceClient: TargetDependencyCondition? = .when(traits: ["ServiceClient"])
let clientMiddleware: TargetDependencyCondition? = .when(traits: ["ClientMiddleware"])

let package = Package(
    name: "swift-app-attest",
    // The client (`AppAttestClient`) runs where App Attest does; SwiftPM has one list per package, so macOS is the
    // server modules' minimum.
    platforms: [.macOS(.v15), .iOS(.v14), .tvOS(.v15), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "AppAttest", targets: ["AppAttest"]),
        .library(name: "AppAttestClient", targets: ["AppAttestClient"]),
        .library(name: "AppAttestClientMiddleware", targets: ["AppAttestClientMiddleware"]),
        .library(name: "AppAttestVectors", targets: ["AppAttestVectors"]),
        .library(name: "AppAttestTesting", targets: ["AppAttestTesting"]),
        .library(name: "AppAttestStore", targets: ["AppAttestStore"]),
        .library(name: "AppAttestLifecycle", targets: ["AppAttestLifecycle"]),
        .library(name: "AppAttestSQLite", targets: ["AppAttestSQLite"]),
        .library(name: "AppAttestPostgres", targets: ["AppAttestPostgres"]),
        .library(name: "AppAttestHTTP", targets: ["AppAttestHTTP"]),
        .library(name: "AppAttestHummingbird", targets: ["AppAttestHummingbird"]),
        .library(name: "AppAttestVapor", targets: ["AppAttestVapor"]),
        .library(name: "AppAttestServiceClient", targets: ["AppAttestServiceClient"]),
        .library(name: "AppleDeviceAPI", targets: ["AppleDeviceAPI"]),
        .library(name: "AppleDeviceAPITesting", targets: ["AppleDeviceAPITesting"]),
        .executable(name: "appattest", targets: ["appattest"]),
        .executable(name: "appattest-dev", targets: ["appattest-dev"]),
    ],
    traits: [
        .trait(name: "SQLite", description: "AppAttestSQLite: the embedded store on SQLite (GRDB)."),
        .trait(name: "PostgreSQL", description: "AppAttestPostgres: the shared store on PostgreSQL (postgres-nio)."),
        .trait(
            name: "HTTP",
            description:
                "AppAttestHTTP: the framework-neutral HTTP layer the adapters and the service share (swift-http-types)."
        ),
        .trait(
            name: "Hummingbird",
            description:
                "AppAttestHummingbird: routes and middleware for Hummingbird 2 (hummingbird, hummingbird-auth).",
            enabledTraits: ["HTTP"]),
        .trait(
            name: "Vapor", description: "AppAttestVapor: routes and middleware for Vapor 4 (vapor).",
            enabledTraits: ["HTTP"]),
        .trait(
            name: "AppleServerAPI",
            description:
                "AppleDeviceAPI: DeviceCheck's two bits, receipt refresh and provider tokens (async-http-client, jwt-kit)."
        ),
        .trait(
            name: "Service",
            description:
                "`appattest serve`, `load`, `stand-in`, `bench store` and `bench keys`: the verification service "
                + "(swift-prometheus, swift-service-lifecycle, swift-otel, and the traits it enables).",
            enabledTraits: ["SQLite", "PostgreSQL", "Hummingbird", "AppleServerAPI"]
        ),
        .trait(
            name: "ClientMiddleware",
            description:
                "AppAttestClientMiddleware: the app client as a ClientMiddleware of a generated OpenAPI client "
                + "(swift-openapi-runtime, swift-http-types)."
        ),
        .trait(
            name: "ServiceClient",
            description:
                "AppAttestServiceClient: a typed client of `appattest serve`, generated from its OpenAPI document "
                + "(swift-openapi-runtime, swift-openapi-async-http-client)."
        ),
        .default(enabledTraits: []),
    ],
    dependencies: [
        // The core's: always resolved.
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        // Behind traits.
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.4.0"),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        // OTLP over HTTP only: no gRPC stack in the graph.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        // Tests only: never resolved by a package that depends on this one.
        .package(url: "https://github.com/mattpolzin/OpenAPIKit.git", from: "6.4.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
    ],
    targets: [
        // MARK: C system libraries
        .systemLibrary(
            name: "CAppAttestOpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]
        ),
        .systemLibrary(
            name: "CAppAttestCBOR",
            pkgConfig: "libcbor",
            providers: [.apt(["libcbor-dev"]), .brew(["libcbor"])]
        ),

        // glibc's allocator setting for `appattest serve` (no library; a no-op elsewhere).
        .systemLibrary(name: "CAppAttestAllocator"),

        // MARK: Internal wrappers: the only files that touch C
        .target(name: "AppAttestCrypto", dependencies: ["CAppAttestOpenSSL"], swiftSettings: strict),
        .target(name: "AppAttestCBOR", dependencies: ["CAppAttestCBOR"], swiftSettings: strict),

        // MARK: The request binding's byte layout, shared by the server and the app side (pure Swift)
        .target(name: "AppAttestWire", swiftSettings: strict),

        // MARK: The core: parsing and verification, no I/O
        .target(
            name: "AppAttest",
            dependencies: [
                "AppAttestCrypto", "AppAttestCBOR", "AppAttestWire", .product(name: "SwiftASN1", package: "swift-asn1"),
                // The assertion's P-256 check (the fastest implementation the package has); OpenSSL keeps the
                // certificate chain and receipts.
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .target(name: "AppAttestVectors", dependencies: ["AppAttest"], swiftSettings: strict),

        // MARK: The app side: iOS, macOS, tvOS, watchOS, visionOS, and Linux for tests (no OpenSSL, no libcbor)
        .target(
            name: "AppAttestClient",
            dependencies: ["AppAttestWire", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strict
        ),
        // The app client in front of a client generated by swift-openapi-generator.
        .target(
            name: "AppAttestClientMiddleware",
            dependencies: [
                "AppAttestClient",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime", condition: clientMiddleware),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: clientMiddleware),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestTesting",
            dependencies: [
                "AppAttest", "AppAttestVectors", "AppAttestCBOR", "AppAttestStore", "AppAttestLifecycle",
                "AppAttestClient",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),

        // MARK: Replay-safe state: the store protocol, its records and the in-memory store
        .target(
            name: "AppAttestStore",
            dependencies: ["AppAttest", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        // The service that owns a key's lifecycle on any store: challenges, attestations, assertions, revocation
        .target(
            name: "AppAttestLifecycle",
            dependencies: [
                "AppAttest", "AppAttestStore", .product(name: "Logging", package: "swift-log"),
                // Metrics and traces through the ecosystem's APIs: no backend, nothing recorded until the process
                // bootstraps one (`appattest serve` does).
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strict
        ),
        // What the SQL stores share: planning a batch of acceptances into statements (no product)
        .target(name: "AppAttestSQLSupport", dependencies: ["AppAttestStore", "AppAttest"], swiftSettings: strict),
        .target(
            name: "AppAttestSQLite",
            dependencies: [
                "AppAttestStore", "AppAttestSQLSupport", "AppAttest", .product(name: "Logging", package: "swift-log"),
                .product(name: "GRDB", package: "GRDB.swift", condition: sqlite),
                .product(name: "GRDBSQLite", package: "GRDB.swift", condition: sqlite),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestPostgres",
            dependencies: [
                "AppAttestStore", "AppAttestSQLSupport", "AppAttest", .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: postgres),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: postgres),
            ],
            swiftSettings: strict
        ),

        // MARK: The HTTP layer the adapters and the service share
        .target(
            name: "AppAttestHTTP",
            dependencies: [
                "AppAttest", "AppAttestStore", "AppAttestLifecycle", "AppAttestWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: http),
            ],
            swiftSettings: strict
        ),

        // MARK: Apple's server APIs (I/O starts here)
        .target(
            name: "AppleDeviceAPI",
            dependencies: [
                "AppAttest",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: appleAPI),
                .product(name: "JWTKit", package: "jwt-kit", condition: appleAPI),
            ],
            swiftSettings: strict
        ),
        // A local stand-in for Apple's DeviceCheck and receipt servers (needs AppleServerAPI and Hummingbird).
        .target(
            name: "AppleDeviceAPITesting",
            dependencies: [
                "AppAttest", "AppAttestTesting",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "JWTKit", package: "jwt-kit", condition: appleAPI),
                .product(name: "Hummingbird", package: "hummingbird", condition: hummingbird),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: hummingbird),
            ],
            swiftSettings: strict
        ),

        // MARK: Adapters
        .target(
            name: "AppAttestHummingbird",
            dependencies: [
                "AppAttest", "AppAttestStore", "AppAttestLifecycle", "AppAttestHTTP",
                .product(name: "Hummingbird", package: "hummingbird", condition: hummingbird),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth", condition: hummingbird),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: hummingbird),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: hummingbird),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "AppAttestVapor",
            dependencies: [
                "AppAttest", "AppAttestStore", "AppAttestLifecycle", "AppAttestHTTP",
                .product(name: "Vapor", package: "vapor", condition: vapor),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: vapor),
            ],
            swiftSettings: strict
        ),

        // MARK: `appattest serve`: the verification service, a module so that tests drive it (not a product)
        .target(
            name: "AppAttestServer",
            dependencies: [
                "AppAttest", "AppAttestStore", "AppAttestLifecycle", "AppAttestHTTP", "AppAttestWire",
                .product(name: "Crypto", package: "swift-crypto"),
                "AppAttestSQLite",
                "AppAttestPostgres", "AppAttestHummingbird", "AppleDeviceAPI",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird", condition: service),
                .product(name: "HummingbirdCore", package: "hummingbird", condition: service),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: service),
                .product(name: "Prometheus", package: "swift-prometheus", condition: service),
                .product(name: "Metrics", package: "swift-metrics", condition: service),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: service),
                .product(name: "NIOCore", package: "swift-nio", condition: service),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras", condition: service),
                .product(name: "OTel", package: "swift-otel", condition: service),
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: service),
            ],
            resources: [.copy("openapi.yaml")],
            swiftSettings: strict
        ),
        // The typed client of `appattest serve`: generated from its openapi.yaml by Scripts/openapi.sh, committed.
        .target(
            name: "AppAttestServiceClient",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime", condition: serviceClient),
                .product(
                    name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client", condition: serviceClient
                ),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: serviceClient),
            ],
            exclude: ["openapi-generator-config.yaml"]
        ),
        // A process that drives a store, for the multi-process and SIGKILL tests and the store benchmark.
        .executableTarget(
            name: "appattest-store-worker",
            dependencies: [
                "AppAttestStore", "AppAttestLifecycle", "AppAttestSQLite", "AppAttestPostgres", "AppAttestTesting",
                "AppAttest",
            ],
            swiftSettings: strict
        ),

        // MARK: The commands: `appattest` is what operators ship, `appattest-dev` the developer tools
        .target(
            name: "AppAttestCommandSupport",
            dependencies: [
                "AppAttest", "AppAttestCBOR", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "appattest",
            dependencies: [
                "AppAttest", "AppAttestCommandSupport", "AppAttestVectors", "AppAttestStore", "AppAttestCBOR",
                "AppleDeviceAPI", "AppAttestServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: service),
                .target(name: "CAppAttestAllocator", condition: service),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "appattest-dev",
            dependencies: [
                "AppAttest", "AppAttestCommandSupport", "AppAttestVectors", "AppAttestTesting", "AppAttestStore",
                "AppAttestLifecycle", "AppAttestWire", "AppAttestCrypto", "AppAttestCBOR", "AppleDeviceAPI",
                "AppleDeviceAPITesting", "AppAttestSQLite", "AppAttestPostgres", "AppAttestServer",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: service),
                .product(name: "NIOCore", package: "swift-nio", condition: service),
            ],
            swiftSettings: strict
        ),

        // MARK: Fuzzing: a replayer normally, a libFuzzer target when built by Fuzz/run.sh
        .executableTarget(name: "appattest-fuzz", dependencies: ["AppAttest", "AppAttestCBOR"], swiftSettings: strict),

        // MARK: Tests (`swift test --enable-all-traits`; a test of a trait's module is compiled with that trait)
        .testTarget(name: "AppAttestCBORTests", dependencies: ["AppAttestCBOR"], swiftSettings: strict),
        .testTarget(
            name: "AppAttestTests",
            dependencies: ["AppAttest", "AppAttestVectors", "AppAttestCBOR"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestCryptoTests",
            dependencies: [
                "AppAttestCrypto", "AppAttest",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestHTTPTests",
            dependencies: [
                "AppAttestHTTP", "AppAttest", "AppAttestWire", "AppAttestTesting", "AppAttestLifecycle",
                "AppAttestStore", .product(name: "HTTPTypes", package: "swift-http-types", condition: http),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestCommandTests",
            dependencies: [
                "appattest", "appattest-dev", "AppAttestStore", "AppAttestLifecycle", "AppAttestTesting",
                "AppAttestCommandSupport",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "AppAttestTestingTests",
            dependencies: [
                "AppAttestTesting", "AppAttest", "AppAttestVectors", "AppAttestCBOR", "AppAttestCrypto",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppleDeviceAPITests",
            dependencies: [
                "AppleDeviceAPI", "AppleDeviceAPITesting", "AppAttestTesting", "AppAttest",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: appleAPI),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestStoreTests",
            dependencies: [
                "AppAttestStore", "AppAttestLifecycle", "AppAttestSQLSupport", "AppAttestSQLite", "AppAttestPostgres",
                "AppAttestTesting", "AppAttest", "appattest-store-worker",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "GRDB", package: "GRDB.swift", condition: sqlite),
                .product(name: "GRDBSQLite", package: "GRDB.swift", condition: sqlite),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: postgres),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestHummingbirdTests",
            dependencies: [
                "AppAttestHummingbird", "AppAttestHTTP", "AppAttestStore", "AppAttestLifecycle", "AppAttestTesting",
                "AppAttest", "AppAttestWire", "AppAttestSQLite", "AppAttestPostgres",
                .product(name: "HummingbirdTesting", package: "hummingbird", condition: hummingbird),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: hummingbird),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestVaporTests",
            dependencies: [
                "AppAttestVapor", "AppAttestHTTP", "AppAttestStore", "AppAttestLifecycle", "AppAttestTesting",
                "AppAttest", "AppAttestWire", .product(name: "VaporTesting", package: "vapor", condition: vapor),
            ],
            swiftSettings: strict
        ),
        // The end-to-end tests' own app API: a client generated from its openapi.yaml by Scripts/openapi.sh.
        .target(
            name: "AppAttestTestAppAPI",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime", condition: clientMiddleware),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: clientMiddleware),
            ],
            path: "Tests/AppAttestTestAppAPI",
            exclude: ["openapi.yaml", "openapi-generator-config.yaml"]
        ),
        .testTarget(
            name: "AppAttestClientTests",
            dependencies: [
                "AppAttestClient", "AppAttestTesting", "AppAttest", "AppAttestStore", "AppAttestLifecycle",
                "AppAttestWire", "AppAttestSQLite", "AppAttestHTTP",
                "AppAttestHummingbird", "AppAttestVapor", "AppAttestServer", "AppAttestServiceClient",
                "AppAttestClientMiddleware", "AppAttestTestAppAPI",
                .product(
                    name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client", condition: serviceClient
                ),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime", condition: serviceClient),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: clientMiddleware),
                .product(name: "Hummingbird", package: "hummingbird", condition: service),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: service),
                .product(name: "Vapor", package: "vapor", condition: vapor),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AppAttestServerTests",
            dependencies: [
                "AppAttestServer", "AppAttestHTTP", "AppAttestStore", "AppAttestLifecycle", "AppAttestWire",
                "AppAttestSQLite", "AppAttestTesting", "AppAttest",
                "AppleDeviceAPITesting", "appattest", "appattest-dev", "AppAttestHummingbird", "AppAttestServiceClient",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime", condition: serviceClient),
                .product(
                    name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client", condition: serviceClient
                ),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: service),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: service),
                .product(name: "OpenAPIKit", package: "OpenAPIKit", condition: service),
                .product(name: "Yams", package: "Yams", condition: service),
                .product(name: "HummingbirdTesting", package: "hummingbird", condition: service),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: service),
            ],
            swiftSettings: strict
        ),
    ]
)
