#if PostgreSQL
import AppAttest
import AppAttestPostgres
import AppAttestStore
import Foundation
import Logging
import PostgresNIO
import Testing

/// How the PostgreSQL store connects: TLS as `sslmode` says, a client the application owns, and a bounded start-up.
/// The TLS cases need `APPATTEST_POSTGRES_CA` (the CA of the test server's certificate; `.ci/run` sets it).
@Suite("PostgreSQL connections: TLS as sslmode says, the application's client, a bounded start-up")
struct PostgresConnectionTests {
    static var url: String? { Backend.postgresURL }
    static var caFile: String? { ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_CA"] }
    static var tlsAvailable: Bool {
        (url != nil && caFile != nil) || ProcessInfo.processInfo.environment["CI"] != nil
    }

    /// The test server's URL with `host` and the query `parameters`.
    static func url(host: String = "127.0.0.1", _ parameters: String) throws -> String {
        let base = try #require(url, "APPATTEST_POSTGRES_URL is not set")
        var components = try #require(URLComponents(string: base))
        components.host = host
        components.query = parameters.isEmpty ? nil : parameters
        return try #require(components.string)
    }

    /// Whether the client's connection to the server is encrypted, as the server sees it.
    static func usesTLS(_ configuration: PostgresClient.Configuration) async throws -> Bool {
        let client = PostgresClient(configuration: configuration)
        return try await withThrowingTaskGroup(of: Bool?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            let rows = try await client.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            var encrypted = false
            for try await value in rows.decode(Bool.self) { encrypted = value }
            group.cancelAll()
            return encrypted
        }
    }

    /// A store works: a challenge goes in and comes out once.
    static func exercise(_ store: PostgresAppAttestStore) async throws {
        let challenge = (0..<32).map { _ in UInt8.random(in: 0...255) }
        try await store.insertChallenge(
            ChallengeRecord(
                challenge: challenge, purpose: "attestation", keyID: nil, userID: nil,
                expiresAt: Date().addingTimeInterval(60)))
        #expect(try await store.consumeChallenge(challenge, purpose: "attestation", keyID: nil, userID: nil) != nil)
    }

    @Test(
        "an operation that hangs past its deadline gives its connection back: the next one is answered",
        .enabled(if: url != nil), .timeLimit(.minutes(1)))
    func hungOperationFreesItsConnection() async throws {
        var configuration = try PostgresAppAttestStore.configuration(url: try Self.url(""))
        configuration.options.maximumConnections = 1
        configuration.options.minimumConnections = 1
        // A deadline long enough for a new connection on a loaded machine, short for the test.
        let store = try await PostgresAppAttestStore.connect(
            configuration: configuration, operationTimeout: .seconds(3))
        defer { store.shutdown() }
        let locked = (0..<32).map { _ in UInt8.random(in: 0...255) }
        try await store.insertChallenge(
            ChallengeRecord(
                challenge: locked, purpose: "attestation", keyID: nil, userID: nil,
                expiresAt: Date().addingTimeInterval(60)))
        // Another session holds the challenge's row: the store's consumption waits on the lock (as on a server that
        // stopped answering, nothing comes back).
        let admin = PostgresClient(configuration: try PostgresAppAttestStore.configuration(url: try Self.url("")))
        let adminRun = Task { await admin.run() }
        defer { adminRun.cancel() }
        let holding = AsyncStream<Void>.makeStream()
        let release = AsyncStream<Void>.makeStream()
        let holder = Task {
            try await admin.withConnection { connection in
                _ = try await connection.query("BEGIN", logger: Logger(label: "test"))
                _ = try await connection.query(
                    "SELECT 1 FROM app_attest_challenges WHERE challenge = \(Data(locked)) FOR UPDATE",
                    logger: Logger(label: "test"))
                holding.continuation.yield()
                for await _ in release.stream { break }
                _ = try await connection.query("ROLLBACK", logger: Logger(label: "test"))
            }
        }
        for await _ in holding.stream { break }
        await #expect(throws: StoreError.self) {
            try await store.consumeChallenge(locked, purpose: "attestation", keyID: nil, userID: nil)
        }
        // The pool's only connection was the one waiting: the next operation gets one within its own deadline (it
        // failed `unavailable` when the waiting connection stayed leased).
        #expect(try await store.challenge([UInt8](repeating: 7, count: 32)) == nil)
        release.continuation.yield()
        try await holder.value
    }

    @Test("sslmode=require and sslmode=verify-full with sslrootcert connect over TLS", .enabled(if: tlsAvailable))
    func tls() async throws {
        let ca = try #require(Self.caFile, "APPATTEST_POSTGRES_CA is not set")
        for url in [
            try Self.url("sslmode=require"),
            try Self.url(host: "localhost", "sslmode=verify-full&sslrootcert=\(ca)"),
        ] {
            #expect(try await Self.usesTLS(try PostgresAppAttestStore.configuration(url: url)), "\(url)")
            let store = try await PostgresAppAttestStore.connect(url: url, startupTimeout: .seconds(90))
            try await Self.exercise(store)
            store.shutdown()
        }
        #expect(try await !Self.usesTLS(try PostgresAppAttestStore.configuration(url: try Self.url("sslmode=disable"))))
    }

