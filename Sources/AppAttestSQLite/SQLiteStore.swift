#if SQLite
import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
import GRDB
public import Logging

/// The embedded default store: one SQLite file, in WAL mode, with the schema created and migrated on open.
///
/// GRDB was chosen over sqlite-nio for its `DatabasePool` (WAL, one writer and concurrent readers, busy timeouts
/// that let several processes share the file), its migrator, and statements whose effects are atomic on their
/// own: consume-once is one `DELETE … RETURNING`, the counter one conditional `UPDATE`, key insertion one
/// `INSERT … ON CONFLICT DO NOTHING` (SQLite ≥ 3.35).
public final class SQLiteAppAttestStore: AppAttestStore, Sendable {
    let pool: DatabasePool
    /// Point reads of keys, on connections of their own.
    let reader: SQLiteKeyReader
    /// Whether the index of keys without their receipts is there (``keysWithoutReceiptsIndex``).
    let readsKeysFromIndex: Bool
    /// The log's checkpoints, off the writer.
    package let checkpointer: SQLiteCheckpointer
    /// The database file.
    public let path: String
    /// How long a write may wait for another process's lock, and at least a second: what the service's batchers let a
    /// request wait for its turn (``AppAttestStore/StoreOperationsAreBounded``).
    package let operationBound: Duration

    /// Opens (creating if needed) the database at `path` and migrates its schema.
    /// - Parameters:
    ///   - busyTimeout: how long a write waits for another process's lock.
    ///   - logRestartBytes: the size of the write-ahead log from which the store starts it again from its beginning
    ///     (``defaultLogRestartBytes``, 64 MiB), counted in the file's pages; a value below 1 MiB is taken as 1 MiB,
    ///     one above 64 GiB as 64 GiB. Each restart holds the store's writes while SQLite syncs what is left to copy:
    ///     10–20 ms for a fleet of thousands of keys, tens of milliseconds and up to about 220 ms for a million, on a
    ///     small virtual machine's disk, where the log reached 64 MiB every five seconds at full load. A larger value
    ///     makes those pauses rarer, not shorter, and lets the log's file grow to about that size under sustained
    ///     writes (AppAttestLifecycle's “Running the verification service”).
    ///   - logger: where the store reports what fails in the background: a checkpoint of its log, which it copies
    ///     back into the database file every 250 ms (AppAttestLifecycle's “Running the verification service”).
    ///     Nothing by default.
    public convenience init(
        path: String, busyTimeout: TimeInterval = 10, logRestartBytes: Int = defaultLogRestartBytes,
        logger: Logger = Logger(label: "AppAttestSQLite", factory: { _ in SwiftLogNoOpLogHandler() })
    ) throws(StoreError) {
        try self.init(
            path: path, busyTimeout: busyTimeout, keyReadConnections: SQLiteKeyReader.defaultMaximumConnections,
            logRestartBytes: logRestartBytes, logger: logger)
    }

    /// The write-ahead log's size from which the store restarts it by default: 64 MiB.
    public static let defaultLogRestartBytes = 64 << 20

    /// - Parameters:
    ///   - keyReadConnections: the most connections the key reader opens (tests pass 0 to read every key through
    ///     GRDB's pool).
    ///   - checkpoints: whether the log is checkpointed in the background (tests run them by hand).
    ///   - logRestartBytes: the log's size from which a checkpoint restarts it, in bytes (at least 1 MiB).
    ///   - checkpointRestartPages: the same in pages, in place of `logRestartBytes` (tests make it small).
    ///   - logger: where failed background checkpoints are reported.
    package init(
        path: String, busyTimeout: TimeInterval, keyReadConnections: Int, checkpoints: Bool = true,
        logRestartBytes: Int = defaultLogRestartBytes, checkpointRestartPages: Int? = nil, logger: Logger
    ) throws(StoreError) {
        var configuration = Configuration()
        configuration.busyMode = .timeout(busyTimeout)
        configuration.prepareDatabase { db in
            // WAL with synchronous=NORMAL survives the crash of any process (not a power loss, which FULL covers).
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // No checkpoint inside a commit: `SQLiteCheckpointer` runs them beside the writer.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
            // A fleet's keys are read in no particular order: each connection caches up to 8 MiB of pages (the
            // interior pages of the tables and indexes stay; SQLite's default is 2 MiB), the rest is read from the
            // kernel's page cache. Not memory-mapped: the file grows as counters do, and SQLite then unmaps and maps
            // it again at the next read transaction of every connection (MEASUREMENTS.md, “Scale”).
            try db.execute(sql: "PRAGMA cache_size = -\(Self.pageCacheKiB)")
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
        let pageSize: Int
        let superseded: Bool
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
            // The index keys are read from without their receipts (v7): missing only when dropped since (by hand, by
            // a restore that left it out). Then keys are read whole, their receipts dropped after, as it was before.
            // And the file's page size: the log restarts at a size in bytes, counted in pages.
            // And whether a newer version of the package migrated the file (a rollback): said in the log.
            (readsKeysFromIndex, pageSize, superseded) = try pool.read { db in
                (
                    try db.indexes(on: "keys").contains { $0.name == Self.keysWithoutReceiptsIndex },
                    try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096,
                    try Self.migrator.hasBeenSuperseded(db)
                )
            }
        } catch {
            throw StoreError(.unavailable, "SQLite \(path): \(error)")
        }
        if superseded {
            logger.warning(
                "SQLite: the database was migrated by a newer version of swift-app-attest; this one may not know all of it",
                metadata: ["path": "\(path)"])
        }
        if !readsKeysFromIndex {
            logger.warning(
                "SQLite: the index \(Self.keysWithoutReceiptsIndex) is missing: keys are read with their receipts",
                metadata: ["path": "\(path)"])
        }
        self.path = path
        operationBound = .milliseconds(max(1_000, Int64(Self.busyTimeoutMilliseconds(busyTimeout))))
        // Absolute, so that a later change of the working directory sends no new connection to another file.
        let absolute =
            path.hasPrefix("/") ? path : URL(fileURLWithPath: path, isDirectory: false).standardizedFileURL.path
        reader = SQLiteKeyReader(path: absolute, busyTimeout: busyTimeout, maximumConnections: keyReadConnections)
        checkpointer = SQLiteCheckpointer(
            path: absolute, writer: pool, writerBusyTimeout: busyTimeout,
            interval: checkpoints ? SQLiteCheckpointer.interval : nil,
            restartPages: checkpointRestartPages ?? min(max(logRestartBytes, 1 << 20), 64 << 30) / max(pageSize, 512),
            logger: logger)
    }

