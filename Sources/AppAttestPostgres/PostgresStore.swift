#if PostgreSQL
public import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
public import Foundation
public import Logging
public import PostgresNIO
import NIOSSL
import Synchronization

/// The shared store for fleets of servers: PostgreSQL through postgres-nio's pooled `PostgresClient`.
///
/// Counters advance by one conditional `UPDATE … WHERE counter < $new`, challenges are consumed by
/// `DELETE … RETURNING`, keys are inserted with `ON CONFLICT DO NOTHING`: each an atomic statement, so that
/// servers sharing the database never need a lock of their own. Migrations run under an advisory lock.
public final class PostgresAppAttestStore: AppAttestStore, Sendable {
    private let client: PostgresClient
    private let logger: Logger
    private let runner = Mutex<Task<Void, Never>?>(nil)
    /// How long one operation may take before it fails with `StoreError.Code.unavailable` (a database that went away
    /// otherwise holds each request as long as the system's TCP timeouts, over a minute).
    public let operationTimeout: Duration

    /// The default ``operationTimeout``: 5 seconds.
    public static let defaultOperationTimeout: Duration = .seconds(5)

    /// Connects with a URL `postgres://user[:password]@host[:port]/database[?sslmode=…&sslrootcert=…]`, runs the
    /// client, and migrates. See ``configuration(url:)`` for TLS.
    /// - Parameters:
    ///   - url: the database URL.
    ///   - logger: where the client logs.
    ///   - startupTimeout: how long to wait for the database before failing (a database that cannot be reached
    ///     otherwise keeps the pool retrying forever).
    ///   - operationTimeout: how long one operation may take once started (``operationTimeout``).
    /// - Throws: `StoreError.Kind.unavailable` with a message when the URL is not usable or the database does not
    ///   answer in time.
    public static func connect(
        url: String, logger: Logger = Logger(label: "AppAttestPostgres", factory: { _ in SwiftLogNoOpLogHandler() }),
        startupTimeout: Duration = .seconds(30),
        operationTimeout: Duration = defaultOperationTimeout
    )
        async throws(StoreError) -> PostgresAppAttestStore
    {
        try await connect(
            configuration: try configuration(url: url), logger: logger, startupTimeout: startupTimeout,
            operationTimeout: operationTimeout)
    }

