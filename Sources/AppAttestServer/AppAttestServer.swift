#if Service
import AppAttest
import AppAttestWire
import AppAttestHummingbird
import AppAttestPostgres
import AppAttestSQLite
public import AppAttestStore
public import AppAttestLifecycle
import AppAttestHTTP
import AppleDeviceAPI
public import Foundation
import Prometheus
import HTTPTypes
public import Hummingbird
import HummingbirdCore
public import Logging
import NIOCore
import PostgresNIO
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
public import ServiceLifecycle
import Synchronization

/// The request context of `appattest serve`: who called.
public struct ServerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The name of the caller's bearer token.
    public var caller: String? { scope?.name }
    /// The caller, with what it may do.
    var scope: Caller?

    public init(source: Source) {
        coreContext = .init(source: source)
    }
}

/// `appattest serve`: App Attest verification as a JSON service for other services (Hummingbird), on SQLite or
/// PostgreSQL. The API is `openapi.yaml` (served at `/openapi.yaml`).
public final class AppAttestServer: Sendable {
    public let configuration: ServerConfiguration
    /// nil when no App ID is configured: attestation and assertion operations answer 503 `notConfigured`.
    public let service: AppAttestService?
    public let store: any AppAttestStore
    public let metrics: ServerMetrics
    public let logger: Logger
    private let tokenState: Mutex<BearerTokens>
    var tokens: BearerTokens { tokenState.withLock { $0 } }
    let operations: AppAttestHTTPOperations?
    let rateLimiter: AppAttestRateLimiter?
    let refresher: ReceiptRefresher?
    /// The clock the service runs on (tests move it).
    let now: @Sendable () -> Date
    /// The PostgreSQL client, when the database is PostgreSQL: a service of ``run()``'s group.
    let postgresClient: PostgresClient?
    /// Whether the store is the configured database's (closed by ``close()``) rather than the caller's.
    private let ownsStore: Bool
    /// The store's readiness, as `/health/ready` answers it.
    let readiness = ReadinessProbe()

