#if Hummingbird && SQLite && PostgreSQL
import AppAttest
import AppAttestWire
import AppAttestHTTP
import AppAttestHummingbird
import AppAttestPostgres
import AppAttestSQLite
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// The three freshness modes over a real router, on every store (“Protecting routes”, Freshness), and the reorder
/// window with eight requests in flight.
@Suite("Freshness modes and the reorder window over Hummingbird")
struct FreshnessTests {
    enum Store: String, CaseIterable, CustomTestStringConvertible {
        case memory, sqlite, postgres
        var testDescription: String { rawValue }

        static var available: [Store] {
            let url = ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_URL"]
            if url == nil && ProcessInfo.processInfo.environment["CI"] == nil { return [.memory, .sqlite] }
            return allCases
        }

        func open() async throws -> any AppAttestStore {
            switch self {
            case .memory: return MemoryAppAttestStore()
            case .sqlite:
                return try SQLiteAppAttestStore(
                    path: FileManager.default.temporaryDirectory.appendingPathComponent("fresh-\(UUID()).sqlite").path)
            case .postgres:
                let url = try #require(ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_URL"])
                return try await PostgresAppAttestStore.connect(url: url)
            }
        }
    }

    static let tests = MiddlewareTests()
    static let now = Date()

    /// `/challenge/order`, `/next/order` and `/time/order`, each with its freshness; `window` for the counters.
    static func router(_ store: any AppAttestStore, window: Int = 1) throws -> Router<AppAttestRequestContext> {
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    appID: MiddlewareTests.appID, environment: .production,
                    trustAnchor: MiddlewareTests.authority.trustAnchor)),
            store: store, counterPolicy: .reorderWindow(window))
        let router = Router(context: AppAttestRequestContext.self)
        router.addRoutes(AppAttestRoutes(service: service, rateLimiter: nil).collection, atPath: "appattest")
        for (path, freshness) in [
            ("challenge", AppAttestFreshness.challengePerRequest), ("next", .nextChallengeInResponse),
            ("time", .timestamp(window: .seconds(60))),
        ] {
            router.group(RouterPath(path)).add(middleware: AppAttestMiddleware(service: service, freshness: freshness))
                .post("order") { _, context in "ok \(try context.requireIdentity().counter)" }
        }
        return router
    }

    static func timestamped(_ device: SimulatedDevice, path: String, milliseconds: Int64, header: Int64? = nil)
        throws -> HTTPFields
    {
        let clientData = try AppAttestClientData.request(
            method: "POST", pathAndQuery: path, bodySHA256: AppAttestSHA256Testing.empty,
            timestampMilliseconds: milliseconds
        ).bytes
        var fields = HTTPFields()
        fields[AppAttestHTTPHeaders.keyID] = device.keyID.base64EncodedString
        fields[AppAttestHTTPHeaders.assertion] = Data(try device.assert(clientData: clientData)).base64EncodedString()
        fields[AppAttestHTTPHeaders.timestamp] = String(header ?? milliseconds)
        return fields
    }

    @Test(
        "the next challenge comes with each response: ten requests, one challenge fetched", arguments: Store.available)
    func nextChallenge(_ store: Store) async throws {
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        try await Application(router: try Self.router(try await store.open())).test(.router) { client in
            try await Self.tests.register(client, device)
            var challenge = try await Self.tests.challenge(client, purpose: "assertion", keyID: device.keyID)
            let first = challenge
            for round in 1...10 {
                let headers = try Self.tests.signed(device, path: "/next/order", body: "", challenge: challenge)
                challenge = try await client.execute(uri: "/next/order", method: .post, headers: headers) { response in
                    #expect(response.status == .ok, "round \(round)")
                    let next = try #require(response.headers[AppAttestHTTPHeaders.nextChallenge])
                    return try #require(RequestBindingLayout.decodeBase64URL(next))
                }
            }
            // Every challenge is single-use: the first one again is refused, and so is a replayed request.
            let replay = try Self.tests.signed(device, path: "/next/order", body: "", challenge: first)
            try await client.execute(uri: "/next/order", method: .post, headers: replay) { response in
                #expect(response.status == .conflict)
                #expect(Self.tests.code(response) == "challengeUnknown")
                #expect(response.headers[AppAttestHTTPHeaders.nextChallenge] == nil)
            }
            // The per-request mode gives none.
            let c = try await Self.tests.challenge(client, purpose: "assertion", keyID: device.keyID)
            let plain = try Self.tests.signed(device, path: "/challenge/order", body: "", challenge: c)
            try await client.execute(uri: "/challenge/order", method: .post, headers: plain) { response in
                #expect(response.status == .ok)
                #expect(response.headers[AppAttestHTTPHeaders.nextChallenge] == nil)
            }
        }
    }

    @Test(
        "timestamps: accepted within the window, once; stale, altered or missing ones refused",
        arguments: Store.available)
    func timestamps(_ store: Store) async throws {
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        try await Application(router: try Self.router(try await store.open())).test(.router) { client in
            try await Self.tests.register(client, device)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let fresh = try Self.timestamped(device, path: "/time/order", milliseconds: now)
            try await client.execute(uri: "/time/order", method: .post, headers: fresh) { response in
                #expect(response.status == .ok, "\(String(buffer: response.body))")
            }
            try await client.execute(uri: "/time/order", method: .post, headers: fresh) { response in
                #expect(response.status == .conflict, "a replay within the window is refused by the counter")
            }
            let stale = try Self.timestamped(device, path: "/time/order", milliseconds: now - 120_000)
            try await client.execute(uri: "/time/order", method: .post, headers: stale) { response in
                #expect(response.status == .unauthorized)
                #expect(Self.tests.code(response) == "staleTimestamp")
            }
            // Signed for one time, sent with another: the signature covers the timestamp.
            let altered = try Self.timestamped(device, path: "/time/order", milliseconds: now - 1000, header: now)
            try await client.execute(uri: "/time/order", method: .post, headers: altered) { response in
                #expect(response.status == .unauthorized)
                #expect(Self.tests.code(response) == "signatureInvalid")
            }
            // A challenge-bound request is not a timestamped one (separate domains).
            let c = try await Self.tests.challenge(client, purpose: "assertion", keyID: device.keyID)
            let bound = try Self.tests.signed(device, path: "/time/order", body: "", challenge: c)
            try await client.execute(uri: "/time/order", method: .post, headers: bound) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test("reorder window: 8 requests in flight at once, 100 in all, every one accepted", arguments: Store.available)
    func eightInFlight(_ store: Store) async throws {
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        try await Application(router: try Self.router(try await store.open(), window: 8)).test(.router) { client in
            try await Self.tests.register(client, device)
            var accepted = 0
            for _ in 0..<13 {
                // Eight assertions generated in order, sent at once and in reverse, like concurrent requests that
                // overtake each other.
                let base = Int64(Date().timeIntervalSince1970 * 1000)
                let batch = try (0..<8).map { index in
                    try Self.timestamped(device, path: "/time/order", milliseconds: base + Int64(index))
                }.reversed()
                accepted += try await withThrowingTaskGroup(of: Int.self) { group in
                    for headers in batch.prefix(min(8, 100 - accepted)) {
                        group.addTask {
                            try await client.execute(uri: "/time/order", method: .post, headers: headers) {
                                $0.status == .ok ? 1 : 0
                            }
                        }
                    }
                    return try await group.reduce(0, +)
                }
            }
            #expect(accepted == 100)
        }
    }
}

/// SHA-256 of the empty body.
enum AppAttestSHA256Testing {
    static let empty: [UInt8] = [
        0xE3, 0xB0, 0xC4, 0x42, 0x98, 0xFC, 0x1C, 0x14, 0x9A, 0xFB, 0xF4, 0xC8, 0x99, 0x6F, 0xB9, 0x24,
        0x27, 0xAE, 0x41, 0xE4, 0x64, 0x9B, 0x93, 0x4C, 0xA4, 0x95, 0x99, 0x1B, 0x78, 0x52, 0xB8, 0x55,
    ]
}
#endif  // Hummingbird && SQLite && PostgreSQL
