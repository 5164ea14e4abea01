#if SQLite
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import GRDB

extension SQLiteAppAttestStore {
    public func insertChallenge(_ record: ChallengeRecord) async throws(StoreError) {
        try await write { db in try Self.insert(record, db) }
    }

    static func insert(_ record: ChallengeRecord, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO challenges (challenge, purpose, key_id, user_id, expires_at, issuer)
                VALUES (?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            Data(record.challenge), record.purpose, record.keyID.map { Data($0.rawValue) }, record.userID,
            record.expiresAt.timeIntervalSince1970, record.issuer,
        ])
    }

    public func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date)
        async throws(StoreError)
    {
        // A user's own challenges are those reserved for no key, by the same issuer: the ones reserved for one of the
        // user's keys count against that key (and are its app's), and a caller that may reserve for the user must not
        // evict them, nor those another caller (another tenant) reserved for the user. A key's are all those reserved
        // for it, whoever asked: bounded per key, not per issuer (ChallengeLimits.perKey says why).
        let owner: (condition: String, values: StatementArguments)
        if let keyID = record.keyID {
            owner = ("key_id = ?", [Data(keyID.rawValue)])
        } else if let userID = record.userID {
            owner = ("key_id IS NULL AND user_id = ? AND issuer IS ?", [userID, record.issuer])
        } else {
            return try await insertChallenge(record)
        }
        try await write { db in
            // The owner's newest `limit - 1` unexpired challenges stay; older ones go, then the new one is stored.
            try db.cachedStatement(
                sql: """
                    DELETE FROM challenges WHERE challenge IN (
                        SELECT challenge FROM challenges WHERE \(owner.condition) AND expires_at > ?
                        ORDER BY expires_at DESC LIMIT -1 OFFSET ?)
                    """
            ).execute(arguments: owner.values + [now.timeIntervalSince1970, max(0, limit - 1)])
            try Self.insert(record, db)
        }
    }

    public func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int {
        try await read { db -> Int in
            try Int.fetchOne(
                try db.cachedStatement(sql: "SELECT COUNT(*) FROM challenges WHERE issuer = ? AND expires_at > ?"),
                arguments: [issuer, now.timeIntervalSince1970]) ?? 0
        }
    }

    public func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        async throws(StoreError) -> ChallengeRecord?
    {
        try await write { db -> ChallengeRecord? in
            // One statement: the row is deleted and returned atomically, and only when its purpose and reservation
            // allow this key and user (a challenge reserved for another is not burned).
            guard
                let row = try Row.fetchOne(
                    try db.cachedStatement(
                        sql: """
                            DELETE FROM challenges WHERE challenge = ? AND purpose = ?
                                AND (key_id IS NULL OR key_id = ?) AND (user_id IS NULL OR user_id = ?)
                            RETURNING purpose, key_id, user_id, expires_at
                            """),
                    arguments: [Data(challenge), purpose, keyID.map { Data($0.rawValue) }, userID])
            else { return nil }
            return try Self.challengeRecord(challenge, row)
        }
    }

    public func challenge(_ challenge: [UInt8]) async throws(StoreError) -> ChallengeRecord? {
        try await read { db -> ChallengeRecord? in
            guard
                let row = try Row.fetchOne(
                    try db.cachedStatement(
                        sql: "SELECT purpose, key_id, user_id, expires_at FROM challenges WHERE challenge = ?"),
                    arguments: [Data(challenge)])
            else { return nil }
            return try Self.challengeRecord(challenge, row)
        }
    }

    package func outstandingUnreservedChallenges(now: Date) async throws(StoreError) -> Int {
        try await read { db -> Int in
            try Int.fetchOne(
                try db.cachedStatement(
                    sql: "SELECT COUNT(*) FROM challenges WHERE key_id IS NULL AND expires_at > ?"),
                arguments: [now.timeIntervalSince1970]) ?? 0
        }
    }

    public func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int {
        try await read { db -> Int in
            let time = now.timeIntervalSince1970
            if let keyID {
                return try Int.fetchOne(
                    try db.cachedStatement(sql: "SELECT COUNT(*) FROM challenges WHERE key_id = ? AND expires_at > ?"),
                    arguments: [Data(keyID.rawValue), time]) ?? 0
            }
            if let userID {
                return try Int.fetchOne(
                    try db.cachedStatement(sql: "SELECT COUNT(*) FROM challenges WHERE user_id = ? AND expires_at > ?"),
                    arguments: [userID, time]) ?? 0
            }
            return try Int.fetchOne(
                try db.cachedStatement(sql: "SELECT COUNT(*) FROM challenges WHERE expires_at > ?"), arguments: [time])
                ?? 0
        }
    }

    static func challengeRecord(_ challenge: [UInt8], _ row: Row) throws(StoreError) -> ChallengeRecord {
        let keyData: Data? = row["key_id"]
        return ChallengeRecord(
            challenge: challenge, purpose: row["purpose"],
            keyID: try keyData.map { data throws(StoreError) in try Self.keyID(data) },
            userID: row["user_id"], expiresAt: Date(timeIntervalSince1970: row["expires_at"]))
    }

    public func purgeExpiredChallenges(now: Date) async throws(StoreError) -> Int {
        try await deleteInBatches(
            """
            DELETE FROM challenges WHERE challenge IN (SELECT challenge FROM challenges WHERE expires_at < ? LIMIT ?)
            """, now.timeIntervalSince1970, batch: Self.purgeBatch)
    }

    /// Expired challenges deleted in one transaction.
    package static let purgeBatch = 5_000
}
#endif  // SQLite