    /// Opens the store, checks the configuration, and loads the tokens (generating one into `tokenFile`, mode
    /// 0600, when none is configured).
    public static func open(
        configuration: ServerConfiguration, metrics: ServerMetrics = ServerMetrics(),
        logger: Logger = Logger(label: "appattest.serve"), now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> AppAttestServer {
        try await open(configuration: configuration, store: nil, metrics: metrics, logger: logger, now: now)
    }

    /// Opens a server on a store of the caller's instead of the configured database (tests).
    package static func open(
        configuration: ServerConfiguration, store givenStore: (any AppAttestStore)?,
        metrics: ServerMetrics = ServerMetrics(), logger: Logger = Logger(label: "appattest.serve"),
        now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> AppAttestServer {
        var configuration = configuration
        let verifierConfiguration = try configuration.verifierConfiguration()
        if configuration.tokens.isEmpty {
            configuration.tokens = [try Self.generatedToken(file: configuration.tokenFile, logger: logger)]
        }
        if configuration.tokens.count * configuration.challengesPerCaller >= configuration.challengesTotal {
            logger.warning(
                "\(configuration.tokens.count) callers may hold \(configuration.challengesPerCaller) unused challenges each, as many as challengesTotal (\(configuration.challengesTotal)): a few callers can hold them all and refuse every registration; lower challengesPerCaller or raise challengesTotal"
            )
        }
        let receiptValidator = try configuration.receiptValidator()
        let refresher = try configuration.apple.map { apple throws -> ReceiptRefresher in
            try ReceiptRefresher(apple, validator: receiptValidator, logger: logger)
        }
        let store: any AppAttestStore
        var postgresClient: PostgresClient?
        if let givenStore {
            store = givenStore
        } else {
            switch try configuration.storeLocation() {
            case .postgres(let url):
                // The client is a service of `run`'s group, listed first so that it stops last; the database is
                // migrated here, before anything runs.
                let clientConfiguration = try PostgresAppAttestStore.configuration(url: url)
                let client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
                store = try await PostgresAppAttestStore.migratedBeforeRunning(
                    client: client, configuration: clientConfiguration, logger: logger,
                    startupTimeout: .nanoseconds(Int64(configuration.startupTimeoutSeconds * 1e9)),
                    operationTimeout: .nanoseconds(Int64(configuration.storeTimeoutSeconds * 1e9)))
                postgresClient = client
            case .sqlite(let path):
                store = try SQLiteAppAttestStore(
                    path: path, logRestartBytes: configuration.sqliteLogRestartMiB << 20, logger: logger)
            }
        }
        var service: AppAttestService?
        if let verifierConfiguration {
            let verifier = try AppAttestVerifier(configuration: verifierConfiguration)
            service = AppAttestService(
                verifier: verifier, store: store, challengeLifetime: configuration.challengeLifetimeSeconds,
                challengeLimits: .init(
                    perIssuer: configuration.challengesPerCaller, total: configuration.challengesTotal),
                receiptValidator: configuration.validatesAttestationReceipts ? receiptValidator : nil,
                counterPolicy: .reorderWindow(configuration.counterReorderWindow),
                keyCacheLimits: .init(
                    capacity: configuration.keyCacheSize, maximumAge: configuration.keyCacheMaxAgeSeconds),
                policies: try configuration.policies(), eventRetention: configuration.keyEventRetentionDays * 86_400,
                metricsFactory: PrometheusMetricsFactory(registry: metrics.registry), now: now)
            if !configuration.validatesAttestationReceipts {
                logger.warning("testing root without a testing receipt root: attestation receipts are not validated")
            }
        } else {
            logger.warning("no App ID configured: attestations and assertions answer 503 notConfigured")
        }
        return AppAttestServer(
            configuration: configuration, service: service, store: store, metrics: metrics, logger: logger,
            refresher: refresher, now: now, postgresClient: postgresClient, ownsStore: givenStore == nil)
    }

    private init(
        configuration: ServerConfiguration, service: AppAttestService?, store: any AppAttestStore,
        metrics: ServerMetrics, logger: Logger, refresher: ReceiptRefresher?, now: @escaping @Sendable () -> Date,
        postgresClient: PostgresClient?, ownsStore: Bool
    ) {
        self.now = now
        self.configuration = configuration
        self.service = service
        self.store = store
        self.metrics = metrics
        self.logger = logger
        self.tokenState = Mutex(BearerTokens(configuration.tokens))
        self.operations = service.map { AppAttestHTTPOperations(service: $0) }
        self.rateLimiter = configuration.rateLimit.map {
            AppAttestRateLimiter(ratePerSecond: $0.requestsPerSecond, burst: $0.burst)
        }
        self.refresher = refresher
        self.postgresClient = postgresClient
        self.ownsStore = ownsStore
    }

    /// Applies what a configuration reload may change (`appattest serve` does it on SIGHUP): the bearer tokens (as
    /// ``reloadTokens(_:)``) and each App ID's enforcement, attestation budget and keys per user. Everything is
    /// checked first: a bad value changes nothing, and the error names its key. App IDs and their environments take
    /// a restart (a change is logged as a warning); `serve` applies the environment variables over the file again, so
    /// a setting given by an `APPATTEST_*` variable keeps its value. A configuration without tokens is read as at
    /// start: the token generated into `tokenFile` is then the only one accepted, so that emptying the list revokes
    /// every configured token.
    /// - Returns: the names of the tokens now accepted.
    @discardableResult
    public func reload(_ reloaded: ServerConfiguration) throws(ServerConfigurationError) -> [String] {
        var reloaded = reloaded
        var onlyGenerated = false
        if reloaded.tokens.isEmpty {
            reloaded.tokens = [try Self.generatedToken(file: reloaded.tokenFile, logger: logger)]
            onlyGenerated = self.tokens.names != reloaded.tokens.map(\.name)
        }
        var check = configuration
        check.tokens = reloaded.tokens
        check.apps = reloaded.apps
        check.enforcement = reloaded.enforcement
        check.attestationsPerSecond = reloaded.attestationsPerSecond
        check.maximumKeysPerUser = reloaded.maximumKeysPerUser
        let reloadedApps = try check.verifierConfiguration()?.apps
        let policies = try check.policies()
        if let service, reloadedApps != service.verifier.configuration.apps {
            // The verifier is built once: App IDs and their environments take a restart.
            logger.warning("reload: App IDs and environments changed in the file take effect at the next start")
        }
        let names = try reloadTokens(reloaded.tokens)
        if onlyGenerated { logger.warning("reload: no tokens configured: only the generated token is accepted now") }
        if let service, service.policies != policies {
            service.replacePolicies(policies)
            logger.notice(
                "App ID policies reloaded",
                metadata: [
                    "enforcement": "\(policies.defaultPolicy.enforcement.rawValue)",
                    "reporting":
                        "\(policies.apps.filter { $0.value.enforcement == .report }.keys.map(\.rawValue).sorted().joined(separator: ","))",
                ])
        }
        return names
    }

    /// Replaces the accepted bearer tokens at once, without a restart (`appattest serve` does it on SIGHUP): rotate
    /// by adding the new token, moving the callers, then removing the old one. An empty list keeps the current ones.
    /// - Returns: the names of the tokens now accepted.
    @discardableResult
    public func reloadTokens(_ tokens: [ServerConfiguration.Token]) throws(ServerConfigurationError) -> [String] {
        var check = configuration
        check.tokens = tokens
        _ = try check.verifierConfiguration()
        guard !tokens.isEmpty else { return self.tokens.names }
        tokenState.withLock { $0 = BearerTokens(tokens) }
        logger.notice("bearer tokens reloaded", metadata: ["callers": "\(tokens.map(\.name).joined(separator: ","))"])
        return tokens.map(\.name)
    }

    /// Closes the store it opened (after the HTTP server stopped; a PostgreSQL client is stopped by ``run()``'s
    /// group, as its last service).
    public func close() async {
        if ownsStore { await store.close() }
    }

    /// The Hummingbird application on the configured host and port. To run it in a service group of your own, run
    /// all of ``makeServices()`` (which ends with it), not this alone: on PostgreSQL the store's client is one of them.
    ///
    /// Connections are bounded: an idle connection (also one whose request head never completes) is closed after
    /// `idleTimeoutSeconds`, a request body must arrive within `requestTimeoutSeconds` of its head, a connection whose
    /// client reads no answers for `writeTimeoutSeconds` is closed, at most `maximumPipelinedRequests` are read ahead
    /// of their answers, a connection lives at most `connectionLifetimeSeconds`, and at most `maximumConnections` are
    /// served at once.
    public func makeApplication() -> some ApplicationProtocol {
        let requestTimeout = TimeAmount.nanoseconds(Int64(configuration.requestTimeoutSeconds * 1e9))
        let writeTimeout = TimeAmount.nanoseconds(Int64(configuration.writeTimeoutSeconds * 1e9))
        let lifetime = TimeAmount.nanoseconds(Int64(configuration.connectionLifetimeSeconds * 1e9))
        let pipelined = configuration.maximumPipelinedRequests
        return Application(
            router: makeRouter(),
            server: .http1(
                configuration: .init(
                    additionalChannelHandlers: [
                        RequestDeadlineHandler(timeout: requestTimeout),
                        ConnectionGuardHandler(
                            maximumPipelined: pipelined, writeTimeout: writeTimeout, lifetime: lifetime),
                    ],
                    idleTimeout: .nanoseconds(Int64(configuration.idleTimeoutSeconds * 1e9)))),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "appattest",
                availableConnectionsDelegate: MaximumAvailableConnections(configuration.maximumConnections)),
            logger: logger)
    }

    /// What ``run()`` runs, in the order a `ServiceGroup` starts them (it stops them in reverse): the PostgreSQL
    /// client when the database is PostgreSQL; when App IDs are configured, the service's background work (group
    /// commit, and the purge of expired challenges every `challengePurgeIntervalSeconds`); then the HTTP
    /// application. Put them, in this order, in a service group of your own to run the server beside other
    /// services; run them once (a PostgreSQL client runs at most once).
    public func makeServices() -> [any Service] {
        var services: [any Service] = []
        if let postgresClient { services.append(postgresClient) }
        if let service {
            services.append(
                AppAttestBackgroundService(
                    service: service,
                    challengePurgeInterval: .nanoseconds(Int64(configuration.challengePurgeIntervalSeconds * 1e9)),
                    logger: logger))
        }
        services.append(makeApplication())
        return services
    }

    /// Runs `body` with every service but the HTTP application running (the PostgreSQL client, the background
    /// work), for tests that drive the router directly or run the application on its own.
    package func withSupportingServices<T>(_ body: () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self, returning: T.self) { group in
            for service in makeServices().dropLast() { group.addTask { try await service.run() } }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// Raises this process's soft limit on open files to its hard limit, as servers commonly do, so that a low
    /// inherited soft limit does not cap the connections (and the descriptors for the store) far below
    /// `maximumConnections`.
    /// - Returns: the soft limit now in force.
    @discardableResult
    public static func raiseOpenFileLimit() -> UInt64 {
        #if os(Linux)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(resource, &raised) == 0 { return UInt64(raised.rlim_cur) }
        }
        return UInt64(limit.rlim_cur)
    }

    /// Serves until SIGTERM or SIGINT, lets in-flight requests finish (their counters are stored before they
    /// answer), then closes the store.
    /// - Parameter observability: a service started first and stopped last (the trace exporter of
    ///   ``ServerTracing/bootstrap(_:environment:)``, which flushes its spans at shutdown).
    public func run(beside observability: (any Service)? = nil) async throws {
        Self.raiseOpenFileLimit()
        let group = ServiceGroup(
            configuration: .init(
                services: ((observability.map { [$0] } ?? []) + makeServices()).map { .init(service: $0) },
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do { try await group.run() } catch {
            await close()
            throw error
        }
        await close()
        logger.info("stopped")
    }

    /// The token in `file`, or a new one generated into it. The file must belong to this user, be readable by
    /// nobody else and not be a link; a new one is created 0600 before a byte is written.
    static func generatedToken(file: String, logger: Logger) throws(ServerConfigurationError)
        -> ServerConfiguration.Token
    {
        let existing: [UInt8]?
        do { existing = try SecretFile.read(file, limit: 4096) } catch {
            throw ServerConfigurationError("token file: \(error.description)")
        }
        if let existing,
            let text = String(decoding: existing, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                as String?,
            text.utf8.count >= 16
        {
            logger.info("bearer token read from \(file)")
            return .init(name: "generated", token: text)
        }
        var generator = SystemRandomNumberGenerator()
        let token = RequestBindingLayout.base64URL(
            (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        do { try SecretFile.write(Array((token + "\n").utf8), to: file) } catch {
            throw ServerConfigurationError("cannot write the generated token: \(error.description)")
        }
        logger.notice("no bearer token configured: generated one into \(file)")
        return .init(name: "generated", token: token)
    }
}

/// Refreshes receipts at Apple (or a stand-in) with the team's provider key (“Receipts and the risk metric”).
struct ReceiptRefresher: AppAttestReceiptRefresher {
    let clients: [AppAttestEnvironment: ReceiptRefreshClient]

    init(_ apple: ServerConfiguration.Apple, validator: AppAttestReceiptValidator, logger: Logger) throws {
        // The team's signing key: this user's and nobody else's to read, or root's and its group's (SecretFile).
        let pem: [UInt8]?
        do { pem = try SecretFile.readPrivateKey(apple.privateKeyFile, limit: 16 * 1024) } catch {
            throw ServerConfigurationError("apple.privateKeyFile: \(error.description)")
        }
        guard let pem, let text = String(bytes: pem, encoding: .utf8) else {
            throw ServerConfigurationError("cannot read the Apple private key \(apple.privateKeyFile)")
        }
        let tokens = ProviderTokenSource(
            credentials: try ProviderCredentials(
                teamID: apple.teamId, keyID: apple.keyId, p8: text))
        let endpoint = try apple.endpoint.map { (url) throws -> AppleEndpoint in try AppleEndpoint(baseURL: url) }
        var clients: [AppAttestEnvironment: ReceiptRefreshClient] = [:]
        for environment in AppAttestEnvironment.allCases {
            clients[environment] = ReceiptRefreshClient(
                tokens: tokens, environment: environment,
                endpoint: endpoint, validator: validator, logger: logger)
        }
        self.clients = clients
    }

    func refreshReceipt(for record: KeyRecord) async throws -> AppAttestReceiptRefresh {
        guard let client = clients[record.key.environment] else {
            throw AppleAPIError(
                .invalidCredentials, fault: .credentials,
                "no receipt service for \(record.key.environment.rawValue) keys")
        }
        switch try await client.refresh(record.receipt, appID: record.key.appID, publicKey: record.key.publicKey) {
        case .refreshed(let receipt): return .refreshed(receipt)
        case .notModified: return .notModified
        case .noData: return .noData
        }
    }
}
#endif  // Service
