#if SQLite
import AppAttest
import AppAttestSQLite
import AppAttestStore
import Foundation
import GRDB
import Testing

/// The SQLite store's point reads of keys (a cache miss's read), which run on connections of their own beside GRDB's
/// pool: what they return, what another connection's writes do to them, and hostile rows.
@Suite("SQLite key reads")
struct SQLiteKeyReadTests {
    private static func withStore(_ body: (SQLiteAppAttestStore, String) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyreads-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("store.sqlite").path
        let store = try SQLiteAppAttestStore(path: path)
        try await body(store, path)
        await store.close()
    }

    @Test("a read of more keys than one statement binds returns each stored key once, as stored")
    func manyKeys() async throws {
        try await Self.withStore { store, _ in
            var stored: [KeyID: KeyRecord] = [:]
            let created = Date(timeIntervalSince1970: 1_700_000_000)
            for index in 0..<150 {
                let record = TestKeys.record(
                    index, counter: UInt32(index), userID: index.isMultiple(of: 2) ? "user-\(index)" : nil,
                    receipt: Array(repeating: UInt8(index % 256), count: index * 40),
                    riskMetric: index.isMultiple(of: 3) ? index : nil, createdAt: created)
                _ = try await store.insertKey(record, maximumKeysPerUser: nil)
                stored[record.keyID] = record
            }
            // 150 stored keys and 30 unknown ones, in one call: three statements' worth.
            let unknown = (150..<180).map { TestKeys.publicKey($0).keyID }
            let read = try await store.keys(withIDs: Array(stored.keys) + unknown)
            #expect(read.count == 150)
            #expect(Set(read.map(\.keyID)) == Set(stored.keys))
            for record in read {
                let expected = try #require(stored[record.keyID])
                #expect(record.key == expected.key)
                #expect(record.userID == expected.userID)
                #expect(record.receipt == expected.receipt)
                #expect(record.riskMetric == expected.riskMetric)
                #expect(record.createdAt == created)
                #expect(record.revokedAt == nil)
            }
            #expect(try await store.keys(withIDs: []).isEmpty)
            #expect(try await store.key(unknown[0]) == nil)
        }
    }

    @Test("a revocation and a counter stored through another connection show at the next read")
    func otherConnectionsWrites() async throws {
        try await Self.withStore { store, path in
            let record = TestKeys.record(0)
            _ = try await store.insertKey(record, maximumKeysPerUser: nil)
            // Read once, so that the connection that read is idle, with its statement prepared, when the other writes.
            #expect(try await store.key(record.keyID)?.revokedAt == nil)
            let other = try SQLiteAppAttestStore(path: path)
            let acceptance = AssertionAcceptance(
                keyID: record.keyID, counter: 7, counterPolicy: .strictlyIncreasing, challenge: nil)
            #expect(try await other.acceptAssertion(acceptance) == .accepted(highestCounter: 7))
            #expect(try await other.revokeKey(record.keyID, at: Date(), reason: "test"))
            await other.close()
            let after = try #require(try await store.key(record.keyID))
            #expect(after.key.counter == 7)
            #expect(after.revokedAt != nil)
        }
    }

    @Test("a row whose columns are not of the schema's types is refused as corrupted, and other keys still read")
    func hostileRows() async throws {
        try await Self.withStore { store, path in
            let good = TestKeys.record(0), bad = TestKeys.record(1), short = TestKeys.record(2)
            for record in [good, bad, short] { _ = try await store.insertKey(record, maximumKeysPerUser: nil) }
            // Written behind the store's back, as a damaged or hand-edited file would be: SQLite's columns take any
            // type unless the table is STRICT.
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                try db.execute(
                    sql: "UPDATE keys SET receipt = 'not a blob', user_id = 42 WHERE key_id = ?",
                    arguments: [Data(bad.keyID.rawValue)])
                try db.execute(
                    sql: "UPDATE keys SET public_key = x'04' WHERE key_id = ?", arguments: [Data(short.keyID.rawValue)])
            }
            try await queue.close()
            for keyID in [bad.keyID, short.keyID] {
                await #expect {
                    _ = try await store.key(keyID)
                } throws: { error in
                    (error as? StoreError)?.kind == .corrupted
                }
            }
            #expect(try await store.key(good.keyID)?.key == good.key)
        }
    }

    @Test("after close a read fails as unavailable")
    func closed() async throws {
        try await Self.withStore { store, _ in
            let record = TestKeys.record(0)
            _ = try await store.insertKey(record, maximumKeysPerUser: nil)
            #expect(try await store.key(record.keyID) != nil)
            await store.close()
            await #expect {
                _ = try await store.key(record.keyID)
            } throws: { error in
                (error as? StoreError)?.kind == .unavailable
            }
        }
    }
}
#endif  // SQLite
