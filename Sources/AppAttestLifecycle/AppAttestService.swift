public import AppAttest
public import AppAttestStore
public import Foundation
public import Metrics
import Synchronization
public import Tracing

/// Challenge → attestation → assertions, on any `AppAttestStore`, so that nobody has to get the
/// read-modify-write of App Attest state right by hand.
public struct AppAttestService: Sendable {
    /// Challenge purposes.
    public enum Purpose {
        /// Challenges for `attestKey`.
        public static let attestation = "attestation"
        /// Challenges for `generateAssertion`.
        public static let assertion = "assertion"
    }

    /// The verifier, configured once.
    public let verifier: AppAttestVerifier
    /// Where challenges, keys and counters are kept.
    public let store: any AppAttestStore
    /// How long a challenge stays usable.
    public let challengeLifetime: TimeInterval
    /// Validates the receipt of each new attestation when set (“Receipts and the risk metric”, freshly received).
    public let receiptValidator: AppAttestReceiptValidator?
    /// How many unused challenges may be outstanding.
    public let challengeLimits: ChallengeLimits
    /// Which assertion counters are accepted.
    public let counterPolicy: AppAttestVerifier.CounterPolicy
    /// How long a key's events are kept (``events(ofKey:limit:)``): older ones are deleted by the service's
    /// background work.
    public let eventRetention: TimeInterval
    let now: @Sendable () -> Date
    let keyCache: KeyCache
    let batcher: AcceptanceBatcher
    let policyState: PolicyState
    /// Where the lifecycle's metrics go; nil for the process's bootstrapped backend.
    let metricsFactory: (any MetricsFactory)?
    /// Where spans go; nil when tracing is off.
    let tracer: (any Tracer)?

    /// A service over a store.
    /// - Parameters:
    ///   - verifier: the verifier, configured once.
    ///   - store: where challenges, keys and counters are kept.
    ///   - challengeLifetime: how long a challenge stays usable, in seconds.
    ///   - challengeLimits: how many unused challenges may be outstanding.
    ///   - receiptValidator: validates the receipt of each new attestation when given.
    ///   - counterPolicy: which assertion counters are accepted (strictly increasing by default).
    ///   - keyCacheLimits: how many parsed keys are kept in memory, and for how long.
    ///   - policies: each App ID's enforcement, attestation budget and keys per user (replaceable later with
    ///     ``replacePolicies(_:)``).
    ///   - eventRetention: how long a key's events are kept, in seconds (90 days by default).
    ///   - metricsFactory: where the lifecycle's metrics go (key events, budget refusals, reported refusals); nil for
    ///     the backend the process bootstrapped with `MetricsSystem.bootstrap`, if any.
    ///   - tracer: where a span for each attestation and assertion goes, with a child span per step (decode, chain,
    ///     nonce, signature, checks, store); nil for the tracer the process bootstrapped with
    ///     `InstrumentationSystem.bootstrap` before this call, if any (without one, nothing is traced and no clock
    ///     is read for it).
    ///   - now: the clock (tests move it).
    public init(
        verifier: AppAttestVerifier, store: any AppAttestStore, challengeLifetime: TimeInterval = 300,
        challengeLimits: ChallengeLimits = ChallengeLimits(), receiptValidator: AppAttestReceiptValidator? = nil,
        counterPolicy: AppAttestVerifier.CounterPolicy = .strictlyIncreasing,
        keyCacheLimits: KeyCacheLimits = KeyCacheLimits(), policies: Policies = Policies(),
        eventRetention: TimeInterval = 90 * 86_400, metricsFactory: (any MetricsFactory)? = nil,
        tracer: (any Tracer)? = nil, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.metricsFactory = metricsFactory
        let bootstrapped = tracer ?? InstrumentationSystem.tracer
        self.tracer = bootstrapped is NoOpTracer ? nil : bootstrapped
        self.policyState = PolicyState(policies)
        self.eventRetention = eventRetention.isFinite ? max(0, eventRetention) : 90 * 86_400
        self.keyCache = KeyCache(limits: keyCacheLimits)
        self.counterPolicy = counterPolicy
        self.batcher = AcceptanceBatcher(store: store)
        self.verifier = verifier
        self.store = store
        self.challengeLifetime = challengeLifetime
        self.challengeLimits = challengeLimits
        self.receiptValidator = receiptValidator
        self.now = now
    }

