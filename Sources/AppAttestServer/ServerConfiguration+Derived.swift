#if Service
public import AppAttest
package import AppAttestStore
public import AppAttestLifecycle
import Foundation

extension ServerConfiguration {
    /// The store `database` names (``StoreLocation``: `sqlite:PATH`, a `postgres://` URL, or a bare SQLite path).
    package func storeLocation() throws(ServerConfigurationError) -> StoreLocation {
        do { return try StoreLocation(database) } catch { throw ServerConfigurationError("database \(error)") }
    }

    /// Checks the values and builds the verifier configuration (nil when no App ID is configured).
    public func verifierConfiguration() throws(ServerConfigurationError) -> AppAttestVerifier.Configuration? {
        guard (1...65535).contains(port) else { throw ServerConfigurationError("port \(port) is out of range") }
        guard (1024...(64 * 1024 * 1024)).contains(maximumBodyBytes) else {
            throw ServerConfigurationError("maximumBodyBytes must be between 1 KiB and 64 MiB")
        }
        if let rateLimit {
            guard (RateLimit.minimumRate...RateLimit.maximumRate).contains(rateLimit.requestsPerSecond),
                (1...RateLimit.maximumBurst).contains(rateLimit.burst)
            else {
                throw ServerConfigurationError(
                    "rateLimit needs requestsPerSecond from 0.001 to 1000000 and burst from 1 to 10000000")
            }
        }
        guard challengeLifetimeSeconds > 0, challengeLifetimeSeconds <= 86400 else {
            throw ServerConfigurationError("challengeLifetimeSeconds must be in (0, 86400]")
        }
        guard (1...86400).contains(challengePurgeIntervalSeconds) else {
            throw ServerConfigurationError("challengePurgeIntervalSeconds must be from 1 to 86400")
        }
        guard (1...3600).contains(idleTimeoutSeconds) else {
            throw ServerConfigurationError("idleTimeoutSeconds must be from 1 to 3600")
        }
        guard (1...3600).contains(requestTimeoutSeconds) else {
            throw ServerConfigurationError("requestTimeoutSeconds must be from 1 to 3600")
        }
        guard (1...600).contains(timestampWindowSeconds) else {
            throw ServerConfigurationError("timestampWindowSeconds must be from 1 to 600")
        }
        guard (1...AppAttestVerifier.CounterPolicy.maximumWindow).contains(counterReorderWindow) else {
            throw ServerConfigurationError("counterReorderWindow must be from 1 to 64")
        }
        guard (0...10_000_000).contains(keyCacheSize) else {
            throw ServerConfigurationError("keyCacheSize must be from 0 to 10000000")
        }
        guard (0...3600).contains(keyCacheMaxAgeSeconds) else {
            throw ServerConfigurationError("keyCacheMaxAgeSeconds must be from 0 to 3600")
        }
        guard (1...65_536).contains(sqliteLogRestartMiB) else {
            throw ServerConfigurationError("sqliteLogRestartMiB must be from 1 to 65536")
        }
        guard (1...3600).contains(writeTimeoutSeconds) else {
            throw ServerConfigurationError("writeTimeoutSeconds must be from 1 to 3600")
        }
        guard (1...1024).contains(maximumPipelinedRequests) else {
            throw ServerConfigurationError("maximumPipelinedRequests must be from 1 to 1024")
        }
        guard (1...604_800).contains(connectionLifetimeSeconds) else {
            throw ServerConfigurationError("connectionLifetimeSeconds must be from 1 to 604800")
        }
        guard (1...1_000_000).contains(maximumConnections) else {
            throw ServerConfigurationError("maximumConnections must be from 1 to 1000000")
        }
        guard (1...600).contains(startupTimeoutSeconds) else {
            throw ServerConfigurationError("startupTimeoutSeconds must be from 1 to 600")
        }
        guard (1...10_000_000).contains(challengesTotal) else {
            throw ServerConfigurationError("challengesTotal must be from 1 to 10000000")
        }
        guard (1...challengesTotal).contains(challengesPerCaller) else {
            throw ServerConfigurationError("challengesPerCaller must be from 1 to challengesTotal (\(challengesTotal))")
        }
        guard (0.1...600).contains(storeTimeoutSeconds) else {
            throw ServerConfigurationError("storeTimeoutSeconds must be from 0.1 to 600")
        }
        guard (0.1...60).contains(readinessTimeoutSeconds) else {
            throw ServerConfigurationError("readinessTimeoutSeconds must be from 0.1 to 60")
        }
        _ = try policies()
        _ = try storeLocation()
        for token in tokens {
            guard token.token.utf8.count >= 16 else {
                throw ServerConfigurationError("token \(token.name) is shorter than 16 characters")
            }
            for appId in token.appIds ?? [] where (try? AppID(appId)) == nil {
                throw ServerConfigurationError("token \(token.name): \(appId.prefix(64)) is not an App ID")
            }
        }
        guard !apps.isEmpty else { return nil }
        var configured: [AppID: Set<AppAttestEnvironment>] = [:]
        for app in apps {
            let appID: AppID
            do { appID = try AppID(app.appId) } catch { throw ServerConfigurationError("App ID: \(error.reason)") }
            for name in app.environments {
                guard let environment = AppAttestEnvironment(rawValue: name) else {
                    throw ServerConfigurationError("environment \(name) is not production or development")
                }
                configured[appID, default: []].insert(environment)
            }
        }
        var anchor = TrustAnchor.appleAppAttestationRoot
        if let path = testingRootCertificate { anchor = .customRootForTesting(derRepresentation: try Self.pem(path)) }
        return AppAttestVerifier.Configuration(apps: configured, trustAnchor: anchor)
    }

