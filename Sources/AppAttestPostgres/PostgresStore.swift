#if PostgreSQL
import AppAttest
public import AppAttestStore
import AppAttestSQLSupport
import Foundation
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
    let client: PostgresClient
    let logger: Logger
    let runner = Mutex<Task<Void, Never>?>(nil)
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
    ///
    /// The pool keeps 4 connections open (`options.minimumConnections`; up to PostgresNIO's 20 under load) and sends
    /// no keep-alive queries (`options.keepAliveBehavior` nil). PostgresNIO schedules a timer each time it takes a
    /// connection back (for its idle timeout unless it is one of those kept open, and for its next keep-alive query)
    /// and cancels it at the next lease: a task group, a sleep and its cancellation for every store operation, and the
    /// cancelled sleep stays in memory until it would have ended, 30 or 60 seconds later (with 100,000 keys, 40–50 % of
    /// the server's memory; README, “Scale”).
    ///
    /// Without keep-alive queries, a connection kept open may stay idle for long on a quiet instance. If a NAT or a
    /// load balancer on the way drops it silently, the operations that next use it (a batch of acceptances, or of
    /// key reads) fail with `unavailable` at ``operationTimeout``, and the connection is closed then (the pool opens
    /// another). Keep TCP keep-alives below the idle timeout of anything on
    /// the way: PostgreSQL's `tcp_keepalives_idle` when the instances connect to it directly, the proxy's own towards
    /// the instances otherwise (HAProxy's `option clitcpka`, PgBouncer's `tcp_keepidle`). Or set the options back on
    /// the returned configuration (`keepAliveBehavior = .init()`); a client of your own
    /// (``make(client:logger:startupTimeout:operationTimeout:)``) gains the same by setting them.
    /// ``connect(configuration:logger:startupTimeout:operationTimeout:)`` lowers a minimum above the maximum to it.
    public static func configuration(url: String) throws(StoreError) -> PostgresClient.Configuration {
        guard let components = URLComponents(string: url),
            ["postgres", "postgresql"].contains(components.scheme ?? ""),
            let host = components.host, let user = components.user
        else { throw StoreError(.unavailable, "not a postgres://user@host/database URL") }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        // A connection closed at an operation's deadline is given back to the pool once closed (``perform``): not
        // after waiting 5 s (NIOSSL's default) for the close_notify of a server that no longer answers.
        tlsConfiguration.shutdownTimeout = .milliseconds(100)
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
        var configuration = PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: database.isEmpty ? nil : database, tls: tls)
        configuration.options.minimumConnections = persistentConnections
        configuration.options.keepAliveBehavior = nil
        return configuration
    }

    /// The connections ``configuration(url:)`` keeps open: as many as one key read and one acceptance in flight
    /// need, with room for the other operations.
    static let persistentConnections = 4

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
        // PostgresNIO traps on a pool whose minimum exceeds its maximum (a maximum lowered on `configuration(url:)`'s
        // result without its minimum).
        var configuration = configuration
        configuration.options.minimumConnections = min(
            configuration.options.minimumConnections, configuration.options.maximumConnections)
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
    /// `startupTimeout`. At that timeout this throws without waiting for the migration, which is cancelled but may
    /// still hold a connection of your client until its request or statement ends, and may even complete: it is one
    /// transaction, so a later start-up finds the schema as it was or fully migrated.
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

    /// A store on `client`, which the application runs as a service of its `ServiceGroup` (listed before the
    /// services that use the store, so that it stops after them), once the database is migrated. The migration runs
    /// here through a client of its own, run and stopped within this call, so that `client` need not be running yet:
    /// the store is ready before the group starts. The store never stops `client`.
    /// - Parameters:
    ///   - client: the client your service group will run.
    ///   - configuration: its configuration, for the migration's client.
    ///   - logger: where the store logs.
    ///   - startupTimeout: how long to wait for the database before failing.
    ///   - operationTimeout: how long one operation may take once started (``operationTimeout``).
    package static func migratedBeforeRunning(
        client: PostgresClient, configuration: PostgresClient.Configuration, logger: Logger,
        startupTimeout: Duration, operationTimeout: Duration
    ) async throws(StoreError) -> PostgresAppAttestStore {
        // The migration's client logs nothing of its own (a lease can precede its run loop by a moment), and opens
        // only the connection the migration takes.
        var migration = configuration
        migration.options.minimumConnections = 0
        let migrationClient = PostgresClient(
            configuration: migration,
            backgroundLogger: Logger(
                label: "AppAttestPostgres",
                factory: { _ in
                    SwiftLogNoOpLogHandler()
                }))
        let migrator = PostgresAppAttestStore(
            client: migrationClient, logger: logger, operationTimeout: operationTimeout)
        let runner = Task { await migrationClient.run() }
        do {
            try await migrator.migrate(within: startupTimeout)
        } catch {
            // Not awaited: a connection attempt that never answers would hold the failure past the start-up timeout.
            runner.cancel()
            throw error
        }
        runner.cancel()
        await runner.value
        return PostgresAppAttestStore(client: client, logger: logger, operationTimeout: operationTimeout)
    }

    init(client: PostgresClient, logger: Logger, operationTimeout: Duration) {
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

    /// The schema this code writes: 1 the tables, 2 the reorder window's `seen` column, 3 the challenges' `issuer`,
    /// 4 the keys' events and the token buckets, 5 an index for the events' purge, 6 an index of the challenges reserved
    /// for no key (the service's total).
    static let schemaVersion = 6

    // MARK: Helpers

    /// Runs one operation on a connection of its own within ``operationTimeout`` (unless not `bounded`), its errors as
    /// `StoreError`.
    ///
    /// The connection is leased for the whole operation and returned when `body` ends, whatever the statements did.
    /// Statements never run on `PostgresClient`'s own `query` and `execute`: those return the connection when their
    /// rows are consumed, and postgres-nio 1.33 never returns it when a statement fails before its rows are iterated
    /// (a server that answers at once, as a read-only standby does to every write during a failover): under load
    /// every connection of the pool was lost that way within a second and the store stayed unavailable
    /// (`FailoverTests`).
    func perform<T: Sendable>(
        bounded: Bool = true, _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) async throws(StoreError) -> T {
        let client = client
        let logger = logger
        let lease = { @Sendable () async throws -> T in
            try await client.withConnection { connection in
                try await withTaskCancellationHandler {
                    let outcome: Result<T, any Error>
                    do { outcome = .success(try await body(connection, logger)) } catch {
                        if Self.isReadOnly(error) {
                            // A server that cannot write (a standby, or a primary demoted to one) answers every write
                            // of this connection so; new connections go where the proxy or DNS now points.
                            logger.warning("PostgreSQL: a read-only server refused a write; closing its connection")
                            try? await connection.close()
                        }
                        outcome = .failure(error)
                    }
                    // Cancelled (closed below), whether or not the operation ended first: given back only once closed,
                    // so that the pool, which learns of it from the same close, never hands it to the next operation.
                    if Task.isCancelled { _ = try? await connection.closeFuture.get() }
                    return try outcome.get()
                } onCancel: {
                    // At the deadline (or the caller's cancellation) the connection is closed rather than kept
                    // waiting: on a server that stopped answering (a partition, a lost machine) or a statement
                    // waiting on a lock, it would stay leased until TCP gives up (about 15 minutes) or the lock is
                    // released, and a pool of such connections answers every request 503 while the database (or
                    // its new primary) is fine. The statement itself may still complete on the server.
                    let _: EventLoopFuture<Void> = connection.close()
                }
            }
        }
        let operation = { @Sendable () async throws(StoreError) -> T in
            do { return try await lease() } catch let error as StoreError { throw error } catch {
                throw StoreError(.unavailable, "PostgreSQL: \(String(reflecting: error).prefix(500))")
            }
        }
        guard bounded else { return try await operation() }
        return try await StoreDeadline.run(operationTimeout, "PostgreSQL", operation)
    }

    /// Whether `error` is a server's `read_only_sql_transaction` (SQLSTATE 25006), alone or within a transaction.
    static func isReadOnly(_ error: any Error) -> Bool {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] == "25006" }
        if let error = error as? PostgresTransactionError {
            return [error.beginError, error.closureError, error.commitError].contains { $0.map(isReadOnly) == true }
        }
        return false
    }

    func affected(_ query: @escaping @Sendable (PostgresConnection, Logger) async throws -> PostgresRowSequence)
        async throws(StoreError) -> Bool
    {
        try await perform { connection, logger in
            var count = 0
            for try await _ in try await query(connection, logger) { count += 1 }
            return count == 1
        }
    }

    func fetchKeys(_ query: @escaping @Sendable (PostgresConnection, Logger) async throws -> PostgresRowSequence)
        async throws(StoreError) -> [KeyRecord]
    {
        let rows = try await perform { connection, logger -> [KeyRow] in
            var rows: [KeyRow] = []
            for try await row in try await query(connection, logger).decode(KeyRow.self) { rows.append(row) }
            return rows
        }
        return try Self.records(rows)
    }

    /// Rows of ``keyColumns``, decoded once at the store's boundary.
    static func records(_ rows: [KeyRow]) throws(StoreError) -> [KeyRecord] {
        var records: [KeyRecord] = []
        records.reserveCapacity(rows.count)
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

extension PostgresAppAttestStore: StoreOperationsAreBounded, CountsUnreservedChallenges {
    package var operationBound: Duration { operationTimeout }
}
#endif  // PostgreSQL
