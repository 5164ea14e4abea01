public import AppAttest
import Foundation
import Synchronization

extension AppAttestService {
    /// Whether an App ID's refusals block requests (<doc:OperatingAppAttestInProduction>).
    public enum Enforcement: String, Sendable, Hashable, Codable, CaseIterable {
        /// Refusals are answered as refusals: the request does not run.
        case enforce
        /// Every check runs and every would-be refusal is recorded (a metric labelled by code, a log line, the key's
        /// events), but the request runs, marked unverified: how App Attest is turned on for an app already in
        /// users' hands, before its adoption is known.
        case report
    }

    /// How the service treats one App ID's keys beyond verification: enforcement, Apple's attestation budget and
    /// the keys a user may hold (<doc:OperatingAppAttestInProduction>).
    public struct AppPolicy: Sendable, Hashable {
        /// Whether refusals block requests.
        public var enforcement: Enforcement
        /// Attestation challenges issued per second (each one device asking Apple once), for every instance that
        /// shares the store; nil for no budget. Apple asks for under about 100 per second per app.
        public var attestationsPerSecond: Double?
        /// Attestation challenges issued at once when the budget has been idle.
        public var attestationBurst: Double
        /// Active keys one user may hold: a new key beyond it revokes the user's oldest (`KeyEvent.Kind.superseded`);
        /// nil for no limit. Keys registered without a user are never superseded. A superseded key is refused
        /// ``AppAttestServiceError/Code/keySuperseded``, whose problem action is `reattest`: a device still in use
        /// registers a new key (which supersedes the user's next oldest, most often a key of an app since
        /// reinstalled) rather than stay locked out. Set it above the devices a user really uses: with more live
        /// devices than the limit, they supersede one another, each within its client's daily replacements.
        public var maximumKeysPerUser: Int?

        /// - Parameters:
        ///   - enforcement: whether refusals block requests (``Enforcement/enforce`` by default).
        ///   - attestationsPerSecond: the attestation budget (100 by default; nil for none; at least 0.001).
        ///   - attestationBurst: attestations accepted at once (by default the budget of one second; at least 1).
        ///   - maximumKeysPerUser: active keys per user (5 by default; nil for no limit; at least 1).
        public init(
            enforcement: Enforcement = .enforce, attestationsPerSecond: Double? = 100, attestationBurst: Double? = nil,
            maximumKeysPerUser: Int? = 5
        ) {
            self.enforcement = enforcement
            let rate = attestationsPerSecond.map { $0.isFinite ? max(0.001, $0) : 0.001 }
            self.attestationsPerSecond = rate
            let burst = attestationBurst ?? rate ?? 1
            self.attestationBurst = burst.isFinite ? max(1, burst) : 1
            self.maximumKeysPerUser = maximumKeysPerUser.map { max(1, $0) }
        }
    }

    /// The policy of each App ID, and the one for App IDs not listed (and for refusals whose App ID is not known,
    /// such as an unknown key's).
    public struct Policies: Sendable, Hashable {
        /// For App IDs not in ``apps``.
        public var defaultPolicy: AppPolicy
        /// Per App ID.
        public var apps: [AppID: AppPolicy]

        /// - Parameters:
        ///   - defaultPolicy: for App IDs not in `apps` (enforce, 100 attestations per second, 5 keys per user).
        ///   - apps: per App ID.
        public init(defaultPolicy: AppPolicy = AppPolicy(), apps: [AppID: AppPolicy] = [:]) {
            self.defaultPolicy = defaultPolicy
            self.apps = apps
        }

        /// The policy that applies to `appID` (nil: not known).
        public func policy(for appID: AppID?) -> AppPolicy {
            appID.flatMap { apps[$0] } ?? defaultPolicy
        }
    }
}

/// The service's policies, replaceable while it runs (a configuration reload), shared by its copies.
final class PolicyState: Sendable {
    private let policies: Mutex<AppAttestService.Policies>
    /// Keys whose refused environment was already written to their events by this process (bounded).
    private let environmentReported = Mutex<Set<KeyID>>([])
    static let maximumReportedKeys = 100_000

    init(_ policies: AppAttestService.Policies) { self.policies = Mutex(policies) }

    var current: AppAttestService.Policies { policies.withLock { $0 } }
    func replace(_ new: AppAttestService.Policies) { policies.withLock { $0 = new } }

    /// True the first time `keyID` is reported here (and while fewer than ``maximumReportedKeys`` were).
    func firstEnvironmentReport(_ keyID: KeyID) -> Bool {
        environmentReported.withLock { reported in
            guard reported.count < Self.maximumReportedKeys else { return false }
            return reported.insert(keyID).inserted
        }
    }
}