    /// Every column of `keys` but the receipt (migration v7).
    static let keysWithoutReceiptsIndex = "keys_without_receipts"

    /// Each connection's page cache, in KiB.
    static let pageCacheKiB = 8192

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
            // bytes. In `keys` each update rewrote the whole row, receipt included: a real receipt makes the row about
            // a page (README, "Load", has the figures).
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
        migrator.registerMigration("v6") { db in
            // Fleet operations: each key's audit trail, and token buckets (the attestation budget).
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS key_events (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        key_id BLOB NOT NULL,
                        kind TEXT NOT NULL,
                        time REAL NOT NULL,
                        detail TEXT
                    );
                    CREATE INDEX IF NOT EXISTS key_events_key ON key_events(key_id, id);
                    CREATE INDEX IF NOT EXISTS key_events_time ON key_events(time);
                    CREATE TABLE IF NOT EXISTS token_buckets (
                        name TEXT PRIMARY KEY NOT NULL,
                        tokens REAL NOT NULL,
                        updated_at REAL NOT NULL
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v7") { db in
            // Every column of a key but its receipt, in an index: the assertion path reads its keys from the index
            // alone (`selectKeys(.withoutReceipt)`), never the row, which a real receipt makes about a page. A fleet
            // far larger than the key cache reads a key for nearly every assertion (README, "Scale"). Built once, when
            // a database from before opens, reading every key's row (about the whole file).
            try db.execute(
                sql: """
                    CREATE INDEX IF NOT EXISTS \(keysWithoutReceiptsIndex)
                        ON keys(key_id, user_id, app_id, environment, public_key, risk_metric, created_at,
                            receipt_updated_at)
                    """)
        }
        migrator.registerMigration("v8") { db in
            // The retention purge keeps each key's revocations (why it is refused): an index of the rest, so that a
            // purge never scans the revocations it keeps.
            try db.execute(
                sql: """
                    CREATE INDEX IF NOT EXISTS key_events_purgeable ON key_events(time)
                        WHERE \(KeyEvent.Kind.purgeableCondition)
                    """)
        }
        migrator.registerMigration("v9") { db in
            // The service's total counts the unexpired challenges reserved for no key: from an index of those alone.
            try db.execute(
                sql: "CREATE INDEX IF NOT EXISTS challenges_unreserved ON challenges(expires_at) WHERE key_id IS NULL")
        }
        return migrator
    }

    /// Closes the database file; later operations fail with `unavailable`.
    public func close() async {
        checkpointer.stop()
        reader.close()
        try? pool.close()
    }

    // MARK: Helpers

    func write<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws(StoreError) -> T {
        try await Self.access { try await pool.write(body) }
    }

    func writeWithoutTransaction<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T)
        async throws(StoreError) -> T
    {
        try await Self.access { try await pool.writeWithoutTransaction(body) }
    }

    func read<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws(StoreError) -> T {
        try await Self.access { try await pool.read(body) }
    }

    /// A database access, its errors as the store's: a `StoreError` as it is, anything else `unavailable`.
    static func access<T>(_ body: () async throws -> T) async throws(StoreError) -> T {
        do { return try await body() } catch let error as StoreError { throw error } catch {
            throw StoreError(.unavailable, "SQLite: \(error)")
        }
    }

    static func keyID(_ data: Data) throws(StoreError) -> KeyID {
        do { return try KeyID(rawValue: data) } catch {
            throw StoreError(.corrupted, "a stored keyId of \(data.count) bytes")
        }
    }

    /// The keys a statement of ``selectKeys`` reads through GRDB, each row decoded as the key reader decodes its own
    /// (``keyRecord(_:)``, from the statement GRDB has stepped).
    static func fetchKeys(_ db: Database, _ sql: String, _ arguments: StatementArguments) throws -> [KeyRecord] {
        let statement = try db.cachedStatement(sql: sql)
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        var records: [KeyRecord] = []
        while try rows.next() != nil { records.append(try keyRecord(statement.sqliteStatement)) }
        return records
    }
}

extension SQLiteAppAttestStore:
    KeyReadsHoldTheCallingThread, KeyReadsWithoutCounters, StoreOperationsAreBounded, CountsUnreservedChallenges
{}
#endif  // SQLite
