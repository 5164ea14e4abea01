#if PostgreSQL
import AppAttest
import AppAttestPostgres
import AppAttestStore
import Foundation
import PostgresNIO
import Testing

/// A database written by an earlier version migrates on connect and keeps every key's state. Each case works in a
/// schema of its own (the connection's `search_path`), created and dropped here, so that the shared test database's
/// tables are never touched. (A database of its own would cost a `CREATE DATABASE`, whose WAL and fsync stall every
/// other test's connection for seconds.)
@Suite(
    "PostgreSQL migrations",
    .enabled(if: Backend.postgresURL != nil || ProcessInfo.processInfo.environment["CI"] != nil))
struct PostgresMigrationTests {
    /// Runs `body` with a client configuration whose tables are those of a new, empty schema, dropped afterwards.
    static func withSchema(_ body: (PostgresClient.Configuration) async throws -> Void) async throws {
        let base = try #require(Backend.postgresURL, "APPATTEST_POSTGRES_URL is not set")
        let name = "appattest_migration_\(UInt32.random(in: 0...UInt32.max))"
        let admin = PostgresClient(configuration: try PostgresAppAttestStore.configuration(url: base))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            defer { group.cancelAll() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA \(name)"))
            var configuration = try PostgresAppAttestStore.configuration(url: base)
            configuration.options.additionalStartupParameters = [("search_path", name)]
            do {
                try await body(configuration)
            } catch {
                _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(name) CASCADE"))
                throw error
            }
            try await admin.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(name) CASCADE"))
        }
    }

    @Test("a backlog of expired challenges larger than a batch is purged whole, batch after batch")
    func purgeInBatches() async throws {
        try await Self.withSchema { configuration in
            let store = try await PostgresAppAttestStore.connect(configuration: configuration)
            defer { store.shutdown() }
            let count = PostgresAppAttestStore.purgeBatch * 2 + 7
            let client = PostgresClient(configuration: configuration)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                try await client.query(
                    """
                    INSERT INTO app_attest_challenges (challenge, purpose, expires_at)
                    SELECT sha256(int8send(n)), 'assertion', 1000000000 FROM generate_series(1, \(count)) AS n
                    """)
            }
            let live = [UInt8](repeating: 9, count: 32)
            try await store.insertChallenge(
                ChallengeRecord(
                    challenge: live, purpose: "assertion", keyID: nil, userID: nil,
                    expiresAt: Date(timeIntervalSince1970: 1_000_003_600)))
            #expect(
                try await store.purgeExpiredChallenges(now: Date(timeIntervalSince1970: 1_000_000_001)) == count)
            #expect(try await store.challenge(live) != nil)
        }
    }

    @Test("the total's count leaves out challenges reserved for keys")
    func unreservedCount() async throws {
        try await Self.withSchema { configuration in
            let store = try await PostgresAppAttestStore.connect(configuration: configuration)
            defer { store.shutdown() }
            let now = Date()
            for keyID in [nil, TestKeys.publicKey(6).keyID, TestKeys.publicKey(7).keyID] {
                try await store.insertChallenge(
                    ChallengeRecord(
                        challenge: (0..<32).map { _ in UInt8.random(in: 0...255) }, purpose: "assertion", keyID: keyID,
                        userID: nil, expiresAt: now.addingTimeInterval(60)))
            }
            #expect(try await store.outstandingChallenges(keyID: nil, userID: nil, now: now) == 3)
            #expect(try await store.outstandingUnreservedChallenges(now: now) == 1)
            #expect(try await store.outstandingUnreservedChallenges(now: now.addingTimeInterval(61)) == 0)
        }
    }

    @Test("a schema newer than this version's is opened with a warning in the log")
    func newerSchema() async throws {
        try await Self.withSchema { configuration in
            let first = try await PostgresAppAttestStore.connect(configuration: configuration)
            first.shutdown()
            let client = PostgresClient(configuration: configuration)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                try await client.query("INSERT INTO app_attest_schema (version) VALUES (99)")
            }
            let records = LogRecords()
            let store = try await PostgresAppAttestStore.connect(configuration: configuration, logger: records.logger)
            store.shutdown()
            #expect(records.messages(at: .warning).contains { $0.contains("newer than this version") })
        }
    }

    @Test("a schema 1 database, from before the reorder window: no counter below a key's highest is accepted again")
    func fromSchemaOne() async throws {
        let key = TestKeys.publicKey(5).keyID
        try await Self.withSchema { configuration in
            // The tables as schema 1 wrote them, and a key whose counters 1 to 7 were accepted under the strict rule.
            let client = PostgresClient(configuration: configuration)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                for statement in [
                    "CREATE TABLE app_attest_schema (version INT NOT NULL)",
                    "INSERT INTO app_attest_schema (version) VALUES (1)",
                    """
                    CREATE TABLE app_attest_challenges (challenge BYTEA PRIMARY KEY, purpose TEXT NOT NULL,
                        key_id BYTEA, user_id TEXT, expires_at DOUBLE PRECISION NOT NULL)
                    """,
                    """
                    CREATE TABLE app_attest_keys (key_id BYTEA PRIMARY KEY, user_id TEXT, app_id TEXT NOT NULL,
                        environment TEXT NOT NULL, public_key BYTEA NOT NULL,
                        counter BIGINT NOT NULL CHECK (counter BETWEEN 0 AND 4294967295), receipt BYTEA NOT NULL,
                        risk_metric BIGINT, created_at DOUBLE PRECISION NOT NULL,
                        receipt_updated_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION)
                    """,
                ] {
                    try await client.query(PostgresQuery(unsafeSQL: statement))
                }
                let id = ByteBuffer(bytes: key.rawValue)
                let point = ByteBuffer(bytes: TestKeys.publicKey(5).x963Representation)
                let receipt = ByteBuffer(repeating: 7, count: 16)
                try await client.query(
                    """
                    INSERT INTO app_attest_keys (key_id, user_id, app_id, environment, public_key, counter, receipt,
                        risk_metric, created_at, receipt_updated_at, revoked_at)
                    VALUES (\(id), 'user', 'STORE12345.com.example.store', 'production', \(point), 7, \(receipt),
                        NULL, 100, 200, NULL)
                    """)
            }

            let store = try await PostgresAppAttestStore.connect(
                configuration: configuration, startupTimeout: .seconds(90))
            defer { store.shutdown() }
            try await expectCountersBelowSevenUsed(store, key)
            #expect(try await store.key(key)?.key.counter == 9)
        }
    }
}
#endif  // PostgreSQL
