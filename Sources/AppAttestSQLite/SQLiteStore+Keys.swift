#if SQLite
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import GRDB

extension SQLiteAppAttestStore {
    public func insertKey(_ record: KeyRecord, maximumKeysPerUser: Int?) async throws(StoreError) -> KeyInsertion {
        try await write { db -> KeyInsertion in
            try db.cachedStatement(
                sql: """
                    INSERT INTO keys (key_id, user_id, app_id, environment, public_key, receipt, risk_metric,
                                      created_at, receipt_updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key_id) DO NOTHING
                    """
            ).execute(
                arguments: [
                    Data(record.keyID.rawValue), record.userID, record.key.appID.rawValue,
                    record.key.environment.rawValue, Data(record.key.publicKey.x963Representation),
                    Data(record.receipt), record.riskMetric,
                    record.createdAt.timeIntervalSince1970, record.receiptUpdatedAt.timeIntervalSince1970,
                ])
            if db.changesCount == 1 {
                // In the same transaction: a key is never seen without its counter.
                try db.cachedStatement(
                    sql: "INSERT INTO key_counters (key_id, counter, seen, revoked_at) VALUES (?, ?, 0, ?)"
                ).execute(
                    arguments: [
                        Data(record.keyID.rawValue), Int64(record.key.counter), record.revokedAt?.timeIntervalSince1970,
                    ])
                try Self.appendEvent(KeyEvent(keyID: record.keyID, kind: .attested, time: record.createdAt), db)
                var superseded: [KeyID] = []
                if let userID = record.userID, let limit = maximumKeysPerUser {
                    // The user's active keys of this App ID, newest first, beyond the limit with the new one counted.
                    // SQLite has one writer at a time: nothing registers for this user meanwhile.
                    let rows = try Row.fetchAll(
                        try db.cachedStatement(
                            sql: """
                                SELECT keys.key_id FROM keys JOIN key_counters ON key_counters.key_id = keys.key_id
                                WHERE keys.user_id = ? AND keys.app_id = ? AND key_counters.revoked_at IS NULL
                                    AND keys.key_id <> ?
                                ORDER BY keys.created_at DESC, keys.key_id DESC LIMIT -1 OFFSET ?
                                """),
                        arguments: [userID, record.key.appID.rawValue, Data(record.keyID.rawValue), max(0, limit - 1)])
                    for row in rows {
                        let old = try Self.keyID(row[0])
                        try db.cachedStatement(
                            sql: "UPDATE key_counters SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL"
                        ).execute(arguments: [record.createdAt.timeIntervalSince1970, Data(old.rawValue)])
                        try Self.appendEvent(
                            KeyEvent(
                                keyID: old, kind: .superseded, time: record.createdAt,
                                detail: record.keyID.base64EncodedString), db)
                        superseded.append(old)
                    }
                }
                return .inserted(superseding: superseded)
            }
            guard let stored = try Self.fetchKeys(db, Self.selectKey, [Data(record.keyID.rawValue)]).first else {
                throw StoreError(.corrupted, "a key that conflicts but cannot be read")
            }
            return .duplicate(stored)
        }
    }

    public func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        try await keys(withIDs: [keyID]).first
    }

    public func keys(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        try await keys(keyIDs, .whole)
    }

    package func keysWithoutReceipts(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        try await keys(keyIDs, .withoutReceipt)
    }

    package func keysWithoutCounters(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        try await keys(keyIDs, .unchanging)
    }

    /// The keys' `columns`; without the index that the reads without receipts name (``readsKeysFromIndex``), the keys
    /// whole, their receipts dropped (and their counters and revocations as stored).
    private func keys(_ keyIDs: [KeyID], _ columns: KeyColumns) async throws(StoreError) -> [KeyRecord] {
        guard columns == .whole || readsKeysFromIndex else {
            return try await keys(keyIDs, .whole).map(\.withoutReceipt)
        }
        var records: [KeyRecord] = []
        for start in stride(from: 0, to: keyIDs.count, by: SQLiteKeyReader.maximumKeys) {
            let batch = Array(keyIDs[start..<min(start + SQLiteKeyReader.maximumKeys, keyIDs.count)])
            // On the reader's connections, on the calling thread: a read takes microseconds, less than handing it to
            // a queue's thread and the answer back. The thread is held about as long as a signature check holds it
            // (longer only while another process holds SQLite's lock, up to the busy timeout), and the service runs
            // few such reads at once (one at a time from its `KeyReadBatcher`, and the API's odd lookup of a key).
            // When all the reader's connections are busy, or one cannot be opened, through GRDB's pool.
            if let read = try reader.keys(batch, columns) {
                records += read
                continue
            }
            let arguments = StatementArguments(batch.map { Data($0.rawValue) })
            let sql = Self.selectKeys(count: batch.count, columns)
            records += try await read { db in try Self.fetchKeys(db, sql, arguments) }
        }
        return records
    }

    public func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord] {
        try await read { db in
            try Self.fetchKeys(db, "\(Self.selectKeys) WHERE user_id = ? ORDER BY created_at, key_id", [userID])
        }
    }

    public func revokeKey(_ keyID: KeyID, at time: Date, reason: String?) async throws(StoreError) -> Bool {
        try await write { db in
            try db.cachedStatement(
                sql: "UPDATE key_counters SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL"
            )
            .execute(
                arguments: [time.timeIntervalSince1970, Data(keyID.rawValue)])
            guard db.changesCount == 1 else { return false }
            try Self.appendEvent(KeyEvent(keyID: keyID, kind: .revoked, time: time, detail: reason), db)
            return true
        }
    }

    public func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date)
        async throws(StoreError) -> Bool
    {
        try await write { db in
            try db.cachedStatement(
                sql: """
                    UPDATE keys SET receipt = ?, risk_metric = ?, receipt_updated_at = ?
                    WHERE key_id = ? AND NOT EXISTS (
                        SELECT 1 FROM key_counters WHERE key_counters.key_id = keys.key_id AND revoked_at IS NOT NULL)
                    """
            ).execute(
                arguments: [Data(receipt), riskMetric, time.timeIntervalSince1970, Data(keyID.rawValue)])
            guard db.changesCount == 1 else { return false }
            try Self.appendEvent(
                KeyEvent(keyID: keyID, kind: .receiptRefreshed, time: time, detail: riskMetric.map { "\($0)" }), db)
            return true
        }
    }
}
#endif  // SQLite
