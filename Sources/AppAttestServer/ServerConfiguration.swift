#if Service
import AppAttest
import AppAttestStore
import Foundation

/// The configuration of `appattest serve`: a JSON file (see `appattest.sample.json`), then environment variables,
/// then command-line options, each overriding the one before.
///
/// | JSON | Environment variable | Meaning |
/// |---|---|---|
/// | `host`, `port` | `APPATTEST_HOST`, `APPATTEST_PORT` | where to listen (127.0.0.1:8080) |
/// | `database` | `APPATTEST_DATABASE` | `sqlite:PATH` (default `sqlite:appattest.sqlite`) or `postgres://…` |
/// | `apps` | `APPATTEST_APPS` | App IDs and environments: `TEAM.bundle=production+development,…` |
/// | `tokens` | `APPATTEST_TOKENS` | caller bearer tokens, `name:token,…` (several, for rotation) |
/// | `tokenFile` | `APPATTEST_TOKEN_FILE` | where a generated token is written when none is configured |
/// | `maximumBodyBytes` | `APPATTEST_MAX_BODY_BYTES` | request size limit (128 KiB) |
/// | `rateLimit` | `APPATTEST_RATE_LIMIT` | per caller: `RATE/BURST` requests per second (`1000/2000`) |
/// | `challengeLifetimeSeconds` | | challenge lifetime (300) |
/// | `challengesPerCaller` | `APPATTEST_CHALLENGES_PER_CALLER` | unused challenges one caller may hold (25,000) |
/// | `challengesTotal` | `APPATTEST_CHALLENGES_TOTAL` | unused challenges reserved for no key, in all (100,000) |
/// | `challengePurgeIntervalSeconds` | `APPATTEST_CHALLENGE_PURGE_INTERVAL` | how often expired challenges are deleted (60) |
/// | `idleTimeoutSeconds` | `APPATTEST_IDLE_TIMEOUT` | an idle connection is closed after this (60) |
/// | `requestTimeoutSeconds` | `APPATTEST_REQUEST_TIMEOUT` | a request's head and body must arrive within this (30) |
/// | `writeTimeoutSeconds` | `APPATTEST_WRITE_TIMEOUT` | a connection whose client reads no answer for this is closed (30) |
/// | `maximumPipelinedRequests` | `APPATTEST_MAX_PIPELINED` | requests read ahead of their answers per connection (16) |
/// | `connectionLifetimeSeconds` | `APPATTEST_CONNECTION_LIFETIME` | a connection is closed after this, between requests (3600) |
/// | `maximumConnections` | `APPATTEST_MAX_CONNECTIONS` | connections served at once; more wait to be accepted (4096) |
/// | `startupTimeoutSeconds` | `APPATTEST_STARTUP_TIMEOUT` | how long start-up waits for the database (30) |
/// | `storeTimeoutSeconds` | `APPATTEST_STORE_TIMEOUT` | how long one PostgreSQL operation may take: then 503 (5) |
/// | `readinessTimeoutSeconds` | `APPATTEST_READINESS_TIMEOUT` | how long `/health/ready` waits for the store (2) |
/// | `counterReorderWindow` | `APPATTEST_COUNTER_REORDER_WINDOW` | counters accepted in any order, once each (1: strict) |
/// | `timestampWindowSeconds` | `APPATTEST_TIMESTAMP_WINDOW` | how far a timestamped request may be from now (60) |
/// | `keyCacheSize` | `APPATTEST_KEY_CACHE_SIZE` | attested keys kept parsed in memory, least recently used evicted (10,000) |
/// | `keyCacheMaxAgeSeconds` | `APPATTEST_KEY_CACHE_MAX_AGE` | how late another instance's revocation may be seen (30) |
/// | `sqliteLogRestartMiB` | `APPATTEST_SQLITE_LOG_RESTART_MIB` | SQLite's log size at which it restarts, a pause of writes (64) |
/// | `enforcement` | `APPATTEST_ENFORCEMENT` | `enforce`, or `report`: refusals recorded, requests let through (per App ID too) |
/// | `attestationsPerSecond` | `APPATTEST_ATTESTATIONS_PER_SECOND` | attestation challenges per second per App ID, fleet-wide (100; 0: none) |
/// | `maximumKeysPerUser` | `APPATTEST_MAX_KEYS_PER_USER` | active keys per user, the oldest superseded beyond it (5; 0: no limit) |
/// | `keyEventRetentionDays` | `APPATTEST_KEY_EVENT_RETENTION_DAYS` | how long each key's events are kept (90) |
/// | `otlpEndpoint` | `OTEL_EXPORTER_OTLP_ENDPOINT` (and OpenTelemetry's other `OTEL_*`) | export traces over OTLP/HTTP (off) |
/// | `testingRootCertificate` | `APPATTEST_TESTING_ROOT` | PEM of a test root to trust *instead of Apple's* |
/// | `testingReceiptRootCertificate` | `APPATTEST_TESTING_RECEIPT_ROOT` | the same for receipts |
/// | `apple` | `APPATTEST_APPLE_TEAM_ID`, `_KEY_ID`, `_PRIVATE_KEY_FILE`, `_ENDPOINT` | provider key for receipt refresh |
public struct ServerConfiguration: Sendable, Codable, Hashable {
    public struct App: Sendable, Codable, Hashable {
        public var appId: String
        public var environments: [String]
        /// This App ID's `enforce` or `report`; nil for the server's ``ServerConfiguration/enforcement``.
        public var enforcement: String?
        /// This App ID's attestation budget (0 for none); nil for the server's
        /// ``ServerConfiguration/attestationsPerSecond``.
        public var attestationsPerSecond: Double?
        /// This App ID's active keys per user (0 for no limit); nil for the server's
        /// ``ServerConfiguration/maximumKeysPerUser``.
        public var maximumKeysPerUser: Int?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case appId, environments, enforcement, attestationsPerSecond, maximumKeysPerUser
        }

