#if Service
import AppAttest
import AppAttestStore
import Foundation

extension ServerConfiguration {
    /// Reads a JSON configuration file (at most 1 MiB).
    ///
    /// The file can name caller tokens and a root to trust instead of Apple's, so it is read only when nobody else
    /// could have written or read it: a regular file (not a symbolic link), owned by this process's user, with no
    /// permission for group or others (`chmod 600`), the checks made on the opened file. A file planted by another
    /// user is refused, never adopted.
    ///
    /// A name that no setting has, at any level of the file, is refused with where it is (a decoder would ignore it:
    /// a misspelt `permissions` would leave a token allowed everything). Decoding a ``ServerConfiguration`` yourself
    /// does not check that.
    public static func load(file path: String) throws(ServerConfigurationError) -> ServerConfiguration {
        let read: [UInt8]?
        do { read = try SecretFile.read(path, limit: 1024 * 1024) } catch {
            throw ServerConfigurationError(error.description)
        }
        guard let bytes = read else { throw ServerConfigurationError("cannot read \(path): no such file") }
        let json = Data(bytes)
        let configuration: ServerConfiguration
        do { configuration = try JSONDecoder().decode(ServerConfiguration.self, from: json) } catch {
            throw ServerConfigurationError("\(path): \(error)")
        }
        let unknown = unknownSettings(in: json)
        guard unknown.isEmpty else {
            throw ServerConfigurationError(
                "\(path): unknown settings \(unknown.joined(separator: ", ")): a misspelt name is refused, not ignored")
        }
        return configuration
    }

    /// The names in a configuration file that no setting has, as `apps[0].enviroments` (at most 10, each shown only
    /// when it is printable ASCII of at most 64 characters): a decoder ignores them, so that a misspelt `permissions`
    /// would leave a token allowed everything, and a misspelt limit would leave its default, both unnoticed.
    static func unknownSettings(in json: Data) -> [String] {
        guard let root = try? JSONSerialization.jsonObject(with: json) as? [String: Any] else { return [] }
        var unknown: [String] = []
        func check<Key: CodingKey & CaseIterable>(_ object: Any?, _ keys: Key.Type, at path: String) {
            guard let object = object as? [String: Any] else { return }
            let known = Set(keys.allCases.map(\.stringValue))
            for name in object.keys.sorted() where !known.contains(name) {
                unknown.append(path + shown(name))
            }
        }
        check(root, CodingKeys.self, at: "")
        for (index, app) in (root["apps"] as? [Any] ?? []).enumerated() {
            check(app, App.CodingKeys.self, at: "apps[\(index)].")
        }
        for (index, token) in (root["tokens"] as? [Any] ?? []).enumerated() {
            check(token, Token.CodingKeys.self, at: "tokens[\(index)].")
        }
        check(root["rateLimit"], RateLimit.CodingKeys.self, at: "rateLimit.")
        check(root["apple"], Apple.CodingKeys.self, at: "apple.")
        return Array(unknown.prefix(10))
    }

    /// The `APPATTEST_*` environment variables that ``apply(environment:)`` reads.
    package static let environmentNames: Set<String> = [
        "APPATTEST_APPLE_ENDPOINT",
        "APPATTEST_APPLE_KEY_ID",
        "APPATTEST_APPLE_PRIVATE_KEY_FILE",
        "APPATTEST_APPLE_TEAM_ID",
        "APPATTEST_APPS",
        "APPATTEST_ATTESTATIONS_PER_SECOND",
        "APPATTEST_CHALLENGES_PER_CALLER",
        "APPATTEST_CHALLENGES_TOTAL",
        "APPATTEST_CHALLENGE_PURGE_INTERVAL",
        "APPATTEST_CONNECTION_LIFETIME",
        "APPATTEST_COUNTER_REORDER_WINDOW",
        "APPATTEST_DATABASE",
        "APPATTEST_ENFORCEMENT",
        "APPATTEST_HOST",
        "APPATTEST_IDLE_TIMEOUT",
        "APPATTEST_KEY_CACHE_MAX_AGE",
        "APPATTEST_KEY_CACHE_SIZE",
        "APPATTEST_KEY_EVENT_RETENTION_DAYS",
        "APPATTEST_MAX_BODY_BYTES",
        "APPATTEST_MAX_CONNECTIONS",
        "APPATTEST_MAX_KEYS_PER_USER",
        "APPATTEST_MAX_PIPELINED",
        "APPATTEST_PORT",
        "APPATTEST_RATE_LIMIT",
        "APPATTEST_READINESS_TIMEOUT",
        "APPATTEST_REQUEST_TIMEOUT",
        "APPATTEST_SQLITE_LOG_RESTART_MIB",
        "APPATTEST_STARTUP_TIMEOUT",
        "APPATTEST_STORE_TIMEOUT",
        "APPATTEST_TESTING_RECEIPT_ROOT",
        "APPATTEST_TESTING_ROOT",
        "APPATTEST_TIMESTAMP_WINDOW",
        "APPATTEST_TOKENS",
        "APPATTEST_TOKEN_FILE",
        "APPATTEST_WRITE_TIMEOUT",
    ]

