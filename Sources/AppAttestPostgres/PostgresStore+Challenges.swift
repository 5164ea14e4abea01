#if PostgreSQL
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import Logging
import PostgresNIO
import Synchronization

extension PostgresAppAttestStore {

    public func insertChallenge(_ record: ChallengeRecord) async throws(StoreError) {
        try await perform { connection, logger in
            for try await _ in try await connection.query(try Self.insertion(record), logger: logger) {}
        }
    }

    static func insertion(_ record: ChallengeRecord) throws -> PostgresQuery {
        var binds = PostgresBindings(capacity: 6)
        try binds.append(Data(record.challenge))
        binds.append(record.purpose)
        try binds.append(record.keyID.map { Data($0.rawValue) })
        binds.append(record.userID)
        binds.append(record.expiresAt.timeIntervalSince1970)
        binds.append(record.issuer)
        return PostgresQuery(
            unsafeSQL: """
                INSERT INTO app_attest_challenges (challenge, purpose, key_id, user_id, expires_at, issuer)
                VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (challenge) DO UPDATE SET purpose = EXCLUDED.purpose, key_id = EXCLUDED.key_id,
                    user_id = EXCLUDED.user_id, expires_at = EXCLUDED.expires_at, issuer = EXCLUDED.issuer
                """, binds: binds)
    }

    public func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date)
        async throws(StoreError)
    {
        guard record.keyID != nil || record.userID != nil else { return try await insertChallenge(record) }
        let key = record.keyID.map { Data($0.rawValue) }, userID = record.userID, issuer = record.issuer
        let time = now.timeIntervalSince1970, keep = Int64(max(0, limit - 1))
        _ = try await perform { connection, logger in
            try await connection.withTransaction(logger: logger) { connection in
                // The owner's newest `limit - 1` unexpired challenges stay; older ones go, then the new one is stored. A
                // user's are those reserved for no key by the same issuer: one reserved for a user's key counts against
                // the key, one another caller (another tenant) reserved for the user against that caller.
                if let key {
                    try await connection.query(
                        """
                        DELETE FROM app_attest_challenges WHERE challenge IN (
                            SELECT challenge FROM app_attest_challenges WHERE key_id = \(key) AND expires_at > \(time)
                            ORDER BY expires_at DESC OFFSET \(keep))
                        """, logger: logger)
                } else {
                    try await connection.query(
                        """
                        DELETE FROM app_attest_challenges WHERE challenge IN (
                            SELECT challenge FROM app_attest_challenges
                            WHERE key_id IS NULL AND user_id = \(userID) AND issuer IS NOT DISTINCT FROM \(issuer)
                                AND expires_at > \(time)
                            ORDER BY expires_at DESC OFFSET \(keep))
                        """, logger: logger)
                }
                try await connection.query(try Self.insertion(record), logger: logger)
            }
        }
    }

    public func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int {
        try await count(
            "SELECT COUNT(*) FROM app_attest_challenges WHERE issuer = \(issuer) AND expires_at > \(now.timeIntervalSince1970)"
        )
    }

    /// Runs `query` (a DELETE of at most `batch` rows that answers how many it deleted) until it deletes fewer than
    /// `batch`; how many it deleted in all. A batch an operation, each within the operation timeout, so that a large
    /// backlog makes progress.
    func deleteInBatches(batch: Int, _ query: PostgresQuery) async throws(StoreError) -> Int {
        var total = 0
        while true {
            let deleted = try await count(query)
            total += deleted
            if deleted < batch { return total }
        }
    }

    /// The count that `query` (a `SELECT COUNT(*)`) answers.
    private func count(_ query: PostgresQuery) async throws(StoreError) -> Int {
        try await perform { connection, logger -> Int in
            for try await count in try await connection.query(query, logger: logger).decode(Int64.self) {
                return Int(count)
            }
            return 0
        }
    }

    public func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        async throws(StoreError) -> ChallengeRecord?
    {
        let bytes = Data(challenge), key = keyID.map { Data($0.rawValue) }
        // One statement: deleted and returned only when the purpose and the reservation allow this key and user.
        let row = try await perform { connection, logger -> (String, Data?, String?, Double)? in
            let rows = try await connection.query(
                """
                DELETE FROM app_attest_challenges WHERE challenge = \(bytes) AND purpose = \(purpose)
                    AND (key_id IS NULL OR key_id = \(key)) AND (user_id IS NULL OR user_id = \(userID))
                RETURNING purpose, key_id, user_id, expires_at
                """, logger: logger)
            for try await row in rows.decode((String, Data?, String?, Double).self) { return row }
            return nil
        }
        return try row.map { row throws(StoreError) in try Self.challengeRecord(challenge, row) }
    }

    public func challenge(_ challenge: [UInt8]) async throws(StoreError) -> ChallengeRecord? {
        let bytes = Data(challenge)
        let row = try await perform { connection, logger -> (String, Data?, String?, Double)? in
            let rows = try await connection.query(
                "SELECT purpose, key_id, user_id, expires_at FROM app_attest_challenges WHERE challenge = \(bytes)",
                logger: logger)
            for try await row in rows.decode((String, Data?, String?, Double).self) { return row }
            return nil
        }
        return try row.map { row throws(StoreError) in try Self.challengeRecord(challenge, row) }
    }

    public func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int {
        let time = now.timeIntervalSince1970, key = keyID.map { Data($0.rawValue) }
        return try await perform { connection, logger -> Int in
            let rows: PostgresRowSequence
            if let key {
                rows = try await connection.query(
                    "SELECT COUNT(*) FROM app_attest_challenges WHERE key_id = \(key) AND expires_at > \(time)",
                    logger: logger)
            } else if let userID {
                rows = try await connection.query(
                    "SELECT COUNT(*) FROM app_attest_challenges WHERE user_id = \(userID) AND expires_at > \(time)",
                    logger: logger)
            } else {
                rows = try await connection.query(
                    "SELECT COUNT(*) FROM app_attest_challenges WHERE expires_at > \(time)", logger: logger)
            }
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    package func outstandingUnreservedChallenges(now: Date) async throws(StoreError) -> Int {
        try await count(
            "SELECT COUNT(*) FROM app_attest_challenges WHERE key_id IS NULL AND expires_at > \(now.timeIntervalSince1970)"
        )
    }

    static func challengeRecord(_ challenge: [UInt8], _ row: (String, Data?, String?, Double)) throws(StoreError)
        -> ChallengeRecord
    {
        let (purpose, keyData, userID, expires) = row
        return ChallengeRecord(
            challenge: challenge, purpose: purpose,
            keyID: try keyData.map { data throws(StoreError) in try Self.keyID(data) },
            userID: userID, expiresAt: Date(timeIntervalSince1970: expires))
    }

    public func purgeExpiredChallenges(now: Date) async throws(StoreError) -> Int {
        // One DELETE of a whole backlog, its rows streamed back to be counted, ran past the deadline and was lost each
        // time; rows another instance's purge holds are skipped, not waited for.
        try await deleteInBatches(
            batch: Self.purgeBatch,
            """
            WITH deleted AS (
                DELETE FROM app_attest_challenges WHERE challenge IN (
                    SELECT challenge FROM app_attest_challenges
                    WHERE expires_at < \(now.timeIntervalSince1970) LIMIT \(Int64(Self.purgeBatch))
                    FOR UPDATE SKIP LOCKED)
                RETURNING 1)
            SELECT count(*) FROM deleted
            """)
    }

    /// Expired challenges deleted in one statement.
    package static let purgeBatch = 5_000
}
#endif  // PostgreSQL
