public import AppAttest
public import AppAttestStore
import Foundation
public import Logging
import Metrics

extension AppAttestService {
    /// Each App ID's enforcement, attestation budget and keys per user, as they are now.
    public var policies: Policies { policyState.current }

    /// Replaces the policies at once, for every copy of this service (a configuration reload: `appattest serve` does
    /// it on SIGHUP). Requests already past a decision keep it.
    public func replacePolicies(_ policies: Policies) { policyState.replace(policies) }

    /// The enforcement of requests that may come from the apps of `appIDs` (nil: every App ID this service accepts):
    /// ``Enforcement/report`` only when every one of them reports, so that nothing a request names (a keyId, a missing
    /// header) can choose a lenient policy: a route shared by an enforcing and a reporting App ID enforces.
    public func enforcement(guarding appIDs: Set<AppID>? = nil) -> Enforcement {
        let policies = policies
        let guarded = appIDs ?? Set(verifier.configuration.apps.keys)
        guard !guarded.isEmpty, guarded.allSatisfy({ policies.policy(for: $0).enforcement == .report }) else {
            return .enforce
        }
        return .report
    }

    /// Records a refusal that report-only enforcement lets through: the metric `appattest_reported_refusals_total`
    /// (labelled by code) and a log line at `notice`.
    public func recordReportedRefusal(code: String, keyID: KeyID?, logger: Logger) {
        FleetMetrics.count("appattest_reported_refusals_total", [("code", code)], metricsFactory)
        logger.notice(
            "App Attest refusal reported, not enforced",
            metadata: ["code": "\(code)", "keyId": "\(keyID?.base64EncodedString ?? "-")"])
    }

    /// The latest `limit` (at most 1,000) events of a key, oldest first (<doc:OperatingAppAttestInProduction>, “Key
    /// events”). A key that was never stored has events when its attestations were refused.
    /// - Throws: ``AppAttestServiceError``: `unknownKey` (neither stored nor with events), `storeUnavailable`.
    public func events(ofKey keyID: KeyID, limit: Int = 100) async throws(AppAttestServiceError) -> [KeyEvent] {
        let count = min(max(1, limit), 1_000)
        let events = try await run { () async throws(StoreError) -> [KeyEvent] in
            try await store.keyEvents(keyID, limit: count)
        }
        if events.isEmpty { _ = try await key(keyID) }
        return events
    }

    /// Deletes the events older than ``eventRetention``; returns how many.
    public func purgeExpiredEvents() async throws(AppAttestServiceError) -> Int {
        let cutoff = now().addingTimeInterval(-eventRetention)
        return try await run { () async throws(StoreError) -> Int in
            try await store.purgeKeyEvents(before: cutoff, batchSize: 10_000)
        }
    }

    // MARK: Helpers

    /// The configured App ID an attestation object names by its rpIdHash, from a parse of its CBOR (no certificate,
    /// no signature), for its trace; nil when it names none (verification then refuses it) or does not parse.
    func configuredAppID(ofAttestation object: [UInt8]) -> AppID? {
        guard let parsed = try? AttestationObject(cborEncoded: object) else { return nil }
        let hash = parsed.authenticatorData.rpIDHash
        return verifier.configuration.apps.keys.first { $0.rpIDHash == hash }
    }

    /// Takes one attestation from the App ID's budget (nil, or an App ID this service does not accept: the bucket of
    /// unnamed App IDs), shared through the store by every instance on it.
    func spendAttestationBudget(appID named: AppID?) async throws(AppAttestServiceError) {
        let accepted = verifier.configuration.apps
        let appID =
            named.flatMap { accepted[$0] != nil ? $0 : nil } ?? (accepted.count == 1 ? accepted.keys.first : nil)
        let policy = policies.policy(for: appID)
        guard let rate = policy.attestationsPerSecond else { return }
        let bucket = "attestations:\(appID?.rawValue ?? "*")"
        let time = now()
        let wait = try await run { () async throws(StoreError) -> TimeInterval? in
            try await store.takeToken(bucket: bucket, rate: rate, burst: policy.attestationBurst, now: time)
        }
        guard let wait else { return }
        FleetMetrics.count(
            "appattest_attestation_budget_exhausted_total", [("appId", appID?.rawValue ?? "*")], metricsFactory)
        throw AppAttestServiceError(
            .attestationBudgetExhausted, "the attestation budget of \(appID?.rawValue ?? "unknown App IDs") is spent",
            retryAfter: wait)
    }

    /// The verifier's refusals that come after the keyId was proven: the chain to Apple's root, the nonce over this
    /// challenge and SHA-256 of the certified key all held, so the object is the device's for this key and nobody else
    /// can write a refusal under it.
    static let refusalsOfAProvenKey: Set<AppAttestError.Code> = [
        .appIdMismatch, .counterNotZero, .environmentMismatch, .credentialIdMismatch, .publicKeyMismatch,
    ]

    /// Writes an attestation's refusal to the key's events, when the refusal came after the keyId was proven
    /// (``refusalsOfAProvenKey``, or the receipt); a store that cannot write it does not change the answer.
    func recordAttestationRefusal(_ refusal: AppAttestServiceError, keyID: KeyID, proven: Bool) async {
        guard proven else { return }
        let code = refusal.verification?.code.description ?? refusal.code.name
        FleetMetrics.keyEvent(.attestationRefused, metricsFactory)
        let event = KeyEvent(keyID: keyID, kind: .attestationRefused, time: now(), detail: code)
        try? await store.appendKeyEvent(event)
    }

    /// Writes, once per key and process, that a key's environment is no longer allowed.
    func recordEnvironmentRefusal(_ key: AttestedKey) async {
        guard policyState.firstEnvironmentReport(key.keyID) else { return }
        FleetMetrics.keyEvent(.environmentNotAllowed, metricsFactory)
        let event = KeyEvent(
            keyID: key.keyID, kind: .environmentNotAllowed, time: now(), detail: key.environment.rawValue)
        try? await store.appendKeyEvent(event)
    }
}

/// The metrics of the key lifecycle, through swift-metrics: the service's factory, else whatever backend the process
/// bootstrapped (none by default).
enum FleetMetrics {
    /// `appattest_key_events_total{kind}`.
    static func keyEvent(_ kind: KeyEvent.Kind, _ factory: (any MetricsFactory)?) {
        count("appattest_key_events_total", [("kind", kind.rawValue)], factory)
    }

    static func count(_ label: String, _ dimensions: [(String, String)], _ factory: (any MetricsFactory)?) {
        if let factory {
            Counter(label: label, dimensions: dimensions, factory: factory).increment()
        } else {
            Counter(label: label, dimensions: dimensions).increment()
        }
    }
}