    /// Each App ID's enforcement, attestation budget and keys per user, checked: a bad value is refused with a
    /// message that names its key.
    public func policies() throws(ServerConfigurationError) -> AppAttestService.Policies {
        guard (1...3650).contains(keyEventRetentionDays) else {
            throw ServerConfigurationError("keyEventRetentionDays must be from 1 to 3650")
        }
        func policy(
            _ scope: String, enforcement: String, attestationsPerSecond: Double, maximumKeysPerUser: Int
        ) throws(ServerConfigurationError) -> AppAttestService.AppPolicy {
            guard let mode = AppAttestService.Enforcement(rawValue: enforcement) else {
                throw ServerConfigurationError("\(scope)enforcement must be enforce or report")
            }
            guard attestationsPerSecond == 0 || (0.001...1_000_000).contains(attestationsPerSecond) else {
                throw ServerConfigurationError(
                    "\(scope)attestationsPerSecond must be 0 (none) or from 0.001 to 1000000")
            }
            guard (0...1000).contains(maximumKeysPerUser) else {
                throw ServerConfigurationError("\(scope)maximumKeysPerUser must be 0 (no limit) or from 1 to 1000")
            }
            return AppAttestService.AppPolicy(
                enforcement: mode, attestationsPerSecond: attestationsPerSecond == 0 ? nil : attestationsPerSecond,
                maximumKeysPerUser: maximumKeysPerUser == 0 ? nil : maximumKeysPerUser)
        }
        var policies = AppAttestService.Policies(
            defaultPolicy: try policy(
                "", enforcement: enforcement, attestationsPerSecond: attestationsPerSecond,
                maximumKeysPerUser: maximumKeysPerUser))
        for app in apps {
            guard let appID = try? AppID(app.appId) else { continue }  // refused by verifierConfiguration()
            guard app.enforcement != nil || app.attestationsPerSecond != nil || app.maximumKeysPerUser != nil else {
                continue
            }
            policies.apps[appID] = try policy(
                "apps[\(app.appId)].", enforcement: app.enforcement ?? enforcement,
                attestationsPerSecond: app.attestationsPerSecond ?? attestationsPerSecond,
                maximumKeysPerUser: app.maximumKeysPerUser ?? maximumKeysPerUser)
        }
        return policies
    }

    /// The validator for receipts: Apple Root CA - G3, or the testing receipt root.
    public func receiptValidator() throws(ServerConfigurationError) -> AppAttestReceiptValidator {
        var anchor = TrustAnchor.appleRootCAG3
        if let path = testingReceiptRootCertificate {
            anchor = .customRootForTesting(derRepresentation: try Self.pem(path))
        }
        do { return try AppAttestReceiptValidator(configuration: .init(trustAnchor: anchor)) } catch {
            throw ServerConfigurationError("receipt root: \(error.reason)")
        }
    }

    /// Whether receipts in attestations are validated (always with Apple's roots; with a testing root only when a
    /// testing receipt root is configured too).
    public var validatesAttestationReceipts: Bool {
        testingRootCertificate == nil || testingReceiptRootCertificate != nil
    }

    /// The DER of the first certificate in a PEM (or DER) file.
    static func pem(_ path: String) throws(ServerConfigurationError) -> [UInt8] {
        // A root that others could replace would let them forge attestations: see SecretFile.readProtected.
        let bytes: [UInt8]?
        do { bytes = try SecretFile.readProtected(path, limit: 64 * 1024) } catch {
            throw ServerConfigurationError("a root certificate to trust: \(error.description)")
        }
        guard let bytes else { throw ServerConfigurationError("cannot read the certificate \(path)") }
        let data = Data(bytes)
        guard let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN CERTIFICATE-----") else {
            return Array(data)
        }
        let body = text.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1]
            .components(separatedBy: "-----END CERTIFICATE-----")[0].filter { !$0.isWhitespace }
        guard let der = Data(base64Encoded: body) else { throw ServerConfigurationError("\(path) is not PEM") }
        return Array(der)
    }
}
#endif  // Service