    /// The size of issued challenges, above Apple's 16-byte minimum (“Verifying assertions and counters”).
    public static let challengeSize = 32

    /// The longest user identifier accepted, in bytes of UTF-8.
    public static let maximumUserIDLength = 256

    /// Refuses a user identifier that every store could not keep as it is (<doc:RunningTheVerificationService>).
    static func checkUserID(_ userID: String?) throws(AppAttestServiceError) {
        guard let userID else { return }
        guard !userID.isEmpty, userID.utf8.count <= maximumUserIDLength else {
            throw AppAttestServiceError(
                .invalidUserID, "a user identifier has 1 to \(maximumUserIDLength) bytes, not \(userID.utf8.count)")
        }
        guard !userID.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
            throw AppAttestServiceError(.invalidUserID, "a user identifier holds a control character")
        }
    }

    /// ``challengeSize`` bytes from the system's cryptographic generator.
    static func randomChallenge() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<challengeSize).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// Issues a one-time challenge.
    ///
    /// A challenge for ``Purpose/attestation`` is taken from the App ID's attestation budget
    /// (``AppPolicy/attestationsPerSecond``), shared by every instance on the store: beyond it,
    /// ``AppAttestServiceError/Code/attestationBudgetExhausted`` with ``AppAttestServiceError/retryAfter``. The budget is
    /// spent here, before the device asks Apple for an attestation, so that a fleet re-attesting at once (a lost key
    /// table, a release that discards keys) reaches Apple at the budget's pace.
    ///
    /// Every outstanding challenge counts against ``ChallengeLimits/total``, and those of one `issuer` against
    /// ``ChallengeLimits/perIssuer``: beyond either, ``AppAttestServiceError/Code/tooManyChallenges``. A challenge
    /// reserved for a key or a user never fails for that key's or user's limit: it replaces their oldest outstanding
    /// one, so that nobody can lock a device out of challenges by asking for them in its name. A challenge is reserved
    /// only for a registered key that is not revoked.
    /// - Parameters:
    ///   - purpose: ``Purpose/attestation``, ``Purpose/assertion``, or one of yours.
    ///   - keyID: reserve it for one key (assertions); the key must be registered and not revoked.
    ///   - userID: reserve it for one user.
    ///   - issuer: who asks (a caller's name, a client's address), to bound what one issuer may hold; nil for none.
    ///   - appID: for an attestation challenge, the App ID whose budget pays for it; nil (or an App ID this service
    ///     does not accept) for the only accepted App ID, or, when several are accepted, a budget shared by the
    ///     attestations of unnamed App IDs under the default policy.
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `keyRevoked`, `invalidUserID`, `tooManyChallenges`,
    ///   `attestationBudgetExhausted`, `storeUnavailable`.
    public func issueChallenge(
        purpose: String, keyID: KeyID? = nil, userID: String? = nil, issuer: String? = nil, appID: AppID? = nil
    )
        async throws(AppAttestServiceError)
        -> IssuedChallenge
    {
        try Self.checkUserID(userID)
        let time = now()
        if let keyID {
            // Reservations are for keys that can use them: an unknown key's would only fill the store.
            _ = try await liveKey(keyID)
        }
        let total = try await run { () async throws(StoreError) -> Int in
            try await store.outstandingChallenges(keyID: nil, userID: nil, now: time)
        }
        guard total < challengeLimits.total else {
            throw AppAttestServiceError(
                .tooManyChallenges, "\(challengeLimits.total) unused challenges are outstanding on this server")
        }
        if let issuer {
            let held = try await run { () async throws(StoreError) -> Int in
                try await store.outstandingChallenges(issuer: issuer, now: time)
            }
            guard held < challengeLimits.perIssuer else {
                throw AppAttestServiceError(
                    .tooManyChallenges, "\(challengeLimits.perIssuer) unused challenges are outstanding for this caller"
                )
            }
        }
        // The budget last, once the challenge is sure to be issued: a request refused for the limits above spends
        // nothing, so that nobody drains the budget with requests that are refused anyway.
        if purpose == Purpose.attestation { try await spendAttestationBudget(appID: appID) }
        let bytes = Self.randomChallenge()
        let expiresAt = time.addingTimeInterval(challengeLifetime)
        let record = ChallengeRecord(
            challenge: bytes, purpose: purpose, keyID: keyID, userID: userID, expiresAt: expiresAt, issuer: issuer)
        let limit = keyID != nil ? challengeLimits.perKey : challengeLimits.perUser
        try await run { () async throws(StoreError) in
            if keyID != nil || userID != nil {
                try await store.insertChallenge(record, keepingAtMost: max(1, limit), now: time)
            } else {
                try await store.insertChallenge(record)
            }
        }
        return IssuedChallenge(challenge: bytes, expiresAt: expiresAt)
    }

    /// Consumes the challenge, verifies the attestation against it and stores the key with counter 0.
    ///
    /// Posting the same key, object, challenge and user again within ``challengeLifetime`` of the registration answers
    /// the registered key, as the first time: an app whose answer was lost cannot attest the key again (a device
    /// attests each key once), so it sends the same attestation. Nothing is stored twice; a caller that does
    /// something once per registration (a welcome credit, binding the device to an account) keys it on the keyId,
    /// as a second delivery of the first post would need anyway.
    /// - Throws: ``AppAttestServiceError``.
    public func registerAttestation(
        _ attestationObject: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String? = nil
    ) async throws(AppAttestServiceError) -> KeyRecord {
        let trace = ServiceTrace(tracer, "appattest.attestation")
        trace?.keyID(keyID)
        do {
            let record = try await register(
                attestationObject, keyID: keyID, challenge: challenge, userID: userID, trace: trace)
            trace?.end(refusal: nil)
            return record
        } catch {
            trace?.end(refusal: error)
            throw error
        }
    }

    private func register(
        _ attestationObject: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String?, trace: ServiceTrace?
    ) async throws(AppAttestServiceError) -> KeyRecord {
        try Self.checkUserID(userID)
        // The attestation budget was spent when its challenge was issued, before the device asked Apple.
        if let trace { trace.appID(configuredAppID(ofAttestation: attestationObject)) }
        do {
            try await step(trace, "appattest.challenge") { () async throws(AppAttestServiceError) in
                try await consume(challenge, purpose: Purpose.attestation, keyID: keyID, userID: userID)
            }
        } catch  where error.code == .challengeUnknown {
            // The same attestation posted again because its answer was lost: the answer it had the first time.
            if let registered = try await registeredBefore(
                attestationObject, keyID: keyID, challenge: challenge, userID: userID)
            {
                return registered
            }
            throw error
        }
        let attested: VerifiedAttestation
        var timeline = trace.map { _ in VerificationTimeline() }
        defer { if let timeline { trace?.steps(timeline) } }
        do {
            attested = try verifier.verifyAttestation(
                attestationObject, keyID: keyID, challenge: challenge, timeline: &timeline)
        } catch {
            let refusal = AppAttestServiceError(.verificationFailed, error.reason, verification: error)
            await recordAttestationRefusal(
                refusal, keyID: keyID, proven: Self.refusalsOfAProvenKey.contains(error.code))
            throw refusal
        }
        var riskMetric: Int?
        if let receiptValidator {
            do {
                riskMetric = try receiptValidator.validate(attested.receipt, expecting: .attestation(attested))
                    .riskMetric
            } catch {
                let refusal = AppAttestServiceError(
                    .verificationFailed, "receipt: \(error.reason)", verification: error)
                await recordAttestationRefusal(refusal, keyID: keyID, proven: true)
                throw refusal
            }
        }
        let time = now()
        let record = KeyRecord(
            key: attested.key, userID: userID, receipt: attested.receipt, riskMetric: riskMetric, createdAt: time,
            receiptUpdatedAt: time, revokedAt: nil)
        let keysPerUser = policies.policy(for: attested.key.appID).maximumKeysPerUser
        let insertion = try await step(trace, "appattest.store") { () async throws(AppAttestServiceError) in
            try await run { () async throws(StoreError) -> KeyInsertion in
                try await store.insertKey(record, maximumKeysPerUser: keysPerUser)
            }
        }
        switch insertion {
        case .duplicate(let existing):
            // A key belongs to one user (“Verifying attestations”); re-registering it is a replay either way.
            if existing.userID != userID {
                throw AppAttestServiceError(.keyBoundToAnotherUser, "this key is registered to another user")
            }
            throw AppAttestServiceError(.keyAlreadyRegistered, "this key is already registered")
        case .inserted(let superseded):
            FleetMetrics.keyEvent(.attested, metricsFactory)
            for old in superseded {
                keyCache.remove(old)
                FleetMetrics.keyEvent(.superseded, metricsFactory)
            }
        }
        keyCache.insert(record)
        return record
    }

    /// Verifies an assertion with the stored key and counter, consumes the challenge it carries when one is
    /// given, and advances the counter atomically: of several concurrent assertions with the same counter,
    /// exactly one is accepted.
    /// - Parameters:
    ///   - assertion: the CBOR bytes from `generateAssertion`.
    ///   - clientData: the exact bytes the app hashed, and the challenge they bind, if any, at its defined place
    ///     (`AppAttestClientData`); the challenge must have been issued for ``Purpose/assertion``.
    ///   - keyID: the key the app says signed it.
    ///   - issuingNextChallenge: also issue a challenge reserved for this key, stored in the same transaction as the
    ///     counter, for the app's next request (``AuthenticatedAssertion/nextChallenge``). Only a request that
    ///     consumes a challenge reserved for this key gets one, in its place, so that no limit is escaped this way.
    /// - Throws: ``AppAttestServiceError``.
    public func authenticateAssertion(
        _ assertion: [UInt8], clientData: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool = false
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        try await authenticate(
            assertion, clientData: clientData, keyID: keyID, issuingNextChallenge: issuingNextChallenge)
    }

    /// Verifies an assertion over client data that binds no challenge (the application binds its requests
    /// otherwise), and advances the counter atomically.
    /// - Throws: ``AppAttestServiceError``; ``AppAttestServiceError/Code/malformedBinding`` above 64 KiB of client
    ///   data.
    public func authenticateAssertion(
        _ assertion: [UInt8], clientData: [UInt8], keyID: KeyID
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        let binding: AppAttestClientData
        do { binding = try AppAttestClientData.opaque(clientData) } catch {
            throw AppAttestServiceError(binding: error)
        }
        return try await authenticate(assertion, clientData: binding, keyID: keyID)
    }

    private func authenticate(
        _ assertion: [UInt8], clientData binding: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool = false
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        guard let trace = ServiceTrace(tracer, "appattest.assertion") else {
            return try await authenticate(
                assertion, clientData: binding, keyID: keyID, issuingNextChallenge: issuingNextChallenge, trace: nil)
        }
        trace.keyID(keyID)
        do {
            let authenticated = try await authenticate(
                assertion, clientData: binding, keyID: keyID, issuingNextChallenge: issuingNextChallenge, trace: trace)
            trace.end(refusal: nil)
            return authenticated
        } catch {
            trace.end(refusal: error)
            throw error
        }
    }

    private func authenticate(
        _ assertion: [UInt8], clientData binding: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool,
        trace: ServiceTrace?
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        let clientData = binding.bytes
        // The key's immutable parts (point, App ID, user) come from a short-lived cache when they can: the store's
        // conditional update below is what decides, so a stale counter or a revocation made elsewhere cannot let
        // an assertion through; it only means the refusal is found there instead of here.
        let entry = try await step(trace, "appattest.key") { () async throws(AppAttestServiceError) in
            try await liveKey(keyID)
        }
        let key = entry.attestedKey
        trace?.appID(key.appID)
        // The environment policy applies now, not only when the key was attested: an App ID reconfigured for
        // production only stops accepting its development keys at once.
        guard verifier.configuration.apps[key.appID]?.contains(key.environment) == true else {
            await recordEnvironmentRefusal(key)
            throw AppAttestServiceError(
                .environmentNotAllowed, "\(key.environment.rawValue) keys are not allowed for \(key.appID)")
        }
        // The verifier admits the counter under the policy; the store's acceptance below applies the same policy
        // atomically, against the counters already used.
        let verified: VerifiedAssertion
        var timeline = trace.map { _ in VerificationTimeline() }
        defer { if let timeline { trace?.steps(timeline) } }
        do {
            verified = try verifier.verifyAssertion(
                assertion, clientData: clientData, key: key, counterPolicy: counterPolicy, timeline: &timeline)
        } catch {
            throw AppAttestServiceError(.verificationFailed, error.reason, verification: error)
        }
        // After the signature (“Verifying assertions and counters”): the challenge is in the signed client data, at
        // its place (never searched for), and is consumed in the same store transaction as the counter.
        var use: AssertionAcceptance.ChallengeUse?
        if let challenge = binding.challenge {
            guard binding.challengeIsInPlace else {
                throw AppAttestServiceError(.challengeMismatch, "the challenge is not at its place in the client data")
            }
            // A challenge reserved for the key's user is usable by the user's keys.
            use = .init(challenge: challenge, purpose: Purpose.assertion, userID: entry.record.userID, now: now())
        }
        var next: ChallengeRecord?
        // Only in place of a challenge reserved for this key (one more read): the next one replaces it, so that the
        // key's outstanding challenges, the total and what its issuer holds never grow through next challenges (an
        // unreserved challenge turned into a reserved one would escape the issuer's share).
        if issuingNextChallenge, let challenge = binding.challenge,
            try await run({ () async throws(StoreError) -> ChallengeRecord? in try await store.challenge(challenge) })?
                .keyID == keyID
        {
            next = ChallengeRecord(
                challenge: Self.randomChallenge(), purpose: Purpose.assertion, keyID: keyID, userID: nil,
                expiresAt: now().addingTimeInterval(challengeLifetime))
        }
        let acceptance = AssertionAcceptance(
            keyID: keyID, counter: verified.counter, counterPolicy: counterPolicy, challenge: use, nextChallenge: next)
        // Group commit: concurrent acceptances share one store transaction (AcceptanceBatcher).
        let outcome = try await step(trace, "appattest.acceptance") { () async throws(AppAttestServiceError) in
            try await run { () async throws(StoreError) -> AssertionAcceptanceOutcome in
                try await batcher.accept(acceptance)
            }
        }
        switch outcome {
        case .accepted(let highest):
            keyCache.advance(keyID, to: highest)
            var updated = entry.record
            updated.key.counter = highest
            return AuthenticatedAssertion(
                record: updated, assertion: verified,
                nextChallenge: next.map { IssuedChallenge(challenge: $0.challenge, expiresAt: $0.expiresAt) })
        case .unknownKey:
            keyCache.remove(keyID)
            throw AppAttestServiceError(.unknownKey, "no key \(keyID)")
        case .keyRevoked:
            keyCache.remove(keyID)
            throw AppAttestServiceError(.keyRevoked, "key \(keyID) was revoked")
        case .counterRefused(let highest):
            keyCache.advance(keyID, to: highest)
            throw AppAttestServiceError(.counterReplayed, "counter \(verified.counter) was already used for this key")
        case .challengeRefused(let stored):
            throw Self.challengeRefusal(
                stored, purpose: Purpose.assertion, keyID: keyID, userID: entry.record.userID, now: now())
        }
    }

    /// The key from the cache, or read from the store (and cached): `unknownKey` when there is none, `keyRevoked` when
    /// it was revoked.
    func liveKey(_ keyID: KeyID) async throws(AppAttestServiceError) -> KeyCache.Entry {
        if let cached = keyCache.entry(keyID) { return cached }
        guard let record = try await run({ () async throws(StoreError) -> KeyRecord? in try await store.key(keyID) })
        else {
            throw AppAttestServiceError(.unknownKey, "no key \(keyID)")
        }
        guard record.revokedAt == nil else { throw AppAttestServiceError(.keyRevoked, "key \(keyID) was revoked") }
        return keyCache.insert(record)
    }

    /// Why a challenge was refused, from its stored record (nil: unknown or already used): the first of purpose,
    /// reservation for a key, reservation for a user, and expiry that it fails.
    static func challengeRefusal(_ stored: ChallengeRecord?, purpose: String, keyID: KeyID, userID: String?, now: Date)
        -> AppAttestServiceError
    {
        guard let stored else { return AppAttestServiceError(.challengeUnknown, "unknown or already used challenge") }
        if stored.purpose != purpose {
            return AppAttestServiceError(.challengeMismatch, "a challenge for \(stored.purpose), not \(purpose)")
        }
        if stored.keyID != nil && stored.keyID != keyID {
            return AppAttestServiceError(.challengeMismatch, "the challenge is reserved for another key")
        }
        if stored.userID != nil && stored.userID != userID {
            return AppAttestServiceError(.challengeMismatch, "the challenge is reserved for another user")
        }
        if stored.expiresAt <= now { return AppAttestServiceError(.challengeExpired, "the challenge expired") }
        return AppAttestServiceError(.challengeUnknown, "unknown or already used challenge")
    }

    /// Deletes expired challenges.
    public func purgeExpiredChallenges() async throws(AppAttestServiceError) -> Int {
        let time = now()
        return try await run { () async throws(StoreError) -> Int in try await store.purgeExpiredChallenges(now: time) }
    }

    // MARK: Helpers

    /// The key as this very attestation registered it, when the same key, object, challenge and user come again within
    /// the challenge's lifetime of the registration: an app posts its attestation again when the answer was lost, since
    /// the device cannot attest the key twice. Only reached once the challenge is known to be used, and only for a key
    /// that exists: the object must verify against the challenge and carry the receipt stored with the key, so that
    /// nothing but the first registration's own object gets its answer, and nothing changes.
    private func registeredBefore(_ object: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String?)
        async throws(AppAttestServiceError) -> KeyRecord?
    {
        guard let existing = try await run({ () async throws(StoreError) -> KeyRecord? in try await store.key(keyID) }),
            existing.revokedAt == nil, existing.userID == userID,
            abs(now().timeIntervalSince(existing.createdAt)) <= challengeLifetime,
            // The receipt first (a parse, no signature checked): only the registration's own object goes further.
            (try? AttestationObject(cborEncoded: object))?.receipt == existing.receipt,
            let attested = try? verifier.verifyAttestation(object, keyID: keyID, challenge: challenge),
            attested.receipt == existing.receipt, attested.key.publicKey == existing.key.publicKey
        else { return nil }
        return existing
    }

    private func consume(_ challenge: [UInt8], purpose: String, keyID: KeyID, userID: String?)
        async throws(AppAttestServiceError)
    {
        guard (16...1024).contains(challenge.count) else {
            throw AppAttestServiceError(.challengeUnknown, "a challenge of \(challenge.count) bytes was never issued")
        }
        // The reservation is checked by the store before anything is deleted, so a challenge reserved for another
        // key or user cannot be burned; a refusal costs one more read, to say why.
        guard
            let record = try await run({ () async throws(StoreError) -> ChallengeRecord? in
                try await store.consumeChallenge(challenge, purpose: purpose, keyID: keyID, userID: userID)
            })
        else {
            let stored = try await run { () async throws(StoreError) -> ChallengeRecord? in
                try await store.challenge(challenge)
            }
            throw Self.challengeRefusal(stored, purpose: purpose, keyID: keyID, userID: userID, now: now())
        }
        guard record.expiresAt > now() else { throw AppAttestServiceError(.challengeExpired, "the challenge expired") }
    }

    /// `body`, in a child span of `trace` when there is one.
    func step<T>(_ trace: ServiceTrace?, _ name: String, _ body: () async throws(AppAttestServiceError) -> T)
        async throws(AppAttestServiceError) -> T
    {
        guard let trace else { return try await body() }
        return try await trace.step(name, body)
    }

    func run<T>(_ body: () async throws(StoreError) -> T) async throws(AppAttestServiceError) -> T {
        do { return try await body() } catch {
            throw AppAttestServiceError(.storeUnavailable, error.description)
        }
    }
}