    /// The `APPATTEST_*` variables of `environment` that neither ``apply(environment:)`` nor `also` reads (a misspelt
    /// name, which would leave its setting's default unnoticed), sorted; a name that is not printable ASCII of at most
    /// 64 characters is shown by its length.
    package static func unknownEnvironmentNames(in environment: [String: String], also: Set<String> = []) -> [String] {
        environment.keys.filter { $0.hasPrefix("APPATTEST_") && !environmentNames.contains($0) && !also.contains($0) }
            .sorted().map(shown)
    }

    /// A name from outside as a message may show it: itself in quotes when it is printable ASCII of at most 64
    /// characters, else its length (never a control character echoed to a terminal).
    static func shown(_ name: String) -> String {
        name.utf8.count <= 64 && name.utf8.allSatisfy({ (0x20...0x7E).contains($0) })
            ? "\"\(name)\"" : "(a name of \(name.utf8.count) bytes that is not printable ASCII)"
    }

    /// Applies the `APPATTEST_*` environment variables.
    public mutating func apply(environment: [String: String]) throws(ServerConfigurationError) {
        if let value = environment["APPATTEST_HOST"] { host = value }
        if let value = environment["APPATTEST_PORT"] {
            guard let port = Int(value) else { throw ServerConfigurationError("APPATTEST_PORT is not a number") }
            self.port = port
        }
        if let value = environment["APPATTEST_DATABASE"] { database = value }
        if let value = environment["APPATTEST_APPS"] {
            apps = try value.split(separator: ",").map { (entry) throws(ServerConfigurationError) -> App in
                let parts = entry.split(separator: "=", maxSplits: 1)
                let environments = parts.count == 2 ? parts[1].split(separator: "+").map(String.init) : ["production"]
                return App(appId: String(parts[0]).trimmingCharacters(in: .whitespaces), environments: environments)
            }
        }
        if let value = environment["APPATTEST_TOKENS"] {
            tokens = try value.split(separator: ",").map { (entry) throws(ServerConfigurationError) -> Token in
                // Empty parts kept: `name:token:` (a permission list left empty, say by an unset variable) is refused,
                // never read as `name:token`, which allows everything, nor `name::verify` as the token `verify`.
                let parts = entry.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
                guard parts.count >= 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw ServerConfigurationError("APPATTEST_TOKENS entries are name:token[:permission+permission]")
                }
                var permissions: [Permission]?
                if parts.count == 3 {
                    permissions = try parts[2].split(separator: "+", omittingEmptySubsequences: false).map {
                        (name) throws(ServerConfigurationError) -> Permission in
                        guard let permission = Permission(rawValue: String(name)) else {
                            throw ServerConfigurationError(
                                "APPATTEST_TOKENS: a permission is one of verify, register, read, revoke, refresh")
                        }
                        return permission
                    }
                }
                return Token(name: String(parts[0]), token: String(parts[1]), permissions: permissions)
            }
        }
        if let value = environment["APPATTEST_TOKEN_FILE"] { tokenFile = value }
        if let value = environment["APPATTEST_MAX_BODY_BYTES"] {
            guard let bytes = Int(value) else {
                throw ServerConfigurationError("APPATTEST_MAX_BODY_BYTES is not a number")
            }
            maximumBodyBytes = bytes
        }
        if let value = environment["APPATTEST_RATE_LIMIT"] {
            if value == "off" {
                rateLimit = nil
            } else {
                // Exactly two numbers: `x/100/200` or `/100/200` is refused, not read as 100/200.
                let parts = value.split(separator: "/", omittingEmptySubsequences: false).map { Double($0) }
                guard parts.count == 2, let rate = parts[0], let burst = parts[1] else {
                    throw ServerConfigurationError("APPATTEST_RATE_LIMIT is RATE/BURST or off")
                }
                rateLimit = RateLimit(requestsPerSecond: rate, burst: burst)
            }
        }
        func number(_ name: String) throws(ServerConfigurationError) -> Double? {
            guard let value = environment[name] else { return nil }
            guard let number = Double(value), number.isFinite else {
                throw ServerConfigurationError("\(name) is not a number")
            }
            return number
        }
        func wholeNumber(_ name: String) throws(ServerConfigurationError) -> Int? {
            guard let value = environment[name] else { return nil }
            guard let number = Int(value) else { throw ServerConfigurationError("\(name) is not a whole number") }
            return number
        }
        if let value = try number("APPATTEST_CHALLENGE_PURGE_INTERVAL") { challengePurgeIntervalSeconds = value }
        if let value = try number("APPATTEST_IDLE_TIMEOUT") { idleTimeoutSeconds = value }
        if let value = try number("APPATTEST_REQUEST_TIMEOUT") { requestTimeoutSeconds = value }
        if let value = try number("APPATTEST_WRITE_TIMEOUT") { writeTimeoutSeconds = value }
        if let value = try number("APPATTEST_CONNECTION_LIFETIME") { connectionLifetimeSeconds = value }
        if let value = try wholeNumber("APPATTEST_MAX_PIPELINED") { maximumPipelinedRequests = value }
        if let value = try number("APPATTEST_STARTUP_TIMEOUT") { startupTimeoutSeconds = value }
        if let value = try number("APPATTEST_STORE_TIMEOUT") { storeTimeoutSeconds = value }
        if let value = try wholeNumber("APPATTEST_CHALLENGES_PER_CALLER") { challengesPerCaller = value }
        if let value = try wholeNumber("APPATTEST_CHALLENGES_TOTAL") { challengesTotal = value }
        if let value = try number("APPATTEST_READINESS_TIMEOUT") { readinessTimeoutSeconds = value }
        if let value = try wholeNumber("APPATTEST_MAX_CONNECTIONS") { maximumConnections = value }
        if let value = try wholeNumber("APPATTEST_COUNTER_REORDER_WINDOW") { counterReorderWindow = value }
        if let value = try wholeNumber("APPATTEST_TIMESTAMP_WINDOW") { timestampWindowSeconds = value }
        if let value = try wholeNumber("APPATTEST_KEY_CACHE_SIZE") { keyCacheSize = value }
        if let value = try number("APPATTEST_KEY_CACHE_MAX_AGE") { keyCacheMaxAgeSeconds = value }
        if let value = try wholeNumber("APPATTEST_SQLITE_LOG_RESTART_MIB") { sqliteLogRestartMiB = value }
        if let value = environment["APPATTEST_ENFORCEMENT"] { enforcement = value }
        if let value = try number("APPATTEST_ATTESTATIONS_PER_SECOND") { attestationsPerSecond = value }
        if let value = try wholeNumber("APPATTEST_MAX_KEYS_PER_USER") { maximumKeysPerUser = value }
        if let value = try number("APPATTEST_KEY_EVENT_RETENTION_DAYS") { keyEventRetentionDays = value }
        if let value = environment["APPATTEST_TESTING_ROOT"] { testingRootCertificate = value }
        if let value = environment["APPATTEST_TESTING_RECEIPT_ROOT"] { testingReceiptRootCertificate = value }
        // All three, or none: one or two set (a secret that did not mount) would silently turn receipt refresh off.
        let appleNames = ["APPATTEST_APPLE_TEAM_ID", "APPATTEST_APPLE_KEY_ID", "APPATTEST_APPLE_PRIVATE_KEY_FILE"]
        let appleValues = appleNames.compactMap { environment[$0] }
        if appleValues.count == appleNames.count {
            apple = Apple(
                teamId: appleValues[0], keyId: appleValues[1], privateKeyFile: appleValues[2],
                endpoint: environment["APPATTEST_APPLE_ENDPOINT"])
        } else if appleValues.isEmpty, let endpoint = environment["APPATTEST_APPLE_ENDPOINT"], apple != nil {
            // The file's `apple`, at another endpoint.
            apple?.endpoint = endpoint
        } else if !appleValues.isEmpty || environment["APPATTEST_APPLE_ENDPOINT"] != nil {
            let missing = appleNames.filter { environment[$0] == nil }.joined(separator: ", ")
            throw ServerConfigurationError(
                "Apple's API needs \(missing) as well (or none of the APPATTEST_APPLE_ settings)")
        }
    }
}
#endif  // Service
