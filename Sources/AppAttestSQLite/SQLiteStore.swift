#if SQLite
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import GRDB

/// The embedded default store: one SQLite file, in WAL mode, with the schema created and migrated on open.
///
/// GRDB was chosen over sqlite-nio for its `DatabasePool` (WAL, one writer and concurrent readers, busy timeouts
/// that let several processes share the file), its migrator, and statements whose effects are atomic on their
/// own: consume-once is one `DELETE … RETURNING`, the counter one conditional `UPDATE`, key insertion one
/// `INSERT … ON CONFLICT DO NOTHING` (SQLite ≥ 3.35).
public final class SQLiteAppAttestStore: AppAttestStore, Sendable {
    private let pool: DatabasePool
    /// The database file.
    public let path: String

    /// Opens (creating if needed) the database at `path` and migrates its schema.
    /// - Parameter busyTimeout: how long a write waits for another process's lock.
    public init(path: String, busyTimeout: TimeInterval = 10) throws(StoreError) {
        var configuration = Configuration()
        configuration.busyMode = .timeout(busyTimeout)
        configuration.prepareDatabase { db in
            // WAL with synchronous=NORMAL survives the crash of any process (not a power loss, which FULL covers).
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        // The database holds keys and receipts: created 0600 before SQLite opens it, so that it and the WAL and
        // shared-memory files SQLite creates beside it (with the database's permissions) are never wider.
        if path != ":memory:" {
            do { try SecretFile.createIfMissing(path) } catch {
                throw StoreError(.unavailable, error.description)
            }
            // Files left by an earlier version, or by SQLite before the database was narrowed.
            SecretFile.narrow(path + "-wal")
            SecretFile.narrow(path + "-shm")
        }
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
        } catch {
            throw StoreError(.unavailable, "SQLite \(path): \(error)")
        }
        self.path = path
    }

