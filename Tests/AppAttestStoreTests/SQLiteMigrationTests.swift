#if SQLite
import AppAttest
import AppAttestSQLite
import AppAttestStore
import Foundation
import GRDB
import Testing

/// A database written by an earlier version opens, migrates, and keeps every key's state.
@Suite("SQLite migrations")
struct SQLiteMigrationTests {
    /// The tables and indexes as version 2 of the migrations left them (before the reorder window).
    static let versionTwoTables = """
        CREATE TABLE challenges (
            challenge BLOB PRIMARY KEY NOT NULL, purpose TEXT NOT NULL, key_id BLOB, user_id TEXT,
            expires_at REAL NOT NULL);
        CREATE INDEX challenges_expiry ON challenges(expires_at);
        CREATE TABLE keys (
            key_id BLOB PRIMARY KEY NOT NULL, user_id TEXT, app_id TEXT NOT NULL, environment TEXT NOT NULL,
            public_key BLOB NOT NULL,
            counter INTEGER NOT NULL CHECK (counter BETWEEN 0 AND 4294967295),
            receipt BLOB NOT NULL, risk_metric INTEGER, created_at REAL NOT NULL,
            receipt_updated_at REAL NOT NULL, revoked_at REAL);
        CREATE INDEX keys_user ON keys(user_id);
        CREATE INDEX challenges_key ON challenges(key_id);
        CREATE INDEX challenges_user ON challenges(user_id);
        """

