#if SQLite
import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
import Foundation
import GRDB

extension SQLiteAppAttestStore {
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
    static func acceptCounters(_ batch: [AssertionAcceptance], in db: Database) throws
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
    static func accept(_ acceptance: AssertionAcceptance, in db: Database) throws
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

    /// Which of a key's columns a read returns (``selectKeys(_:)``).
    package enum KeyColumns: Hashable, Sendable {
        /// Every column: each row of `keys` with its counter and revocation from `key_counters`.
        case whole
        /// Every column but the receipt (an empty blob in its place), from the index that holds every other column
        /// of `keys` (`keys_without_receipts`, named: the planner would take the primary key's index and then the
        /// row, which a real receipt makes about a page).
        case withoutReceipt
        /// As ``withoutReceipt``, without the counter (0) and the revocation (NULL) either: the read never leaves the
        /// index and never reads `key_counters`, whose pages every accepted assertion changes. The assertion path's
        /// read of a key its cache does not hold: the acceptance's own statement decides both.
        case unchanging
    }

    /// Keys' records: each row of `keys` with its counter and revocation from `key_counters`.
    static let selectKeys = selectKeys(.whole)

    /// Keys' records, with the columns asked for: one list of a record's columns, in ``keyRecord(_:)``'s order, with
    /// what each kind of read leaves out replaced by a constant.
    static func selectKeys(_ columns: KeyColumns) -> String {
        let (counter, receipt, revokedAt, from) =
            switch columns {
            case .whole: ("counter", "receipt", "revoked_at", "keys JOIN key_counters USING (key_id)")
            case .withoutReceipt:
                (
                    "counter", "x''", "revoked_at",
                    "keys INDEXED BY \(keysWithoutReceiptsIndex) JOIN key_counters USING (key_id)"
                )
            case .unchanging: ("0", "x''", "NULL", "keys INDEXED BY \(keysWithoutReceiptsIndex)")
            }
        return """
            SELECT key_id, user_id, app_id, environment, public_key, \(counter), \(receipt), risk_metric, created_at,
                receipt_updated_at, \(revokedAt)
            FROM \(from)
            """
    }

    /// One key's record.
    static let selectKey = "\(selectKeys) WHERE key_id = ?"

    /// The records of `count` keys, their keyIds bound in order.
    package static func selectKeys(count: Int, _ columns: KeyColumns = .whole) -> String {
        let parameters = Array(repeating: "?", count: count).joined(separator: ",")
        return "\(selectKeys(columns)) WHERE key_id IN (\(parameters))"
    }

    /// Why an acceptance was refused, read after its statement (in its transaction, or after the commit).
    static func explain(_ acceptance: AssertionAcceptance, in db: Database) throws
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
    static let acceptStatement = """
        UPDATE key_counters SET \(counterAssignments)
        WHERE \(counterCondition)
            AND (?4 IS NULL OR EXISTS (
                SELECT 1 FROM challenges WHERE challenge = ?4 AND purpose = ?5
                    AND (key_id IS NULL OR key_id = ?2) AND (user_id IS NULL OR user_id = ?6) AND expires_at > ?7))
        RETURNING counter
        """

    /// The new `seen` and `counter` (the right-hand sides read the row as it was): `?1` counter, `?3` window.
    static let counterAssignments = """
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
    static let counterCondition = """
        key_id = ?2 AND revoked_at IS NULL
            AND (?1 > counter OR (counter - ?1 BETWEEN 1 AND ?3 - 1 AND ((seen >> (counter - ?1 - 1)) & 1) = 0))
        """

    /// The counter update for `count` keys at once (1 to ``AssertionAcceptance/maximumBatchSize``), each at most once:
    /// `count` rows of (counter, keyId, window) as parameters. Returns each accepted key with its highest counter.
    static func counterUpdates(_ count: Int) -> String { counterUpdateTexts[count - 1] }

    /// The texts for every size of round, written once (a prepared statement is looked up by its text).
    static let counterUpdateTexts = (1...AssertionAcceptance.maximumBatchSize).map(counterUpdateText)

    static func counterUpdateText(_ count: Int) -> String {
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
}
#endif  // SQLite
