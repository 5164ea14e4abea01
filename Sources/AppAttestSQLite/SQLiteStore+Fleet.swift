#if SQLite
public import AppAttest
public import AppAttestStore
public import Foundation
import GRDB

extension SQLiteAppAttestStore {
    /// Writes an event in the caller's transaction.
    static func appendEvent(_ event: KeyEvent, _ db: Database) throws {
        try db.cachedStatement(sql: "INSERT INTO key_events (key_id, kind, time, detail) VALUES (?, ?, ?, ?)")
            .execute(
                arguments: [
                    Data(event.keyID.rawValue), event.kind.rawValue, event.time.timeIntervalSince1970, event.detail,
                ])
    }

    public func appendKeyEvent(_ event: KeyEvent) async throws(StoreError) {
        try await write { db in try Self.appendEvent(event, db) }
    }

    public func keyEvents(_ keyID: KeyID, limit: Int) async throws(StoreError) -> [KeyEvent] {
        try await read { db -> [KeyEvent] in
            let rows = try Row.fetchAll(
                try db.cachedStatement(
                    sql: "SELECT kind, time, detail FROM key_events WHERE key_id = ? ORDER BY id DESC LIMIT ?"),
                arguments: [Data(keyID.rawValue), max(0, limit)])
            return rows.reversed().map { row in
                KeyEvent(
                    keyID: keyID, kind: KeyEvent.Kind(rawValue: row[0]), time: Date(timeIntervalSince1970: row[1]),
                    detail: row[2])
            }
        }
    }

    public func purgeKeyEvents(before time: Date, batchSize limit: Int) async throws(StoreError) -> Int {
        try await deleteInBatches(
            """
            DELETE FROM key_events WHERE id IN (
                SELECT id FROM key_events WHERE time < ? AND \(KeyEvent.Kind.purgeableCondition) LIMIT ?)
            """, time.timeIntervalSince1970, batch: max(1, limit))
    }

    /// Runs `delete` (its arguments: `cutoff`, then `batch`, the most rows it deletes) until it deletes fewer than
    /// `batch` rows; how many it deleted in all. A batch a transaction, so that the one writer is never held for long
    /// by a backlog: acceptances commit in between.
    func deleteInBatches(_ delete: String, _ cutoff: Double, batch: Int) async throws(StoreError) -> Int {
        var total = 0
        while true {
            let deleted = try await write { db in
                try db.cachedStatement(sql: delete).execute(arguments: [cutoff, batch])
                return db.changesCount
            }
            total += deleted
            if deleted < batch { return total }
        }
    }

    public func takeToken(bucket name: String, rate: Double, burst: Double, now: Date) async throws(StoreError)
        -> TimeInterval?
    {
        let seconds = now.timeIntervalSince1970
        return try await write { db -> TimeInterval? in
            // One statement: the bucket refilled since it was last taken from (never backwards, whatever the
            // clocks of the processes that share the file), then one token taken when one is there.
            let taken = try Row.fetchOne(
                try db.cachedStatement(
                    sql: """
                        INSERT INTO token_buckets (name, tokens, updated_at) VALUES (?1, ?2 - 1, ?4)
                        ON CONFLICT (name) DO UPDATE SET
                            tokens = min(?2, tokens + max(0, ?4 - updated_at) * ?3) - 1,
                            updated_at = max(updated_at, ?4)
                        WHERE min(?2, tokens + max(0, ?4 - updated_at) * ?3) >= 1
                        RETURNING tokens
                        """),
                arguments: [name, burst, rate, seconds])
            if taken != nil { return nil }
            let available =
                try Double.fetchOne(
                    db, sql: "SELECT min(?2, tokens + max(0, ?3 - updated_at) * ?1) FROM token_buckets WHERE name = ?4",
                    arguments: [rate, burst, seconds, name]) ?? 0
            return max(0, 1 - available) / rate
        }
    }
}
#endif  // SQLite
