#if SQLite
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import GRDB

extension SQLiteAppAttestStore {
    public func insertKey(_ record: KeyRecord) async throws(StoreError) -> KeyInsertion {
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
                return .inserted
            }
            guard
                let row = try Row.fetchOne(
                    try db.cachedStatement(sql: Self.selectKey),
                    arguments: [Data(record.keyID.rawValue)])
            else {
                throw StoreError(.corrupted, "a key that conflicts but cannot be read")
            }
            return .duplicate(try Self.keyRecord(row))
        }
    }

    public func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        try await read { db -> KeyRecord? in
            guard
                let row = try Row.fetchOne(
                    try db.cachedStatement(sql: Self.selectKey), arguments: [Data(keyID.rawValue)])
            else {
                return nil
            }
            return try Self.keyRecord(row)
        }
    }

    public func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord] {
        try await read { db -> [KeyRecord] in
            let rows = try Row.fetchAll(
                try db.cachedStatement(sql: "\(Self.selectKeys) WHERE user_id = ? ORDER BY created_at, key_id"),
                arguments: [userID])
            var records: [KeyRecord] = []
            for row in rows { records.append(try Self.keyRecord(row)) }
            return records
        }
    }

    public func revokeKey(_ keyID: KeyID, at time: Date) async throws(StoreError) -> Bool {
        try await write { db in
            try db.cachedStatement(
                sql: "UPDATE key_counters SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL"
            )
            .execute(
                arguments: [time.timeIntervalSince1970, Data(keyID.rawValue)])
            return db.changesCount == 1
        }
    }

    public func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date)
        async throws(StoreError) -> Bool
    {
        try await write { db in
            try db.cachedStatement(
                sql: "UPDATE keys SET receipt = ?, risk_metric = ?, receipt_updated_at = ? WHERE key_id = ?"
            ).execute(
                arguments: [Data(receipt), riskMetric, time.timeIntervalSince1970, Data(keyID.rawValue)])
            return db.changesCount == 1
        }
    }
}
#endif  // SQLite
