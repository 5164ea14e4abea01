#if PostgreSQL
import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization

extension PostgresAppAttestStore {

    public func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError)
        -> AssertionAcceptanceOutcome
    {
        // One statement, one round trip, one implicit transaction.
        try await perform { connection, logger in
            try await Self.accept(acceptance, Session(connection: connection, logger: logger))
        }
    }

    /// The batch in one transaction on one connection: one commit, one WAL flush, for all of them (group commit).
    /// The statements run in keyId order, so that two batches lock the keys they share in the same order and never
    /// deadlock; the outcomes come back in the batch's order.
    public func acceptAssertions(_ batch: [AssertionAcceptance]) async throws(StoreError)
        -> [AssertionAcceptanceOutcome]
    {
        if batch.count == 1 { return [try await acceptAssertion(batch[0])] }
        // By keyId, and in the batch's order for one key (the rounds of acceptCounters rely on it).
        let order = batch.indices.sorted {
            batch[$0].keyID == batch[$1].keyID
                ? $0 < $1 : batch[$0].keyID.rawValue.lexicographicallyPrecedes(batch[$1].keyID.rawValue)
        }
        do {
            if batch.allSatisfy({ $0.challenge == nil && $0.nextChallenge == nil }) {
                return try await perform { connection, logger in
                    try await Self.acceptCounters(batch, order: order, connection: connection, logger: logger)
                }
            }
            return try await perform { connection, logger in
                try await connection.withTransaction(logger: logger) { connection in
                    var outcomes = [AssertionAcceptanceOutcome?](repeating: nil, count: batch.count)
                    for index in order {
                        outcomes[index] = try await Self.accept(
                            batch[index], Session(connection: connection, logger: logger))
                    }
                    return outcomes.map { $0! }
                }
            }
        } catch {
            // Abandoned at the deadline: the transaction may still commit, so a retry could refuse what it accepted.
            // 503 for the whole batch; a client's retry then sees the outcome.
            if error.timedOut { throw error }
            // The transaction rolled back (a deadlock with a challenge another batch holds, a lost connection):
            // nothing of it was applied, so each acceptance is tried again on its own.
            var outcomes: [AssertionAcceptanceOutcome] = []
            for acceptance in batch { outcomes.append(try await acceptAssertion(acceptance)) }
            return outcomes
        }
    }

    /// Acceptances without challenges, in as few statements as the batch allows: one ``CounterUpdates`` statement
    /// per round, a round holding each key at most once (an `UPDATE … FROM` applies one input row per key). One round,
    /// the usual case, is one statement and one round trip, its own implicit transaction; more run in one
    /// transaction, each round locking only keys the first already holds, in keyId order. A refusal costs one more
    /// read, after the commit.
    static func acceptCounters(
        _ batch: [AssertionAcceptance], order: [Int], connection: PostgresConnection, logger: Logger
    ) async throws -> [AssertionAcceptanceOutcome] {
        let rounds = AssertionAcceptance.rounds(batch, order: order)
        let session = Session(connection: connection, logger: logger)
        let statements = rounds.map { round in
            CounterUpdates(
                counters: round.map { Int64(batch[$0].counter) },
                keyIDs: round.map { ByteBuffer(bytes: batch[$0].keyID.rawValue) },
                windows: round.map { Int64(batch[$0].counterPolicy.window) })
        }
        // Each round's accepted keys and their highest counters, as the round left them.
        let returned: [[Data: Int64]]
        if statements.count == 1 {
            returned = [try await Dictionary(session.execute(statements[0])) { $1 }]
        } else {
            returned = try await connection.withTransaction(logger: logger) { _ in
                var returned: [[Data: Int64]] = []
                for statement in statements {
                    returned.append(
                        try await Dictionary(session.execute(statement)) { $1 })
                }
                return returned
            }
        }
        let accepted = zip(rounds, returned).map { round, highest in
            round.map { highest[Data(batch[$0].keyID.rawValue)] }
        }
        var outcomes = AssertionAcceptance.acceptedOutcomes(batch, rounds: rounds, accepted: accepted)
        for index in outcomes.indices where outcomes[index] == nil {
            outcomes[index] = try await explain(batch[index], session.query)
        }
        return outcomes.map { $0! }
    }

    /// A connection the operation leased (``perform(bounded:_:)``), and the logger for its statements.
    struct Session {
        let connection: PostgresConnection
        let logger: Logger

        func query(_ query: PostgresQuery) async throws -> PostgresRowSequence {
            try await connection.query(query, logger: logger)
        }

        /// A prepared statement (parsed and planned once per connection), its rows collected.
        func execute<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row] {
            var rows: [Statement.Row] = []
            for try await row in try await connection.execute(statement, logger: logger) { rows.append(row) }
            return rows
        }
    }

    /// The counter's conditional update alone, for an acceptance without a challenge to consume or store (which
    /// PostgreSQL plans far faster than the statement with common table expressions). Prepared: its name changes
    /// with its text.
    struct CounterUpdate: PostgresPreparedStatement {
        static let name = "app_attest_counter_update_v2"
        static let sql = PostgresAppAttestStore.counterUpdate + " RETURNING counter"
        typealias Row = Int64
        /// `$1` counter, `$2` keyId, `$3` window.
        let counter: Int64, keyID: Data, window: Int64

        func makeBindings() throws -> PostgresBindings {
            var binds = PostgresBindings(capacity: 3)
            binds.append(counter)
            try binds.append(keyID)
            binds.append(window)
            return binds
        }

        func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
    }

    /// One statement, one round trip, one transaction: the challenge row is locked if usable, the counter moves
    /// only if it is, and the challenge is deleted (and the next one stored) only if the counter moved. Prepared: its
    /// name changes with its text.
    struct Acceptance: PostgresPreparedStatement {
        static let name = "app_attest_acceptance_v2"
        static let sql = """
            WITH ch AS (
                SELECT challenge FROM app_attest_challenges
                WHERE $4 AND challenge = $5 AND purpose = $6
                    AND (key_id IS NULL OR key_id = $2) AND (user_id IS NULL OR user_id = $7)
                    AND expires_at > $8
                FOR UPDATE
            ), upd AS (
                \(PostgresAppAttestStore.counterUpdate)
                    AND (NOT $4 OR EXISTS (SELECT 1 FROM ch))
                RETURNING counter
            ), del AS (
                DELETE FROM app_attest_challenges
                WHERE $4 AND challenge = $5 AND EXISTS (SELECT 1 FROM upd)
                RETURNING 1
            ), ins AS (
                INSERT INTO app_attest_challenges (challenge, purpose, key_id, user_id, expires_at)
                SELECT $10, $11, $12, $13, $14
                WHERE $9 AND EXISTS (SELECT 1 FROM upd)
                RETURNING 1
            )
            SELECT (SELECT counter FROM upd), (SELECT count(*) FROM del) + (SELECT count(*) FROM ins)
            """
        typealias Row = Int64?
        let update: CounterUpdate
        let acceptance: AssertionAcceptance

        func makeBindings() throws -> PostgresBindings {
            var binds = try update.makeBindings()
            // $4… the challenge to consume, $9… the challenge to store.
            let use = acceptance.challenge, next = acceptance.nextChallenge
            binds.append(use != nil)
            try binds.append(use.map { Data($0.challenge) })
            binds.append(use?.purpose)
            binds.append(use?.userID)
            binds.append(use?.now.timeIntervalSince1970)
            binds.append(next != nil)
            try binds.append(next.map { Data($0.challenge) })
            binds.append(next?.purpose)
            try binds.append(next?.keyID.map { Data($0.rawValue) })
            binds.append(next?.userID)
            binds.append(next?.expiresAt.timeIntervalSince1970)
            return binds
        }

        func decodeRow(_ row: PostgresRow) throws -> Int64? { try row.decode((Int64?, Int64).self).0 }
    }

    /// One acceptance: the conditional statement, and on a refusal one more read to say why.
    static func accept(_ acceptance: AssertionAcceptance, _ session: Session) async throws
        -> AssertionAcceptanceOutcome
    {
        let update = CounterUpdate(
            counter: Int64(acceptance.counter), keyID: Data(acceptance.keyID.rawValue),
            window: Int64(acceptance.counterPolicy.window))
        let highest: Int64?
        if acceptance.challenge == nil && acceptance.nextChallenge == nil {
            highest = try await session.execute(update).first
        } else {
            highest = try await session.execute(Acceptance(update: update, acceptance: acceptance)).first ?? nil
        }
        if let highest { return .accepted(highestCounter: UInt32(clamping: highest)) }
        return try await explain(acceptance, session.query)
    }

    /// The key's conditional counter update, `$1` the assertion's counter, `$2` the keyId, `$3` the window: the rule of
    /// `AssertionAcceptance.advance`, with every shift guarded so that its count stays within 0...63. The callers add
    /// conditions and `RETURNING counter`.
    static let counterUpdate = "UPDATE app_attest_keys SET \(counterAssignments) WHERE \(counterCondition)"

    /// The new `seen` and `counter` of ``counterUpdate`` (the right-hand sides read the row as it was).
    static let counterAssignments = """
        seen = CASE
                WHEN $1 > counter THEN CASE
                    WHEN $1 - counter >= 64 THEN 0
                    ELSE ((seen & ((1::bigint << (63 - ($1 - counter))::int) - 1)) << ($1 - counter)::int)
                        | (1::bigint << ($1 - counter - 1)::int)
                    END
                ELSE seen | (1::bigint << (counter - $1 - 1)::int)
                END,
            counter = GREATEST(counter, $1)
        """

    /// When ``counterUpdate`` applies: the key exists, is not revoked, and the counter is above the highest or a
    /// counter of the window not yet accepted.
    static let counterCondition = """
        key_id = $2 AND revoked_at IS NULL
            AND ($1 > counter OR (counter - $1 BETWEEN 1 AND $3 - 1
                AND (CASE WHEN counter - $1 BETWEEN 1 AND 63 THEN (seen >> (counter - $1 - 1)::int) & 1 ELSE 1 END) = 0))
        """

    /// ``counterUpdate`` for many keys at once, each at most once: the counters, keyIds and windows as three arrays
    /// (`unnest` pairs them up). Returns each accepted key with its highest counter. Prepared: its name changes with
    /// its text.
    struct CounterUpdates: PostgresPreparedStatement {
        static let name = "app_attest_counter_updates_v1"
        static let sql = """
            UPDATE app_attest_keys SET \(each(counterAssignments))
            FROM unnest($1::bigint[], $2::bytea[], $3::bigint[]) AS input(c, k, w)
            WHERE \(each(counterCondition))
            RETURNING key_id, counter
            """
        typealias Row = (Data, Int64)
        let counters: [Int64], keyIDs: [ByteBuffer], windows: [Int64]

        /// The single-key text with its parameters replaced by the input row's columns.
        static func each(_ text: String) -> String {
            text.replacingOccurrences(of: "$1", with: "input.c").replacingOccurrences(of: "$2", with: "input.k")
                .replacingOccurrences(of: "$3", with: "input.w")
        }

        func makeBindings() throws -> PostgresBindings {
            var binds = PostgresBindings(capacity: 3)
            binds.append(counters)
            binds.append(keyIDs)
            binds.append(windows)
            return binds
        }

        func decodeRow(_ row: PostgresRow) throws -> (Data, Int64) { try row.decode((Data, Int64).self) }
    }

    /// Why an acceptance was refused: one more read.
    static func explain(
        _ acceptance: AssertionAcceptance, _ run: (PostgresQuery) async throws -> PostgresRowSequence
    ) async throws -> AssertionAcceptanceOutcome {
        let key = Data(acceptance.keyID.rawValue)
        let use = acceptance.challenge
        let hasChallenge = use != nil, challenge = use.map { Data($0.challenge) }
        let state = try await { () async throws -> (Int64?, Double?, String?, Data?, String?, Double?)? in
            let rows = try await run(
                """
                SELECT k.counter, k.revoked_at, c.purpose, c.key_id, c.user_id, c.expires_at
                FROM (SELECT 1) AS one
                LEFT JOIN app_attest_keys k ON k.key_id = \(key)
                LEFT JOIN app_attest_challenges c ON \(hasChallenge) AND c.challenge = \(challenge)
                """)
            for try await row in rows.decode((Int64?, Double?, String?, Data?, String?, Double?).self) { return row }
            return nil
        }()
        guard let state, let highest = state.0 else { return .unknownKey }
        if state.1 != nil { return .keyRevoked }
        if let use {
            var record: ChallengeRecord?
            if let purpose = state.2, let expires = state.5 {
                record = try Self.challengeRecord(use.challenge, (purpose, state.3, state.4, expires))
            }
            guard let record, record.purpose == use.purpose,
                record.keyID == nil || record.keyID == acceptance.keyID,
                record.userID == nil || record.userID == use.userID, record.expiresAt > use.now
            else { return .challengeRefused(record) }
        }
        return .counterRefused(highestCounter: UInt32(clamping: highest))
    }
}
#endif  // PostgreSQL