    /// The schema and data as version 3 of the migrations left them: the counter, its window's bits and the revocation
    /// in `keys`, beside the receipt.
    static func versionThreeDatabase(
        _ path: String, keys: [(key: AttestedPublicKey, counter: Int64, seen: Int64, revoked: Bool)]
    )
        throws
    {
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2'), ('v3');
                    """ + versionTwoTables + """
                        ALTER TABLE keys ADD COLUMN seen INTEGER NOT NULL DEFAULT 0;
                        """)
            for key in keys {
                try db.execute(
                    sql: """
                        INSERT INTO keys (key_id, user_id, app_id, environment, public_key, counter, receipt,
                                          risk_metric, created_at, receipt_updated_at, revoked_at, seen)
                        VALUES (?, 'user', 'STORE12345.com.example.store', 'production', ?, ?, ?, 2, 100, 200, ?, ?)
                        """,
                    arguments: [
                        Data(key.key.keyID.rawValue), Data(key.key.x963Representation), key.counter,
                        Data(repeating: 7, count: 5_000), key.revoked ? 300.0 : nil, key.seen,
                    ])
            }
        }
        try queue.close()
    }

    @Test("a database migrated by a newer version is opened with a warning in the log")
    func newerSchema() throws {
        let path = NSTemporaryDirectory() + "appattest-newer-\(UUID().uuidString).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let quiet = LogRecords()
        do { _ = try SQLiteAppAttestStore(path: path, logger: quiet.logger) }
        #expect(quiet.messages(at: .warning).isEmpty)
        // A migration this version does not know, as a newer one would have recorded it.
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99-newer')") }
        try queue.close()
        let records = LogRecords()
        _ = try SQLiteAppAttestStore(path: path, logger: records.logger)
        #expect(records.messages(at: .warning).contains { $0.contains("newer version") })
    }

    @Test("a version 3 database: counters, window bits and revocations move to key_counters, and keep working")
    func fromVersionThree() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "appattest-migration-\(UUID().uuidString).sqlite"
        ).path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let live = TestKeys.publicKey(1).keyID
        let revoked = TestKeys.publicKey(2).keyID
        // Highest 7; bits 0 and 2 set: counters 6 and 4 were accepted, 5 was not.
        try Self.versionThreeDatabase(
            path, keys: [(TestKeys.publicKey(1), 7, 0b101, false), (TestKeys.publicKey(2), 3, 0, true)])

        let store = try SQLiteAppAttestStore(path: path)
        let record = try #require(try await store.key(live))
        #expect(record.key.counter == 7)
        #expect(record.receipt == [UInt8](repeating: 7, count: 5_000))
        #expect(record.riskMetric == 2)
        #expect(record.revokedAt == nil)
        #expect(try await store.key(revoked)?.revokedAt == Date(timeIntervalSince1970: 300))
        #expect(try await store.keys(forUser: "user").count == 2)
        // The assertion path's read, from the index the last migration builds over the keys already stored.
        var lean = record
        lean.receipt = []
        var revokedLean = try #require(try await store.key(revoked))
        revokedLean.receipt = []
        let leanRead = try await store.keysWithoutReceipts(withIDs: [live, revoked])
        #expect(Set(leanRead.map(\.keyID)) == [live, revoked])
        #expect(leanRead.first { $0.keyID == live } == lean)
        #expect(leanRead.first { $0.keyID == revoked } == revokedLean)
        // A cache miss's read leaves the counters and the revocation out: the acceptances below decide them.
        lean.key.counter = 0
        revokedLean.key.counter = 0
        revokedLean.revokedAt = nil
        let unchanging = try await store.keysWithoutCounters(withIDs: [live, revoked])
        #expect(unchanging.first { $0.keyID == live } == lean)
        #expect(unchanging.first { $0.keyID == revoked } == revokedLean)

        func accept(_ key: KeyID, _ counter: UInt32) async throws -> AssertionAcceptanceOutcome {
            try await store.acceptAssertion(
                .init(keyID: key, counter: counter, counterPolicy: .reorderWindow(8), challenge: nil))
        }
        #expect(try await accept(live, 6) == .counterRefused(highestCounter: 7))
        #expect(try await accept(live, 4) == .counterRefused(highestCounter: 7))
        #expect(try await accept(live, 5) == .accepted(highestCounter: 7))
        #expect(try await accept(live, 5) == .counterRefused(highestCounter: 7))
        #expect(try await accept(live, 8) == .accepted(highestCounter: 8))
        #expect(try await accept(revoked, 4) == .keyRevoked)
        await store.close()

        // The old columns are gone, so that nothing reads a stale counter; a second open migrates nothing more.
        let queue = try DatabaseQueue(path: path)
        let columns = try await queue.read { db in try db.columns(in: "keys").map(\.name) }
        #expect(!columns.contains("counter") && !columns.contains("seen") && !columns.contains("revoked_at"))
        let indexes = try await queue.read { db in try db.indexes(on: "keys").map(\.name) }
        #expect(indexes.contains("keys_without_receipts"))
        try queue.close()
        let reopened = try SQLiteAppAttestStore(path: path)
        #expect(try await reopened.key(live)?.key.counter == 8)
        await reopened.close()
    }

    @Test("a version 2 database, from before the reorder window: no counter below a key's highest is accepted again")
    func fromVersionTwo() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "appattest-migration-\(UUID().uuidString).sqlite"
        ).path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let key = TestKeys.publicKey(3).keyID
        let queue = try DatabaseQueue(path: path)
        try await queue.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2');
                    """ + Self.versionTwoTables)
            // Counters 1 to 7 were accepted under the strict rule.
            try db.execute(
                sql: """
                    INSERT INTO keys (key_id, user_id, app_id, environment, public_key, counter, receipt,
                                      risk_metric, created_at, receipt_updated_at, revoked_at)
                    VALUES (?, 'user', 'STORE12345.com.example.store', 'production', ?, 7, ?, NULL, 100, 200, NULL)
                    """,
                arguments: [
                    Data(key.rawValue), Data(TestKeys.publicKey(3).x963Representation), Data(repeating: 7, count: 16),
                ])
        }
        try queue.close()

        let store = try SQLiteAppAttestStore(path: path)
        try await expectCountersBelowSevenUsed(store, key)
        await store.close()
    }
}
#endif
