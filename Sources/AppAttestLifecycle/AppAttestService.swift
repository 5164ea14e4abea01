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
    /// The reads of concurrent cache misses, together.
    let keyReads: KeyReadBatcher
    let batcher: AcceptanceBatcher
    let policyState: PolicyState
    /// Reposts of registrations verified lately, answered again without a chain verification.
    let repostedAttestations = RepostedAttestations()
    /// The receipt refreshes under way, by key: a refresh of a key that has one shares it.
    let receiptRefreshes = ReceiptRefreshes()
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
    ///   - eventRetention: how long a key's events are kept, in seconds (90 days by default); its revocations are
    ///     kept while the store keeps the key (they say why it is refused).
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
        self.keyReads = KeyReadBatcher(store: store)
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
    /// Every outstanding challenge reserved for no key counts against ``ChallengeLimits/total``, and every one an
    /// `issuer` holds (those reserved for keys included) against ``ChallengeLimits/perIssuer``: beyond either, a
    /// challenge not reserved for a key, or an attestation challenge, is refused
    /// ``AppAttestServiceError/Code/tooManyChallenges``. Any other challenge reserved for a key is refused by neither:
    /// it is only for a registered key that is not revoked, and each key holds at most ``ChallengeLimits/perKey``, so
    /// that callers who fill the total (the open challenge route, from many addresses) cannot stop registered
    /// devices' requests, nor devices that each hold one stop registrations, and a backend that asks for its devices'
    /// challenges is not held to one issuer's share. A challenge reserved for a key or a user never fails for that
    /// key's or user's limit either: it replaces the key's oldest outstanding one (the user's oldest that the same
    /// issuer asked for), so that nobody can lock a device out of challenges by asking for them in its name.
    /// - Parameters:
    ///   - purpose: ``Purpose/attestation``, ``Purpose/assertion``, or one of yours.
    ///   - keyID: reserve it for one key (assertions); the key must be registered and not revoked.
    ///   - userID: reserve it for one user.
    ///   - issuer: who asks (a caller's name, a client's address), to bound what one issuer may hold; nil for none.
    ///   - appID: for an attestation challenge, the App ID whose budget pays for it; nil (or an App ID this service
    ///     does not accept) for the only accepted App ID, or, when several are accepted, a budget shared by the
    ///     attestations of unnamed App IDs under the default policy.
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `keyRevoked`, `keySuperseded`, `invalidUserID`,
    ///   `tooManyChallenges`, `attestationBudgetExhausted`, `storeUnavailable`.
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
            _ = try await liveKey(keyID, readingRevocation: true)
        }
        // A challenge reserved for a key is bounded by the key's own limit (a registered key that is not revoked, at
        // most `perKey` each): neither the total nor an issuer's share refuses it, so that nobody who floods the open
        // challenge route, from however many addresses, stops registered devices' requests. Not an attestation
        // challenge, which spends the attestation budget: one reserved for a registered key could register nothing,
        // and must not let a caller spend the budget past its share.
        if keyID == nil || purpose == Purpose.attestation {
            try await checkChallengeAllowance(issuer: issuer, now: time)
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

    /// Refuses a challenge not reserved for a key beyond ``ChallengeLimits/total`` (every outstanding challenge
    /// counted) or beyond `issuer`'s ``ChallengeLimits/perIssuer``.
    private func checkChallengeAllowance(issuer: String?, now time: Date) async throws(AppAttestServiceError) {
        // Those reserved for a key are bounded by the key's own limit, and are not counted where the store can leave
        // them out: a fleet whose devices each hold one would otherwise fill the total.
        let total = try await run { () async throws(StoreError) -> Int in
            if let counting = store as? any CountsUnreservedChallenges {
                return try await counting.outstandingUnreservedChallenges(now: time)
            }
            return try await store.outstandingChallenges(keyID: nil, userID: nil, now: time)
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
    }

    /// The key from the cache, or read from the store (and cached): `unknownKey` when there is none, `keyRevoked` when
    /// it was revoked (or this process found it revoked within the cache's age). A cache miss's read may leave the
    /// revocation unread (``KeyReadBatcher/readsCounters``): the assertion's acceptance finds it. `readingRevocation`
    /// reads it, from the store when the cache does not know it.
    func liveKey(_ keyID: KeyID, readingRevocation: Bool = false) async throws(AppAttestServiceError)
        -> KeyCache.Entry
    {
        if let cached = keyCache.entry(keyID), cached.key.countersRead || !readingRevocation {
            guard cached.record.revokedAt == nil else {
                throw Self.revocation(keyID, superseded: cached.key.superseded)
            }
            return cached
        }
        let generation = keyCache.generation(of: keyID)
        guard
            let record = try await run({ () async throws(StoreError) -> KeyRecord? in
                readingRevocation ? try await keyReads.keyWithCounters(keyID) : try await keyReads.key(keyID)
            })
        else {
            throw AppAttestServiceError(.unknownKey, "no key \(keyID)")
        }
        guard record.revokedAt == nil else { throw await refusal(ofRevoked: record, readSince: generation) }
        return keyCache.insert(
            record, countersRead: readingRevocation || keyReads.readsCounters, readSince: generation)
    }

    /// The refusal of a key found revoked (`record`, its revocation set), remembered by the key cache with why for the
    /// cache's age, so that the key's next requests are refused without a read (a revocation is never undone). When
    /// why cannot be read, the stricter refusal (`keyRevoked`), and nothing remembered.
    /// - Parameter readSince: the key cache's generation before `record` was read, so that a revocation this process
    ///   made meanwhile (with its own reason) is not hidden by what this read found (``KeyCache/generation(of:)``).
    func refusal(ofRevoked record: KeyRecord, readSince: UInt64) async -> AppAttestServiceError {
        let superseded = try? await supersession(record.keyID)
        if let superseded {
            keyCache.insert(record, superseded: superseded, readSince: readSince)
        } else {
            keyCache.remove(record.keyID)
        }
        return Self.revocation(record.keyID, superseded: superseded ?? false)
    }

    /// Whether a revoked key's last revocation was a newer key of its user beyond
    /// ``AppPolicy/maximumKeysPerUser`` (its events say: the retention purge keeps revocations), or the store's
    /// failure. Nothing is written to a revoked key's events but revocations: its requests are refused before, and
    /// its receipt is not replaced.
    func supersession(_ keyID: KeyID) async throws(AppAttestServiceError) -> Bool {
        let events = try await run { () async throws(StoreError) -> [KeyEvent] in
            try await store.keyEvents(keyID, limit: 16)
        }
        return events.last(where: { $0.kind == .revoked || $0.kind == .superseded })?.kind == .superseded
    }

    /// The refusal of a revoked key: `keySuperseded` (register a new key) or `keyRevoked` (stay refused).
    static func revocation(_ keyID: KeyID, superseded: Bool) -> AppAttestServiceError {
        superseded
            ? AppAttestServiceError(.keySuperseded, "key \(keyID) was superseded by a newer key of its user")
            : AppAttestServiceError(.keyRevoked, "key \(keyID) was revoked")
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

    func consume(_ challenge: [UInt8], purpose: String, keyID: KeyID, userID: String?)
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

    /// `body` under a span named `operation` for `keyID` when the service traces (ended with the refusal's code when
    /// it throws), else `body` with no trace.
    func traced<T>(
        _ operation: String, keyID: KeyID, _ body: (ServiceTrace?) async throws(AppAttestServiceError) -> T
    ) async throws(AppAttestServiceError) -> T {
        guard let trace = ServiceTrace(tracer, operation) else { return try await body(nil) }
        trace.keyID(keyID)
        do {
            let result = try await body(trace)
            trace.end(refusal: nil)
            return result
        } catch {
            trace.end(refusal: error)
            throw error
        }
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