    /// Idempotent migrations, safe when several processes open a new file at once.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS challenges (
                        challenge BLOB PRIMARY KEY NOT NULL,
                        purpose TEXT NOT NULL,
                        key_id BLOB,
                        user_id TEXT,
                        expires_at REAL NOT NULL
                    );
                    CREATE INDEX IF NOT EXISTS challenges_expiry ON challenges(expires_at);
                    CREATE TABLE IF NOT EXISTS keys (
                        key_id BLOB PRIMARY KEY NOT NULL,
                        user_id TEXT,
                        app_id TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        public_key BLOB NOT NULL,
                        counter INTEGER NOT NULL CHECK (counter BETWEEN 0 AND 4294967295),
                        receipt BLOB NOT NULL,
                        risk_metric INTEGER,
                        created_at REAL NOT NULL,
                        receipt_updated_at REAL NOT NULL,
                        revoked_at REAL
                    );
                    CREATE INDEX IF NOT EXISTS keys_user ON keys(user_id);
                    """)
        }
        migrator.registerMigration("v2") { db in
            try db.execute(
                sql: """
                    CREATE INDEX IF NOT EXISTS challenges_key ON challenges(key_id);
                    CREATE INDEX IF NOT EXISTS challenges_user ON challenges(user_id);
                    """)
        }
        migrator.registerMigration("v3") { db in
            // Counters accepted below the highest, for the reorder window (AssertionAcceptance.advance).
            let columns = try db.columns(in: "keys").map(\.name)
            if !columns.contains("seen") {
                try db.execute(sql: "ALTER TABLE keys ADD COLUMN seen INTEGER NOT NULL DEFAULT 0")
                // Keys from before the window: which counters below the highest were used is not known, so all of
                // them count as used (all 63 bits). Zero would let each be accepted once more once a window is on.
                try db.execute(sql: "UPDATE keys SET seen = \(AppAttestVerifier.CounterPolicy.allBelowHighestSeen)")
            }
        }
        migrator.registerMigration("v4") { db in
            // What every accepted assertion writes (the counter, the window's bits, and the revocation it checks) in
            // a small table of its own, keyed by keyId without a rowid: one B-tree lookup, and a row of a few dozen
            // bytes. In `keys` each update rewrote the whole row, receipt included: a real receipt of 3,850 bytes
            // makes the row about a page, and the update cost 7.5 µs of SQLite per acceptance against 4.5 here.
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS key_counters (
                        key_id BLOB PRIMARY KEY NOT NULL,
                        counter INTEGER NOT NULL CHECK (counter BETWEEN 0 AND 4294967295),
                        seen INTEGER NOT NULL DEFAULT 0,
                        revoked_at REAL
                    ) WITHOUT ROWID
                    """)
            let columns = try db.columns(in: "keys").map(\.name)
            if columns.contains("counter") {
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO key_counters (key_id, counter, seen, revoked_at)
                            SELECT key_id, counter, seen, revoked_at FROM keys;
                        ALTER TABLE keys DROP COLUMN seen;
                        ALTER TABLE keys DROP COLUMN counter;
                        ALTER TABLE keys DROP COLUMN revoked_at;
                        """)
            }
        }
        migrator.registerMigration("v5") { db in
            // Who asked for each challenge, so that what one issuer may hold is bounded (ChallengeLimits.perIssuer).
            let columns = try db.columns(in: "challenges").map(\.name)
            if !columns.contains("issuer") {
                try db.execute(sql: "ALTER TABLE challenges ADD COLUMN issuer TEXT")
            }
            try db.execute(sql: "CREATE INDEX IF NOT EXISTS challenges_issuer ON challenges(issuer)")
        }
        return migrator
    }

    public func insertChallenge(_ record: ChallengeRecord) async throws(StoreError) {
        try await write { db in try Self.insert(record, db) }
    }

    private static func insert(_ record: ChallengeRecord, _ db: Database) throws {
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
        let owner: (column: String, value: DatabaseValue)
        if let keyID = record.keyID {
            owner = ("key_id", Data(keyID.rawValue).databaseValue)
        } else if let userID = record.userID {
            owner = ("user_id", userID.databaseValue)
        } else {
            return try await insertChallenge(record)
        }
        try await write { db in
            // The owner's newest `limit - 1` unexpired challenges stay; older ones go, then the new one is stored.
            try db.cachedStatement(
                sql: """
                    DELETE FROM challenges WHERE challenge IN (
                        SELECT challenge FROM challenges WHERE \(owner.column) = ? AND expires_at > ?
                        ORDER BY expires_at DESC LIMIT -1 OFFSET ?)
                    """
            ).execute(arguments: [owner.value, now.timeIntervalSince1970, max(0, limit - 1)])
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
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM challenges WHERE expires_at < ?").execute(
                arguments: [now.timeIntervalSince1970])
            return db.changesCount
        }
    }

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

    public func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError)
        -> AssertionAcceptanceOutcome
    {
        // Without a challenge it is one statement, its own transaction.
        if acceptance.challenge == nil, acceptance.nextChallenge == nil {
            return try await writeWithoutTransaction { db in try Self.accept(acceptance, in: db) }
        }
        return try await write { db in try Self.accept(acceptance, in: db) }
    }

    /// The batch in one write transaction: one commit for all of them (group commit). Acceptances without challenges,
    /// the usual batch, take as few statements as the batch allows (``acceptCounters(_:in:)``).
    public func acceptAssertions(_ batch: [AssertionAcceptance]) async throws(StoreError)
        -> [AssertionAcceptanceOutcome]
    {
        if batch.count == 1 { return [try await acceptAssertion(batch[0])] }
        if batch.allSatisfy({ $0.challenge == nil && $0.nextChallenge == nil }) {
            return try await writeWithoutTransaction { db in try Self.acceptCounters(batch, in: db) }
        }
        return try await write { db in try batch.map { try Self.accept($0, in: db) } }
    }

    /// Counter acceptances: one ``counterUpdates(_:)`` statement per round, a round holding each key at most once
    /// (an `UPDATE … FROM` applies one input row per key), the rounds in the batch's order. One round, the usual case,
    /// is one statement in its own transaction (an `UPDATE` takes the write lock before it reads, as `BEGIN IMMEDIATE`
    /// does); more run in one transaction. A refusal costs one more read, after the commit.
    private static func acceptCounters(_ batch: [AssertionAcceptance], in db: Database) throws
        -> [AssertionAcceptanceOutcome]
    {
        // At most as many rows per statement as a group-commit batch holds: the texts are written once, the prepared
        // statements cached per connection stay few, and no statement nears SQLite's limit on parameters, whatever
        // the size of a batch given to `acceptAssertions` directly.
        let rounds = AssertionAcceptance.rounds(
            batch, order: Array(batch.indices), maximumSize: Self.counterUpdateTexts.count)
        // Each acceptance of the round, in its order: the key's highest counter after the statement, or nil.
        func run(_ round: [Int]) throws -> [Int64?] {
            var values: [(any DatabaseValueConvertible)?] = []
            values.reserveCapacity(round.count * 3)
            for index in round {
                let acceptance = batch[index]
                values.append(Int64(acceptance.counter))
                values.append(Data(acceptance.keyID.rawValue))
                values.append(Int64(acceptance.counterPolicy.window))
            }
            let statement = try db.cachedStatement(sql: counterUpdates(round.count))
            var accepted = [Int64?](repeating: nil, count: round.count)
            let rows = try Row.fetchCursor(statement, arguments: StatementArguments(values))
            while let row = try rows.next() {
                // A round holds each key once and at most 64 of them: its position is found by comparing bytes.
                let position = try row.withUnsafeData(atIndex: 0) { data -> Int? in
                    data?.withUnsafeBytes { returned in
                        round.firstIndex { batch[$0].keyID.rawValue.withUnsafeBytes { $0.elementsEqual(returned) } }
                    }
                }
                guard let position else { throw StoreError(.corrupted, "the counter update returned another key") }
                accepted[position] = row[1]
            }
            return accepted
        }
        var accepted: [[Int64?]] = []
        if rounds.count == 1 {
            accepted = [try run(rounds[0])]
        } else {
            try db.inTransaction(.immediate) {
                for round in rounds { accepted.append(try run(round)) }
                return .commit
            }
        }
        var outcomes = AssertionAcceptance.acceptedOutcomes(batch, rounds: rounds, accepted: accepted)
        for index in outcomes.indices where outcomes[index] == nil {
            outcomes[index] = try explain(batch[index], in: db)
        }
        return outcomes.map { $0! }
    }

    /// One acceptance inside the caller's write transaction: the counter moves only if the challenge is usable, then
    /// the challenge is deleted and the next one stored (no other writer runs in between). The arithmetic is
    /// AssertionAcceptance.advance.
    private static func accept(_ acceptance: AssertionAcceptance, in db: Database) throws
        -> AssertionAcceptanceOutcome
    {
        let key = Data(acceptance.keyID.rawValue), counter = Int64(acceptance.counter)
        let window = Int64(acceptance.counterPolicy.window)
        let use = acceptance.challenge
        let highest = try Int64.fetchOne(
            try db.cachedStatement(sql: Self.acceptStatement),
            arguments: [
                counter, key, window, use.map { Data($0.challenge) }, use?.purpose, use?.userID,
                use?.now.timeIntervalSince1970,
            ])
        if let highest {
            if let use {
                try db.cachedStatement(sql: "DELETE FROM challenges WHERE challenge = ?").execute(
                    arguments: [Data(use.challenge)])
            }
            if let next = acceptance.nextChallenge {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO challenges (challenge, purpose, key_id, user_id, expires_at)
                        VALUES (?, ?, ?, ?, ?)
                        """
                ).execute(
                    arguments: [
                        Data(next.challenge), next.purpose, next.keyID.map { Data($0.rawValue) }, next.userID,
                        next.expiresAt.timeIntervalSince1970,
                    ])
            }
            return .accepted(highestCounter: UInt32(clamping: highest))
        }
        return try explain(acceptance, in: db)
    }

    /// Keys' records: each row of `keys` with its counter and revocation from `key_counters`.
    private static let selectKeys = "SELECT * FROM keys JOIN key_counters USING (key_id)"

    /// One key's record.
    private static let selectKey = "\(selectKeys) WHERE key_id = ?"

    /// Why an acceptance was refused, read after its statement (in its transaction, or after the commit).
    private static func explain(_ acceptance: AssertionAcceptance, in db: Database) throws
        -> AssertionAcceptanceOutcome
    {
        guard
            let row = try Row.fetchOne(
                try db.cachedStatement(sql: "SELECT counter, revoked_at FROM key_counters WHERE key_id = ?"),
                arguments: [Data(acceptance.keyID.rawValue)])
        else { return .unknownKey }
        if (row["revoked_at"] as Double?) != nil { return .keyRevoked }
        if let use = acceptance.challenge {
            let stored = try Row.fetchOne(
                try db.cachedStatement(
                    sql: "SELECT purpose, key_id, user_id, expires_at FROM challenges WHERE challenge = ?"),
                arguments: [Data(use.challenge)])
            let record = try stored.map { try Self.challengeRecord(use.challenge, $0) }
            if let record, record.purpose == use.purpose,
                record.keyID == nil || record.keyID == acceptance.keyID,
                record.userID == nil || record.userID == use.userID, record.expiresAt > use.now
            {
                return .counterRefused(highestCounter: UInt32(clamping: row["counter"] as Int64))
            }
            return .challengeRefused(record)
        }
        return .counterRefused(highestCounter: UInt32(clamping: row["counter"] as Int64))
    }

    /// The conditional update of ``acceptAssertion(_:)``: `?1` counter, `?2` keyId, `?3` window, then the challenge
    /// (or NULLs): `?4` challenge, `?5` purpose, `?6` user, `?7` now.
    private static let acceptStatement = """
        UPDATE key_counters SET \(counterAssignments)
        WHERE \(counterCondition)
            AND (?4 IS NULL OR EXISTS (
                SELECT 1 FROM challenges WHERE challenge = ?4 AND purpose = ?5
                    AND (key_id IS NULL OR key_id = ?2) AND (user_id IS NULL OR user_id = ?6) AND expires_at > ?7))
        RETURNING counter
        """

    /// The new `seen` and `counter` (the right-hand sides read the row as it was): `?1` counter, `?3` window.
    private static let counterAssignments = """
        seen = CASE
                WHEN ?1 > counter THEN CASE
                    WHEN ?1 - counter >= 64 THEN 0
                    ELSE ((seen & ((1 << (63 - (?1 - counter))) - 1)) << (?1 - counter)) | (1 << (?1 - counter - 1))
                    END
                ELSE seen | (1 << (counter - ?1 - 1))
                END,
            counter = CASE WHEN ?1 > counter THEN ?1 ELSE counter END
        """

    /// When the counter moves: `?2` is a key that is not revoked, and `?1` is above its highest counter or a counter
    /// of the window (`?3`) not yet accepted.
    private static let counterCondition = """
        key_id = ?2 AND revoked_at IS NULL
            AND (?1 > counter OR (counter - ?1 BETWEEN 1 AND ?3 - 1 AND ((seen >> (counter - ?1 - 1)) & 1) = 0))
        """

    /// The counter update for `count` keys at once (1 to ``AssertionAcceptance/maximumBatchSize``), each at most once:
    /// `count` rows of (counter, keyId, window) as parameters. Returns each accepted key with its highest counter.
    private static func counterUpdates(_ count: Int) -> String { counterUpdateTexts[count - 1] }

    /// The texts for every size of round, written once (a prepared statement is looked up by its text).
    private static let counterUpdateTexts = (1...AssertionAcceptance.maximumBatchSize).map(counterUpdateText)

    private static func counterUpdateText(_ count: Int) -> String {
        func each(_ text: String) -> String {
            text.replacingOccurrences(of: "?1", with: "input.column1").replacingOccurrences(
                of: "?2", with: "input.column2"
            ).replacingOccurrences(of: "?3", with: "input.column3")
        }
        let rows = repeatElement("(?, ?, ?)", count: count).joined(separator: ", ")
        return """
            UPDATE key_counters SET \(each(counterAssignments))
            FROM (VALUES \(rows)) AS input
            WHERE \(each(counterCondition))
            RETURNING key_id, counter
            """
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

    /// Closes the database file; later operations fail with `unavailable`.
    public func close() async {
        try? pool.close()
    }

    // MARK: Helpers

    private func write<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws(StoreError) -> T {
        try await Self.access { try await pool.write(body) }
    }

    private func writeWithoutTransaction<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T)
        async throws(StoreError) -> T
    {
        try await Self.access { try await pool.writeWithoutTransaction(body) }
    }

    private func read<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws(StoreError) -> T {
        try await Self.access { try await pool.read(body) }
    }

    /// A database access, its errors as the store's: a `StoreError` as it is, anything else `unavailable`.
    private static func access<T>(_ body: () async throws -> T) async throws(StoreError) -> T {
        do { return try await body() } catch let error as StoreError { throw error } catch {
            throw StoreError(.unavailable, "SQLite: \(error)")
        }
    }

    static func keyID(_ data: Data) throws(StoreError) -> KeyID {
        do { return try KeyID(rawValue: data) } catch {
            throw StoreError(.corrupted, "a stored keyId of \(data.count) bytes")
        }
    }

    static func keyRecord(_ row: Row) throws(StoreError) -> KeyRecord {
        let keyID: Data = row["key_id"]
        let publicKey: Data = row["public_key"]
        let receipt: Data = row["receipt"]
        return try KeyRecord.decoding(
            keyID: keyID, userID: row["user_id"], appID: row["app_id"], environment: row["environment"],
            publicKey: publicKey, counter: row["counter"], receipt: Array(receipt), riskMetric: row["risk_metric"],
            createdAt: row["created_at"], receiptUpdatedAt: row["receipt_updated_at"], revokedAt: row["revoked_at"])
    }
}
#endif  // SQLite
