#if PostgreSQL
public import AppAttest
public import AppAttestStore
public import Foundation
import Logging
import PostgresNIO

extension PostgresAppAttestStore {
    public func appendKeyEvent(_ event: KeyEvent) async throws(StoreError) {
        let keyID = Data(event.keyID.rawValue), kind = event.kind.rawValue, time = event.time.timeIntervalSince1970
        let detail = event.detail
        _ = try await affected { connection, logger in
            try await connection.query(
                """
                INSERT INTO app_attest_key_events (key_id, kind, time, detail)
                VALUES (\(keyID), \(kind), \(time), \(detail)) RETURNING 1
                """, logger: logger)
        }
    }

    public func keyEvents(_ keyID: KeyID, limit: Int) async throws(StoreError) -> [KeyEvent] {
        let bytes = Data(keyID.rawValue), count = Int64(max(0, limit))
        let rows = try await perform { connection, logger -> [(String, Double, String?)] in
            var rows: [(String, Double, String?)] = []
            for try await row in try await connection.query(
                """
                SELECT kind, time, detail FROM app_attest_key_events WHERE key_id = \(bytes)
                ORDER BY id DESC LIMIT \(count)
                """, logger: logger
            ).decode((String, Double, String?).self) {
                rows.append(row)
            }
            return rows
        }
        return rows.reversed().map {
            KeyEvent(
                keyID: keyID, kind: KeyEvent.Kind(rawValue: $0.0), time: Date(timeIntervalSince1970: $0.1), detail: $0.2
            )
        }
    }

    public func purgeKeyEvents(before time: Date, batchSize limit: Int) async throws(StoreError) -> Int {
        let seconds = time.timeIntervalSince1970, batch = max(1, limit)
        return try await deleteInBatches(
            batch: batch,
            """
            WITH deleted AS (
                DELETE FROM app_attest_key_events WHERE id IN (
                    SELECT id FROM app_attest_key_events
                    WHERE time < \(seconds) AND \(unescaped: KeyEvent.Kind.purgeableCondition) LIMIT \(Int64(batch)))
                RETURNING 1)
            SELECT count(*) FROM deleted
            """)
    }

    public func takeToken(bucket name: String, rate: Double, burst: Double, now: Date) async throws(StoreError)
        -> TimeInterval?
    {
        let seconds = now.timeIntervalSince1970
        return try await perform { connection, logger -> TimeInterval? in
            // One statement, atomic under the row's lock for every instance on this database: the bucket refilled
            // since it was last taken from (never backwards, whatever the instances' clocks), then one token taken
            // when one is there.
            var taken = false
            for try await _ in try await connection.query(
                """
                INSERT INTO app_attest_token_buckets AS b (name, tokens, updated_at) VALUES (\(name), \(burst) - 1, \(seconds))
                ON CONFLICT (name) DO UPDATE SET
                    tokens = LEAST(\(burst), b.tokens + GREATEST(0, \(seconds) - b.updated_at) * \(rate)) - 1,
                    updated_at = GREATEST(b.updated_at, \(seconds))
                WHERE LEAST(\(burst), b.tokens + GREATEST(0, \(seconds) - b.updated_at) * \(rate)) >= 1
                RETURNING 1
                """, logger: logger)
            {
                taken = true
            }
            if taken { return nil }
            var available = 0.0
            for try await value in try await connection.query(
                """
                SELECT LEAST(\(burst), tokens + GREATEST(0, \(seconds) - updated_at) * \(rate))
                FROM app_attest_token_buckets WHERE name = \(name)
                """, logger: logger
            ).decode(Double.self) {
                available = value
            }
            return max(0, 1 - available) / rate
        }
    }
}
#endif  // PostgreSQL
