#if PostgreSQL
import AppAttest
import AppAttestStore
import AppAttestSQLSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization

extension PostgresAppAttestStore {
    /// Migrates, or fails once `timeout` has passed without an answer.
    func migrate(within timeout: Duration) async throws(StoreError) {
        // Raced against the timer without waiting for the migration to honour its cancellation: a connection attempt
        // to a host that never answers holds it far longer than the start-up timeout.
        do {
            try await StoreDeadline.run(timeout, "PostgreSQL") { () async throws(StoreError) in
                try await self.migrate()
            }
        } catch  where error.timedOut {
            var hinted = StoreError(
                .unavailable,
                error.message + " (is the database up, and are host, port, credentials and sslmode right?)")
            hinted.timedOut = true
            throw hinted
        }
    }

    func migrate() async throws(StoreError) {
        // Bounded by the start-up timeout (migrate(within:)), not the operation timeout.
        try await perform(bounded: false) { connection, logger in
            try await connection.withTransaction(logger: logger) { connection in
                // One migrator at a time across every server that starts against this database.
                try await connection.query("SELECT pg_advisory_xact_lock(7272727)", logger: logger)
                // The steps below take table locks even when there is nothing to do (CREATE INDEX IF NOT EXISTS a
                // share lock, ALTER TABLE an exclusive one): run them only for an older schema, so that a server
                // starting beside busy ones never waits on, or deadlocks with, their transactions.
                try await connection.query(
                    "CREATE TABLE IF NOT EXISTS app_attest_schema (version INT NOT NULL)", logger: logger)
                var version = 0
                for try await (stored) in try await connection.query(
                    "SELECT max(version) FROM app_attest_schema", logger: logger
                ).decode(Int32?.self) {
                    version = Int(stored ?? 0)
                }
                guard version < Self.schemaVersion else {
                    if version > Self.schemaVersion {
                        // A rollback: said in the log, as a newer version's schema may hold what this one ignores.
                        logger.warning(
                            "PostgreSQL: schema \(version) is newer than this version of swift-app-attest's (\(Self.schemaVersion))"
                        )
                    }
                    return
                }
                // Schemas 1 to 4: every step idempotent, for a database at any of them. Not for a later one: some take
                // an exclusive lock on a table (ALTER TABLE) even when they change nothing.
                if version < 4 {
                    for statement in Self.keysAndChallenges {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    // Counters accepted below the highest, for the reorder window (AssertionAcceptance.advance).
                    var hasSeen = false
                    for try await (exists) in try await connection.query(
                        """
                        SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'app_attest_keys'::regclass
                                       AND attname = 'seen' AND NOT attisdropped)
                        """, logger: logger
                    ).decode(Bool.self) {
                        hasSeen = exists
                    }
                    if !hasSeen {
                        try await connection.query(
                            "ALTER TABLE app_attest_keys ADD COLUMN IF NOT EXISTS seen BIGINT NOT NULL DEFAULT 0",
                            logger: logger)
                        // Keys from before the window: which counters below the highest were used is not known, so all
                        // of them count as used (all 63 bits). Zero would let each be accepted once more.
                        try await connection.query(
                            "UPDATE app_attest_keys SET seen = \(AppAttestVerifier.CounterPolicy.allBelowHighestSeen)",
                            logger: logger)
                    }
                    for statement in Self.issuersAndFleet {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                }
                // Schema 5: the retention purge keeps each key's revocations (why it is refused); an index of the
                // rest, so that a purge never scans the revocations it keeps.
                if version < 5 {
                    try await connection.query(
                        """
                        CREATE INDEX IF NOT EXISTS app_attest_key_events_purgeable ON app_attest_key_events (time)
                            WHERE \(unescaped: KeyEvent.Kind.purgeableCondition)
                        """, logger: logger)
                }
                // Schema 6: the total counts the unexpired challenges reserved for no key, from an index of those.
                try await connection.query(
                    """
                    CREATE INDEX IF NOT EXISTS app_attest_challenges_unreserved ON app_attest_challenges (expires_at)
                        WHERE key_id IS NULL
                    """, logger: logger)
                try await connection.query("DELETE FROM app_attest_schema", logger: logger)
                try await connection.query(
                    "INSERT INTO app_attest_schema (version) VALUES (\(Int32(Self.schemaVersion)))", logger: logger)
            }
        }
    }

    /// Schema 1: challenges and keys (each statement idempotent).
    private static let keysAndChallenges = [
        """
        CREATE TABLE IF NOT EXISTS app_attest_challenges (
            challenge BYTEA PRIMARY KEY,
            purpose TEXT NOT NULL,
            key_id BYTEA,
            user_id TEXT,
            expires_at DOUBLE PRECISION NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS app_attest_challenges_expiry ON app_attest_challenges (expires_at)",
        "CREATE INDEX IF NOT EXISTS app_attest_challenges_key ON app_attest_challenges (key_id)",
        "CREATE INDEX IF NOT EXISTS app_attest_challenges_user ON app_attest_challenges (user_id)",
        """
        CREATE TABLE IF NOT EXISTS app_attest_keys (
            key_id BYTEA PRIMARY KEY,
            user_id TEXT,
            app_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            public_key BYTEA NOT NULL,
            counter BIGINT NOT NULL CHECK (counter BETWEEN 0 AND 4294967295),
            receipt BYTEA NOT NULL,
            risk_metric BIGINT,
            created_at DOUBLE PRECISION NOT NULL,
            receipt_updated_at DOUBLE PRECISION NOT NULL,
            revoked_at DOUBLE PRECISION
        )
        """,
        "CREATE INDEX IF NOT EXISTS app_attest_keys_user ON app_attest_keys (user_id)",
    ]

    /// Schemas 3 and 4: who asked for each challenge, so that what one issuer may hold is bounded; fleet operations,
    /// each key's audit trail and token buckets (the attestation budget). Each statement idempotent.
    private static let issuersAndFleet = [
        "ALTER TABLE app_attest_challenges ADD COLUMN IF NOT EXISTS issuer TEXT",
        "CREATE INDEX IF NOT EXISTS app_attest_challenges_issuer ON app_attest_challenges (issuer)",
        """
        CREATE TABLE IF NOT EXISTS app_attest_key_events (
            id BIGSERIAL PRIMARY KEY,
            key_id BYTEA NOT NULL,
            kind TEXT NOT NULL,
            time DOUBLE PRECISION NOT NULL,
            detail TEXT
        )
        """,
        "CREATE INDEX IF NOT EXISTS app_attest_key_events_key ON app_attest_key_events (key_id, id)",
        "CREATE INDEX IF NOT EXISTS app_attest_key_events_time ON app_attest_key_events (time)",
        """
        CREATE TABLE IF NOT EXISTS app_attest_token_buckets (
            name TEXT PRIMARY KEY,
            tokens DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        )
        """,
    ]
}
#endif  // PostgreSQL