    /// The client configuration for a URL, with TLS chosen as libpq's `sslmode` chooses it:
    ///
    /// | `sslmode` | |
    /// |---|---|
    /// | `disable` | no TLS |
    /// | `prefer` (default) | TLS when the server offers it, certificate not verified |
    /// | `require` | TLS or fail, certificate not verified; verified as `verify-ca` when a root file is given |
    /// | `verify-ca` | TLS or fail, certificate chained to the root file |
    /// | `verify-full` | as `verify-ca`, and the certificate names the host |
    ///
    /// The root file is `sslrootcert` (a PEM file of the CA certificates to trust), or else
    /// `~/.postgresql/root.crt` when it exists, as with libpq. `verify-ca` and `verify-full` without either are refused,
    /// as libpq refuses them. `sslrootcert=system` trusts the system's roots, and only with `verify-full` (the
    /// default then): a public CA vouches for any name, so a check without the host name would accept any server.
    public static func configuration(url: String) throws(StoreError) -> PostgresClient.Configuration {
        guard let components = URLComponents(string: url),
            ["postgres", "postgresql"].contains(components.scheme ?? ""),
            let host = components.host, let user = components.user
        else { throw StoreError(.unavailable, "not a postgres://user@host/database URL") }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        let systemRoots = query["sslrootcert"] == "system"
        var rootFile = systemRoots ? nil : query["sslrootcert"]
        if rootFile == nil, !systemRoots, let home = ProcessInfo.processInfo.environment["HOME"] {
            let defaultFile = "\(home)/.postgresql/root.crt"
            if FileManager.default.fileExists(atPath: defaultFile) { rootFile = defaultFile }
        }
        if let rootFile {
            guard FileManager.default.isReadableFile(atPath: rootFile) else {
                throw StoreError(.unavailable, "sslrootcert: cannot read \(rootFile.prefix(256))")
            }
            tlsConfiguration.trustRoots = .file(rootFile)
        }
        let mode = query["sslmode"] ?? (systemRoots ? "verify-full" : "prefer")
        if systemRoots, mode != "verify-full" {
            throw StoreError(.unavailable, "sslrootcert=system needs sslmode=verify-full")
        }
        if ["verify-ca", "verify-full"].contains(mode), rootFile == nil, !systemRoots {
            throw StoreError(
                .unavailable,
                "sslmode=\(mode) needs sslrootcert (a PEM file of the CA certificates to trust, or system with "
                    + "verify-full)")
        }
        let tls: PostgresClient.Configuration.TLS
        switch mode {
        case "disable":
            tls = .disable
        case "prefer", "allow":
            tlsConfiguration.certificateVerification = .none
            tls = .prefer(tlsConfiguration)
        case "require":
            // libpq: with a root file, require verifies the chain as verify-ca does.
            tlsConfiguration.certificateVerification = rootFile == nil ? .none : .noHostnameVerification
            tls = .require(tlsConfiguration)
        case "verify-ca":
            tlsConfiguration.certificateVerification = .noHostnameVerification
            tls = .require(tlsConfiguration)
        case "verify-full":
            tlsConfiguration.certificateVerification = .fullVerification
            tls = .require(tlsConfiguration)
        default:
            throw StoreError(
                .unavailable, "sslmode is one of disable, prefer, require, verify-ca, verify-full")
        }
        return PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: database.isEmpty ? nil : database, tls: tls)
    }

    /// Connects with a full client configuration: runs its own client, and migrates.
    /// - Parameters:
    ///   - configuration: the client configuration.
    ///   - logger: where the client logs.
    ///   - startupTimeout: how long to wait for the database before failing.
    ///   - operationTimeout: how long one operation may take once started (``operationTimeout``).
    public static func connect(
        configuration: PostgresClient.Configuration,
        logger: Logger = Logger(label: "AppAttestPostgres", factory: { _ in SwiftLogNoOpLogHandler() }),
        startupTimeout: Duration = .seconds(30), operationTimeout: Duration = defaultOperationTimeout
    )
        async throws(StoreError) -> PostgresAppAttestStore
    {
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let store = PostgresAppAttestStore(client: client, logger: logger, operationTimeout: operationTimeout)
        store.runner.withLock { $0 = Task { await client.run() } }
        // Let the pool's run loop start before the first query leases a connection.
        for _ in 0..<10 { await Task.yield() }
        do {
            try await store.migrate(within: startupTimeout)
        } catch {
            store.shutdown()
            throw error
        }
        return store
    }

    /// A store on a client that your application owns and runs (for example as a service of its `ServiceGroup`):
    /// the store migrates through it and never stops it. The client must be running, or start running within
    /// `startupTimeout`.
    /// - Parameters:
    ///   - client: your client.
    ///   - logger: where the store logs.
    ///   - startupTimeout: how long to wait for the database before failing.
    ///   - operationTimeout: how long one operation may take once started (``operationTimeout``).
    public static func make(
        client: PostgresClient,
        logger: Logger = Logger(label: "AppAttestPostgres", factory: { _ in SwiftLogNoOpLogHandler() }),
        startupTimeout: Duration = .seconds(30), operationTimeout: Duration = defaultOperationTimeout
    ) async throws(StoreError) -> PostgresAppAttestStore {
        let store = PostgresAppAttestStore(client: client, logger: logger, operationTimeout: operationTimeout)
        try await store.migrate(within: startupTimeout)
        return store
    }

    /// Migrates, or fails once `timeout` has passed without an answer.
    private func migrate(within timeout: Duration) async throws(StoreError) {
        let outcome: Result<Void, StoreError> = await withTaskGroup(of: Result<Void, StoreError>?.self) { group in
            group.addTask {
                do throws(StoreError) { try await self.migrate() } catch { return .failure(error) }
                return .success(())
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return Task.isCancelled
                    ? nil
                    : .failure(
                        StoreError(
                            .unavailable,
                            "PostgreSQL did not answer within \(timeout.components.seconds) s (is the database up, and "
                                + "are host, port, credentials and sslmode right?)"))
            }
            var first: Result<Void, StoreError>?
            for await result in group {
                if let result {
                    first = result
                    break
                }
            }
            group.cancelAll()
            return first ?? .failure(StoreError(.unavailable, "PostgreSQL start-up was cancelled"))
        }
        try outcome.get()
    }

    private init(client: PostgresClient, logger: Logger, operationTimeout: Duration) {
        self.client = client
        self.logger = logger
        self.operationTimeout = operationTimeout
    }

    /// Stops the client's connection pool (the ``AppAttestStore/AppAttestStore/close()`` of this store).
    public func close() async { shutdown() }

    /// Stops the client's connection pool.
    public func shutdown() {
        runner.withLock { task in
            task?.cancel()
            task = nil
        }
    }

    deinit { runner.withLock { $0?.cancel() } }

    /// The schema this code writes: 1 the tables, 2 the reorder window's `seen` column, 3 the challenges' `issuer`.
    static let schemaVersion = 3

    private func migrate() async throws(StoreError) {
        // Bounded by the start-up timeout (migrate(within:)), not the operation timeout.
        try await perform(bounded: false) { client, logger in
            try await client.withTransaction(logger: logger) { connection in
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
                guard version < Self.schemaVersion else { return }
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS app_attest_challenges (
                        challenge BYTEA PRIMARY KEY,
                        purpose TEXT NOT NULL,
                        key_id BYTEA,
                        user_id TEXT,
                        expires_at DOUBLE PRECISION NOT NULL
                    )
                    """, logger: logger)
                try await connection.query(
                    "CREATE INDEX IF NOT EXISTS app_attest_challenges_expiry ON app_attest_challenges (expires_at)",
                    logger: logger)
                try await connection.query(
                    "CREATE INDEX IF NOT EXISTS app_attest_challenges_key ON app_attest_challenges (key_id)",
                    logger: logger)
                try await connection.query(
                    "CREATE INDEX IF NOT EXISTS app_attest_challenges_user ON app_attest_challenges (user_id)",
                    logger: logger)
                try await connection.query(
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
                    """, logger: logger)
                try await connection.query(
                    "CREATE INDEX IF NOT EXISTS app_attest_keys_user ON app_attest_keys (user_id)", logger: logger)
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
                // Who asked for each challenge, so that what one issuer may hold is bounded.
                try await connection.query(
                    "ALTER TABLE app_attest_challenges ADD COLUMN IF NOT EXISTS issuer TEXT", logger: logger)
                try await connection.query(
                    "CREATE INDEX IF NOT EXISTS app_attest_challenges_issuer ON app_attest_challenges (issuer)",
                    logger: logger)
                try await connection.query("DELETE FROM app_attest_schema", logger: logger)
                try await connection.query(
                    "INSERT INTO app_attest_schema (version) VALUES (\(Int32(Self.schemaVersion)))", logger: logger)
            }
        }
    }

    public func insertChallenge(_ record: ChallengeRecord) async throws(StoreError) {
        _ = try await perform { client, logger in
            try await client.query(try Self.insertion(record), logger: logger)
        }
    }

    private static func insertion(_ record: ChallengeRecord) throws -> PostgresQuery {
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
        let key = record.keyID.map { Data($0.rawValue) }, userID = record.userID
        let time = now.timeIntervalSince1970, keep = Int64(max(0, limit - 1))
        _ = try await perform { client, logger in
            try await client.withTransaction(logger: logger) { connection in
                // The owner's newest `limit - 1` unexpired challenges stay; older ones go, then the new one is stored.
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
                            SELECT challenge FROM app_attest_challenges WHERE user_id = \(userID) AND expires_at > \(time)
                            ORDER BY expires_at DESC OFFSET \(keep))
                        """, logger: logger)
                }
                try await connection.query(try Self.insertion(record), logger: logger)
            }
        }
    }

    public func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int {
        let time = now.timeIntervalSince1970
        return try await perform { client, logger -> Int in
            let rows = try await client.query(
                "SELECT COUNT(*) FROM app_attest_challenges WHERE issuer = \(issuer) AND expires_at > \(time)",
                logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    public func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        async throws(StoreError) -> ChallengeRecord?
    {
        let bytes = Data(challenge), key = keyID.map { Data($0.rawValue) }
        // One statement: deleted and returned only when the purpose and the reservation allow this key and user.
        let row = try await perform { client, logger -> (String, Data?, String?, Double)? in
            let rows = try await client.query(
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
        let row = try await perform { client, logger -> (String, Data?, String?, Double)? in
            let rows = try await client.query(
                "SELECT purpose, key_id, user_id, expires_at FROM app_attest_challenges WHERE challenge = \(bytes)",
                logger: logger)
            for try await row in rows.decode((String, Data?, String?, Double).self) { return row }
            return nil
        }
        return try row.map { row throws(StoreError) in try Self.challengeRecord(challenge, row) }
    }

    public func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int {
        let time = now.timeIntervalSince1970, key = keyID.map { Data($0.rawValue) }
        return try await perform { client, logger -> Int in
            let rows: PostgresRowSequence
            if let key {
                rows = try await client.query(
                    "SELECT COUNT(*) FROM app_attest_challenges WHERE key_id = \(key) AND expires_at > \(time)",
                    logger: logger)
            } else if let userID {
                rows = try await client.query(
                    "SELECT COUNT(*) FROM app_attest_challenges WHERE user_id = \(userID) AND expires_at > \(time)",
                    logger: logger)
            } else {
                rows = try await client.query(
                    "SELECT COUNT(*) FROM app_attest_challenges WHERE expires_at > \(time)", logger: logger)
            }
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
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
        let time = now.timeIntervalSince1970
        return try await perform { client, logger in
            let rows = try await client.query(
                "DELETE FROM app_attest_challenges WHERE expires_at < \(time) RETURNING 1", logger: logger)
            var count = 0
            for try await _ in rows { count += 1 }
            return count
        }
    }

    public func insertKey(_ record: KeyRecord) async throws(StoreError) -> KeyInsertion {
        let keyID = Data(record.keyID.rawValue), userID = record.userID, appID = record.key.appID.rawValue
        let environment = record.key.environment.rawValue, publicKey = Data(record.key.publicKey.x963Representation),
            counter = Int64(record.key.counter)
        let receipt = Data(record.receipt), metric = record.riskMetric.map(Int64.init)
        let created = record.createdAt.timeIntervalSince1970, updated = record.receiptUpdatedAt.timeIntervalSince1970
        let revoked = record.revokedAt?.timeIntervalSince1970
        let inserted = try await perform { client, logger in
            let rows = try await client.query(
                """
                INSERT INTO app_attest_keys (key_id, user_id, app_id, environment, public_key, counter, receipt, risk_metric,
                                             created_at, receipt_updated_at, revoked_at)
                VALUES (\(keyID), \(userID), \(appID), \(environment), \(publicKey), \(counter), \(receipt), \(metric),
                        \(created), \(updated), \(revoked))
                ON CONFLICT (key_id) DO NOTHING RETURNING 1
                """, logger: logger)
            var count = 0
            for try await _ in rows { count += 1 }
            return count == 1
        }
        if inserted { return .inserted }
        guard let existing = try await key(record.keyID) else {
            throw StoreError(.corrupted, "a key that conflicts but cannot be read")
        }
        return .duplicate(existing)
    }

    private typealias KeyRow = (Data, String?, String, String, Data, Int64, Data, Int64?, Double, Double, Double?)
    private static let keyColumns =
        "key_id, user_id, app_id, environment, public_key, counter, receipt, risk_metric, created_at, receipt_updated_at, revoked_at"

    public func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        let bytes = Data(keyID.rawValue)
        let rows = try await fetchKeys { client, logger in
            try await client.query(
                "SELECT \(unescaped: Self.keyColumns) FROM app_attest_keys WHERE key_id = \(bytes)", logger: logger)
        }
        return rows.first
    }

    public func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord] {
        try await fetchKeys { client, logger in
            try await client.query(
                "SELECT \(unescaped: Self.keyColumns) FROM app_attest_keys WHERE user_id = \(userID) ORDER BY created_at, key_id",
                logger: logger)
        }
    }

    public func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError)
        -> AssertionAcceptanceOutcome
    {
        // One statement, one round trip, one implicit transaction.
        try await perform { client, logger in
            try await Self.accept(acceptance, .pool(client, logger))
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
                return try await perform { client, logger in
                    try await Self.acceptCounters(batch, order: order, client: client, logger: logger)
                }
            }
            return try await perform { client, logger in
                try await client.withTransaction(logger: logger) { connection in
                    var outcomes = [AssertionAcceptanceOutcome?](repeating: nil, count: batch.count)
                    for index in order {
                        outcomes[index] = try await Self.accept(batch[index], .connection(connection, logger))
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
    /// the usual case, is one statement and one round trip on the pool, its own implicit transaction; more run in one
    /// transaction, each round locking only keys the first already holds, in keyId order. A refusal costs one more
    /// read, after the commit.
    private static func acceptCounters(
        _ batch: [AssertionAcceptance], order: [Int], client: PostgresClient, logger: Logger
    ) async throws -> [AssertionAcceptanceOutcome] {
        let rounds = AssertionAcceptance.rounds(batch, order: order)
        let statements = rounds.map { round in
            CounterUpdates(
                counters: round.map { Int64(batch[$0].counter) },
                keyIDs: round.map { ByteBuffer(bytes: batch[$0].keyID.rawValue) },
                windows: round.map { Int64(batch[$0].counterPolicy.window) })
        }
        // Each round's accepted keys and their highest counters, as the round left them.
        let returned: [[Data: Int64]]
        if statements.count == 1 {
            returned = [try await Dictionary(Session.pool(client, logger).execute(statements[0])) { $1 }]
        } else {
            returned = try await client.withTransaction(logger: logger) { connection in
                var returned: [[Data: Int64]] = []
                for statement in statements {
                    returned.append(
                        try await Dictionary(Session.connection(connection, logger).execute(statement)) { $1 })
                }
                return returned
            }
        }
        let accepted = zip(rounds, returned).map { round, highest in
            round.map { highest[Data(batch[$0].keyID.rawValue)] }
        }
        var outcomes = AssertionAcceptance.acceptedOutcomes(batch, rounds: rounds, accepted: accepted)
        for index in outcomes.indices where outcomes[index] == nil {
            outcomes[index] = try await explain(batch[index], Session.pool(client, logger).query)
        }
        return outcomes.map { $0! }
    }

    /// Where a statement runs: on the pool (its own implicit transaction) or on a connection inside a transaction.
    enum Session {
        case pool(PostgresClient, Logger)
        case connection(PostgresConnection, Logger)

        func query(_ query: PostgresQuery) async throws -> PostgresRowSequence {
            switch self {
            case .pool(let client, let logger): try await client.query(query, logger: logger)
            case .connection(let connection, let logger): try await connection.query(query, logger: logger)
            }
        }

        /// A prepared statement (parsed and planned once per connection), its rows collected.
        func execute<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row] {
            var rows: [Statement.Row] = []
            switch self {
            case .pool(let client, let logger):
                for try await row in try await client.execute(statement, logger: logger) { rows.append(row) }
            case .connection(let connection, let logger):
                for try await row in try await connection.execute(statement, logger: logger) { rows.append(row) }
            }
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
    private static func accept(_ acceptance: AssertionAcceptance, _ session: Session) async throws
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
        private static func each(_ text: String) -> String {
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
    private static func explain(
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

    public func revokeKey(_ keyID: KeyID, at time: Date) async throws(StoreError) -> Bool {
        let bytes = Data(keyID.rawValue), seconds = time.timeIntervalSince1970
        return try await affected { client, logger in
            try await client.query(
                "UPDATE app_attest_keys SET revoked_at = \(seconds) WHERE key_id = \(bytes) AND revoked_at IS NULL RETURNING 1",
                logger: logger)
        }
    }

    public func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date)
        async throws(StoreError) -> Bool
    {
        let bytes = Data(keyID.rawValue), data = Data(receipt), metric = riskMetric.map(Int64.init)
        let seconds = time.timeIntervalSince1970
        return try await affected { client, logger in
            try await client.query(
                """
                UPDATE app_attest_keys SET receipt = \(data), risk_metric = \(metric), receipt_updated_at = \(seconds)
                WHERE key_id = \(bytes) RETURNING 1
                """, logger: logger)
        }
    }

    // MARK: Helpers

    /// Runs one operation within ``operationTimeout`` (unless not `bounded`), its errors as `StoreError`.
    private func perform<T: Sendable>(
        bounded: Bool = true, _ body: @escaping @Sendable (PostgresClient, Logger) async throws -> T
    ) async throws(StoreError) -> T {
        let client = client
        let logger = logger
        let operation = { @Sendable () async throws(StoreError) -> T in
            do { return try await body(client, logger) } catch let error as StoreError { throw error } catch {
                throw StoreError(.unavailable, "PostgreSQL: \(String(reflecting: error).prefix(500))")
            }
        }
        guard bounded else { return try await operation() }
        return try await StoreDeadline.run(operationTimeout, "PostgreSQL", operation)
    }

    private func affected(_ query: @escaping @Sendable (PostgresClient, Logger) async throws -> PostgresRowSequence)
        async throws(StoreError) -> Bool
    {
        try await perform { client, logger in
            var count = 0
            for try await _ in try await query(client, logger) { count += 1 }
            return count == 1
        }
    }

    private func fetchKeys(_ query: @escaping @Sendable (PostgresClient, Logger) async throws -> PostgresRowSequence)
        async throws(StoreError) -> [KeyRecord]
    {
        let rows = try await perform { client, logger -> [KeyRow] in
            var rows: [KeyRow] = []
            for try await row in try await query(client, logger).decode(KeyRow.self) { rows.append(row) }
            return rows
        }
        var records: [KeyRecord] = []
        for row in rows {
            records.append(
                try KeyRecord.decoding(
                    keyID: row.0, userID: row.1, appID: row.2, environment: row.3, publicKey: row.4, counter: row.5,
                    receipt: Array(row.6), riskMetric: row.7.map { Int($0) }, createdAt: row.8,
                    receiptUpdatedAt: row.9, revokedAt: row.10))
        }
        return records
    }

    static func keyID(_ data: Data) throws(StoreError) -> KeyID {
        do { return try KeyID(rawValue: data) } catch {
            throw StoreError(.corrupted, "a stored keyId of \(data.count) bytes")
        }
    }
}
#endif  // PostgreSQL