    @Test(
        "verify-full refuses a server whose certificate is not from a trusted CA", .enabled(if: tlsAvailable),
        .timeLimit(.minutes(1)))
    func untrustedServer() async throws {
        // The system's roots do not include the test CA.
        let url = try Self.url(host: "localhost", "sslmode=verify-full")
        await #expect(throws: StoreError.self) {
            _ = try await PostgresAppAttestStore.connect(url: url, startupTimeout: .seconds(3))
        }
    }

    @Test("an unknown sslmode or an unreadable sslrootcert is refused with a message")
    func badParameters() {
        #expect(throws: StoreError.self) {
            _ = try PostgresAppAttestStore.configuration(url: "postgres://u@h/db?sslmode=sometimes")
        }
        #expect(throws: StoreError.self) {
            _ = try PostgresAppAttestStore.configuration(url: "postgres://u@h/db?sslmode=verify-full&sslrootcert=/nope")
        }
    }

    @Test("the pool keeps 4 connections open and sends no keep-alive queries: no timer per operation")
    func poolWithoutTimers() throws {
        let options = try PostgresAppAttestStore.configuration(url: "postgres://u@h/db").options
        #expect(options.minimumConnections == 4)
        #expect(options.maximumConnections >= 4)
        #expect(options.keepAliveBehavior == nil)
    }

    @Test(
        "a maximum lowered below the connections kept open is the pool's size (PostgresNIO would trap)",
        .enabled(if: url != nil || ProcessInfo.processInfo.environment["CI"] != nil))
    func maximumBelowMinimum() async throws {
        var configuration = try PostgresAppAttestStore.configuration(url: try Self.url(""))
        configuration.options.maximumConnections = 2
        let store = try await PostgresAppAttestStore.connect(configuration: configuration)
        defer { store.shutdown() }
        try await Self.exercise(store)
    }

    @Test(
        "verify-ca and verify-full without a root file are refused as libpq refuses them; system roots only verify-full"
    )
    func modesWithoutRoots() throws {
        // The machine's HOME has no ~/.postgresql/root.crt (libpq's default root file) in the tests.
        for mode in ["verify-ca", "verify-full"] {
            #expect(throws: StoreError.self, "\(mode)") {
                _ = try PostgresAppAttestStore.configuration(url: "postgres://u@h/db?sslmode=\(mode)")
            }
        }
        for mode in ["require", "verify-ca", "prefer"] {
            #expect(throws: StoreError.self, "\(mode) with system roots") {
                _ = try PostgresAppAttestStore.configuration(
                    url: "postgres://u@h/db?sslmode=\(mode)&sslrootcert=system")
            }
        }
        _ = try PostgresAppAttestStore.configuration(url: "postgres://u@h/db?sslrootcert=system")
        _ = try PostgresAppAttestStore.configuration(url: "postgres://u@h/db?sslmode=verify-full&sslrootcert=system")
    }

    @Test(
        "sslmode=require with sslrootcert verifies the chain, as libpq's verify-ca: another CA's file is refused",
        .enabled(if: tlsAvailable), .timeLimit(.minutes(1)))
    func requireWithRootVerifies() async throws {
        let ca = try #require(Self.caFile, "APPATTEST_POSTGRES_CA is not set")
        // A CA that did not sign the server's certificate.
        let other = NSTemporaryDirectory() + "appattest-other-ca-\(UUID().uuidString).pem"
        let body = Data(Harness.authority.rootCertificate).base64EncodedString(options: [.lineLength64Characters])
        try "-----BEGIN CERTIFICATE-----\n\(body)\n-----END CERTIFICATE-----\n".write(
            toFile: other, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: other) }
        await #expect(throws: StoreError.self) {
            _ = try await PostgresAppAttestStore.connect(
                url: try Self.url("sslmode=require&sslrootcert=\(other)"), startupTimeout: .seconds(3))
        }
        // The right CA, by IP address: the chain is checked, the host name is not (verify-ca).
        let store = try await PostgresAppAttestStore.connect(
            url: try Self.url("sslmode=require&sslrootcert=\(ca)"), startupTimeout: .seconds(90))
        try await Self.exercise(store)
        store.shutdown()
    }

    @Test("an unreachable database fails within the start-up timeout", .timeLimit(.minutes(1)))
    func unreachable() async throws {
        let start = ContinuousClock.now
        await #expect(throws: StoreError.self) {
            _ = try await PostgresAppAttestStore.connect(
                url: "postgres://postgres@127.0.0.1:1/appattest?sslmode=disable", startupTimeout: .seconds(2))
        }
        // Failing rather than retrying for ever is what this guards (without a start-up timeout the pool retries for
        // ever). Alone it fails in about 3 s; the bound is wide because with every suite running at once on two cores
        // the timer's wake-up waits for a free thread (14.2 s in one run).
        #expect(ContinuousClock.now - start < .seconds(45))
    }

    @Test(
        "a store on the application's own client: it migrates and works, and never stops the client",
        .enabled(if: Backend.postgresURL != nil || ProcessInfo.processInfo.environment["CI"] != nil))
    func applicationClient() async throws {
        let client = PostgresClient(configuration: try PostgresAppAttestStore.configuration(url: try Self.url("")))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            let store = try await PostgresAppAttestStore.make(client: client, startupTimeout: .seconds(90))
            try await Self.exercise(store)
            store.shutdown()
            // The client is the application's: still running.
            let rows = try await client.query("SELECT 1")
            for try await value in rows.decode(Int.self) { #expect(value == 1) }
            group.cancelAll()
        }
    }
}
#endif  // PostgreSQL