        public init(
            appId: String, environments: [String], enforcement: String? = nil, attestationsPerSecond: Double? = nil,
            maximumKeysPerUser: Int? = nil
        ) {
            self.appId = appId
            self.environments = environments
            self.enforcement = enforcement
            self.attestationsPerSecond = attestationsPerSecond
            self.maximumKeysPerUser = maximumKeysPerUser
        }
    }

    /// What a caller may do with its token.
    public enum Permission: String, Sendable, Codable, Hashable, CaseIterable {
        /// Assertion challenges and `POST /v1/assertions/verify`.
        case verify
        /// Attestation challenges and `POST /v1/attestations`.
        case register
        /// `GET /v1/keys/{keyId}`.
        case read
        /// `POST /v1/keys/{keyId}/revoke`.
        case revoke
        /// `POST /v1/keys/{keyId}/receipt/refresh`.
        case refresh
    }

    public struct Token: Sendable, Codable, Hashable {
        /// Who uses it; logged, unlike the token.
        public var name: String
        public var token: String
        /// What it may do; nil for everything (a token without `permissions` in the file).
        public var permissions: [Permission]?
        /// The App IDs whose keys it may see and act on; nil for every configured App ID. Keys of other App IDs
        /// answer 404 `unknownKey`, as if they did not exist.
        public var appIds: [String]?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case name, token, permissions, appIds
        }

        public init(name: String, token: String, permissions: [Permission]? = nil, appIds: [String]? = nil) {
            self.name = name
            self.token = token
            self.permissions = permissions
            self.appIds = appIds
        }
    }

    public struct RateLimit: Sendable, Codable, Hashable {
        /// Sustained requests per second per caller, from ``minimumRate`` to ``maximumRate``.
        public var requestsPerSecond: Double
        /// Requests a caller may make at once, from 1 to ``maximumBurst``.
        public var burst: Double

        enum CodingKeys: String, CodingKey, CaseIterable {
            case requestsPerSecond, burst
        }

        /// The slowest rate accepted (one request in 1000 seconds).
        public static let minimumRate: Double = 0.001
        /// The fastest rate accepted.
        public static let maximumRate: Double = 1_000_000
        /// The largest burst accepted.
        public static let maximumBurst: Double = 10_000_000

        public init(requestsPerSecond: Double, burst: Double) {
            self.requestsPerSecond = requestsPerSecond
            self.burst = burst
        }
    }

    /// Apple's receipt refresh: the provider key of the team.
    public struct Apple: Sendable, Codable, Hashable {
        public var teamId: String
        public var keyId: String
        /// Path of the `.p8` file (a link is followed, as container platforms' secret volumes use them): this user's,
        /// neither readable nor writable by others (`chmod 600`), or root's, readable by its group at most (`640`).
        public var privateKeyFile: String
        /// Another base URL than Apple's (a stand-in, for tests).
        public var endpoint: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case teamId, keyId, privateKeyFile, endpoint
        }

        public init(teamId: String, keyId: String, privateKeyFile: String, endpoint: String? = nil) {
            self.teamId = teamId
            self.keyId = keyId
            self.privateKeyFile = privateKeyFile
            self.endpoint = endpoint
        }
    }

    public var host: String = "127.0.0.1"
    public var port: Int = 8080
    public var database: String = "sqlite:appattest.sqlite"
    public var apps: [App] = []
    public var tokens: [Token] = []
    public var tokenFile: String = "appattest-token"
    public var maximumBodyBytes: Int = 128 * 1024
    public var rateLimit: RateLimit? = RateLimit(requestsPerSecond: 1000, burst: 2000)
    public var challengeLifetimeSeconds: Double = 300
    /// How often expired challenges are deleted, in seconds (1 to 86400).
    public var challengePurgeIntervalSeconds: Double = 60
    /// An idle connection is closed after this many seconds (1 to 3600).
    public var idleTimeoutSeconds: Double = 60
    /// A request's head and body must arrive within this many seconds of its first byte (1 to 3600).
    public var requestTimeoutSeconds: Double = 30
    /// A connection whose answers its client does not read (its socket stays full) for this many seconds is closed
    /// (1 to 3600).
    public var writeTimeoutSeconds: Double = 30
    /// Requests read ahead of their answers on one connection (1 to 1024); further ones wait in the client's socket.
    public var maximumPipelinedRequests: Int = 16
    /// A connection is closed after this many seconds, once no request is in progress (1 to 604,800).
    public var connectionLifetimeSeconds: Double = 3600
    /// Connections served at once (1 to 1,000,000); further ones wait in the listen queue.
    public var maximumConnections: Int = 4096
    /// How long start-up waits for the database before it fails, in seconds (1 to 600).
    public var startupTimeoutSeconds: Double = 30
    /// How long one PostgreSQL operation may take, in seconds (0.1 to 600): a request whose store operation takes
    /// longer is answered 503 `storeUnavailable` with `Retry-After`.
    public var storeTimeoutSeconds: Double = 5
    /// Unused challenges one caller may hold (1 to ``challengesTotal``): one caller cannot take them all.
    public var challengesPerCaller: Int = 25_000
    /// Unused challenges reserved for no key the server holds in all (1 to 10,000,000): beyond it, every caller's
    /// attestation challenges are refused `tooManyChallenges`. Keep the callers' shares together below it
    /// (`challengesPerCaller` times the tokens), or a few callers can hold them all; a warning at start says so.
    public var challengesTotal: Int = 100_000
    /// How long `/health/ready` waits for the store, in seconds (0.1 to 60).
    public var readinessTimeoutSeconds: Double = 2
    /// How many assertion counters, the highest accepted one included, are accepted in any order, each once (1 to 64;
    /// 1, the default, is Apple's strictly increasing rule).
    public var counterReorderWindow: Int = 1
    /// How far the signed time of a timestamped request may be from the server's clock, in seconds (1 to 600).
    public var timestampWindowSeconds: Int = 60
    /// Attested keys kept parsed in memory, the least recently used evicted first (0 to 10,000,000; 0 turns the cache
    /// off). Each costs about 1 KiB (the key without its receipt, which assertions never use).
    public var keyCacheSize: Int = 10_000
    /// How long a cached key is used as read, in seconds (0 to 3600): the bound on how late a revocation or a refreshed
    /// receipt's risk metric made through another instance is seen here.
    public var keyCacheMaxAgeSeconds: Double = 30
    /// On SQLite, the size in MiB of the write-ahead log from which the store starts it again from its beginning (1 to
    /// 65,536). Each restart holds writes while SQLite syncs what is left to copy (tens of milliseconds, up to about
    /// 220 ms, for a million keys on a small virtual machine's disk): a larger value makes those pauses rarer, not
    /// shorter, and lets the log's file grow to about that size under sustained writes (README, “Scale”).
    public var sqliteLogRestartMiB: Int = 64
    /// `enforce` (refusals are answered) or `report` (every check runs, refusals are recorded, requests go through),
    /// for App IDs that do not say.
    public var enforcement: String = "enforce"
    /// Attestation challenges issued per second per App ID, shared by every instance on the same store (0.001 to 1,000,000;
    /// 0 for no budget), for App IDs that do not say.
    public var attestationsPerSecond: Double = 100
    /// Active keys per user (1 to 1,000; 0 for no limit): a new one beyond it revokes the user's oldest, for App IDs
    /// that do not say.
    public var maximumKeysPerUser: Int = 5
    /// How long each key's events are kept, in days (1 to 3,650).
    public var keyEventRetentionDays: Double = 90
    /// Where traces are exported over OTLP/HTTP (`http://collector:4318/v1/traces`); nil for none unless
    /// OpenTelemetry's `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    public var otlpEndpoint: String?
    public var testingRootCertificate: String?
    /// PEM of a test root for receipts instead of Apple Root CA - G3. Receipts in attestations are validated
    /// (“Receipts and the risk metric”) with Apple's root, or with this one; with `testingRootCertificate` and without
    /// this, they are not.
    public var testingReceiptRootCertificate: String?
    public var apple: Apple?

    public init() {}

    enum CodingKeys: String, CodingKey, CaseIterable {
        case host, port, database, apps, tokens, tokenFile, maximumBodyBytes, rateLimit, challengeLifetimeSeconds,
            challengePurgeIntervalSeconds, idleTimeoutSeconds, requestTimeoutSeconds, writeTimeoutSeconds,
            maximumPipelinedRequests, connectionLifetimeSeconds, maximumConnections,
            startupTimeoutSeconds, storeTimeoutSeconds, challengesPerCaller, challengesTotal, readinessTimeoutSeconds,
            counterReorderWindow, timestampWindowSeconds, keyCacheSize, keyCacheMaxAgeSeconds, sqliteLogRestartMiB,
            enforcement, attestationsPerSecond, maximumKeysPerUser, keyEventRetentionDays, otlpEndpoint,
            testingRootCertificate,
            testingReceiptRootCertificate, apple
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = ServerConfiguration()
        host = try container.decodeIfPresent(String.self, forKey: .host) ?? defaults.host
        port = try container.decodeIfPresent(Int.self, forKey: .port) ?? defaults.port
        database = try container.decodeIfPresent(String.self, forKey: .database) ?? defaults.database
        apps = try container.decodeIfPresent([App].self, forKey: .apps) ?? []
        tokens = try container.decodeIfPresent([Token].self, forKey: .tokens) ?? []
        tokenFile = try container.decodeIfPresent(String.self, forKey: .tokenFile) ?? defaults.tokenFile
        maximumBodyBytes =
            try container.decodeIfPresent(Int.self, forKey: .maximumBodyBytes) ?? defaults.maximumBodyBytes
        rateLimit =
            container.contains(.rateLimit)
            ? try container.decodeIfPresent(RateLimit.self, forKey: .rateLimit) : defaults.rateLimit
        challengeLifetimeSeconds =
            try container.decodeIfPresent(Double.self, forKey: .challengeLifetimeSeconds)
            ?? defaults.challengeLifetimeSeconds
        challengePurgeIntervalSeconds =
            try container.decodeIfPresent(Double.self, forKey: .challengePurgeIntervalSeconds)
            ?? defaults.challengePurgeIntervalSeconds
        idleTimeoutSeconds =
            try container.decodeIfPresent(Double.self, forKey: .idleTimeoutSeconds) ?? defaults.idleTimeoutSeconds
        requestTimeoutSeconds =
            try container.decodeIfPresent(Double.self, forKey: .requestTimeoutSeconds) ?? defaults.requestTimeoutSeconds
        writeTimeoutSeconds =
            try container.decodeIfPresent(Double.self, forKey: .writeTimeoutSeconds) ?? defaults.writeTimeoutSeconds
        maximumPipelinedRequests =
            try container.decodeIfPresent(Int.self, forKey: .maximumPipelinedRequests)
            ?? defaults.maximumPipelinedRequests
        connectionLifetimeSeconds =
            try container.decodeIfPresent(Double.self, forKey: .connectionLifetimeSeconds)
            ?? defaults.connectionLifetimeSeconds
        maximumConnections =
            try container.decodeIfPresent(Int.self, forKey: .maximumConnections) ?? defaults.maximumConnections
        startupTimeoutSeconds =
            try container.decodeIfPresent(Double.self, forKey: .startupTimeoutSeconds) ?? defaults.startupTimeoutSeconds
        challengesPerCaller =
            try container.decodeIfPresent(Int.self, forKey: .challengesPerCaller) ?? defaults.challengesPerCaller
        challengesTotal = try container.decodeIfPresent(Int.self, forKey: .challengesTotal) ?? defaults.challengesTotal
        storeTimeoutSeconds =
            try container.decodeIfPresent(Double.self, forKey: .storeTimeoutSeconds) ?? defaults.storeTimeoutSeconds
        readinessTimeoutSeconds =
            try container.decodeIfPresent(Double.self, forKey: .readinessTimeoutSeconds)
            ?? defaults.readinessTimeoutSeconds
        counterReorderWindow =
            try container.decodeIfPresent(Int.self, forKey: .counterReorderWindow) ?? defaults.counterReorderWindow
        timestampWindowSeconds =
            try container.decodeIfPresent(Int.self, forKey: .timestampWindowSeconds) ?? defaults.timestampWindowSeconds
        keyCacheSize = try container.decodeIfPresent(Int.self, forKey: .keyCacheSize) ?? defaults.keyCacheSize
        keyCacheMaxAgeSeconds =
            try container.decodeIfPresent(Double.self, forKey: .keyCacheMaxAgeSeconds) ?? defaults.keyCacheMaxAgeSeconds
        sqliteLogRestartMiB =
            try container.decodeIfPresent(Int.self, forKey: .sqliteLogRestartMiB) ?? defaults.sqliteLogRestartMiB
        enforcement = try container.decodeIfPresent(String.self, forKey: .enforcement) ?? defaults.enforcement
        attestationsPerSecond =
            try container.decodeIfPresent(Double.self, forKey: .attestationsPerSecond) ?? defaults.attestationsPerSecond
        maximumKeysPerUser =
            try container.decodeIfPresent(Int.self, forKey: .maximumKeysPerUser) ?? defaults.maximumKeysPerUser
        keyEventRetentionDays =
            try container.decodeIfPresent(Double.self, forKey: .keyEventRetentionDays) ?? defaults.keyEventRetentionDays
        otlpEndpoint = try container.decodeIfPresent(String.self, forKey: .otlpEndpoint)
        testingRootCertificate = try container.decodeIfPresent(String.self, forKey: .testingRootCertificate)
        testingReceiptRootCertificate = try container.decodeIfPresent(
            String.self, forKey: .testingReceiptRootCertificate)
        apple = try container.decodeIfPresent(Apple.self, forKey: .apple)
    }
}
#endif  // Service
