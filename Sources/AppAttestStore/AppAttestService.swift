public import AppAttest
public import Foundation
import Synchronization

/// Why the service refused a request. Verification failures keep the verifier's own error.
public struct AppAttestServiceError: Error, Sendable, CustomStringConvertible {
    /// A stable code for a refusal.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name, as problem responses and metrics show it.
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The challenge was never issued, or was already used.
        public static let challengeUnknown = Code("challengeUnknown")
        /// The challenge expired.
        public static let challengeExpired = Code("challengeExpired")
        /// The challenge is for another purpose, key or user, or is not in the client data.
        public static let challengeMismatch = Code("challengeMismatch")
        /// The key is already registered (a replayed attestation).
        public static let keyAlreadyRegistered = Code("keyAlreadyRegistered")
        /// The key is registered to another user (“Verifying attestations”, after step 9).
        public static let keyBoundToAnotherUser = Code("keyBoundToAnotherUser")
        /// No such key.
        public static let unknownKey = Code("unknownKey")
        /// The key was revoked.
        public static let keyRevoked = Code("keyRevoked")
        /// Another request with this counter (or a higher one) was accepted first.
        public static let counterReplayed = Code("counterReplayed")
        /// The attestation or assertion failed verification: see ``AppAttestServiceError/verification``.
        public static let verificationFailed = Code("verificationFailed")
        /// The store could not answer.
        public static let storeUnavailable = Code("storeUnavailable")
        /// The key's environment is no longer allowed for its App ID (the configuration changed since it was
        /// attested): its assertions are refused.
        public static let environmentNotAllowed = Code("environmentNotAllowed")
        /// Too many unused challenges are outstanding for this issuer, or in all (``AppAttestService/ChallengeLimits``).
        public static let tooManyChallenges = Code("tooManyChallenges")
        /// The client data's binding is malformed: a method or path that cannot be bound, a challenge of a size the
        /// service never issues, client data too large (``AppAttestClientData``).
        public static let malformedBinding = Code("malformedBinding")
        /// The user identifier is empty, longer than ``AppAttestService/maximumUserIDLength`` bytes, or holds a
        /// control character (U+0000–U+001F, U+007F–U+009F): stores would disagree on such an identifier (SQLite ends
        /// a text at NUL).
        public static let invalidUserID = Code("invalidUserID")
    }

    /// The reason.
    public let code: Code
    /// What went wrong, for logs (never echoes client bytes).
    public let message: String
    /// The verifier's error, for ``Code/verificationFailed``.
    public let verification: AppAttestError?

    /// An error with a code, a message and, for ``Code/verificationFailed``, the verifier's error.
    public init(_ code: Code, _ message: String, verification: AppAttestError? = nil) {
        self.code = code
        self.message = message
        self.verification = verification
    }

    public var description: String {
        verification.map { "\(code) (\($0.code)): \(message)" } ?? "\(code): \(message)"
    }
}

/// A challenge handed to a client.
public struct IssuedChallenge: Sendable, Hashable {
    /// The challenge bytes to hand to the app.
    public let challenge: [UInt8]
    /// When it stops being accepted.
    public let expiresAt: Date
}

/// A verified assertion whose counter is stored.
public struct AuthenticatedAssertion: Sendable, Hashable {
    /// The key, with the new counter.
    public let key: KeyRecord
    /// What the verifier returned for it.
    public let assertion: VerifiedAssertion
    /// The next request's challenge, stored with this assertion's counter, when it was asked for (the HTTP layer
    /// returns it in a response header).
    public let nextChallenge: IssuedChallenge?

    init(key: KeyRecord, assertion: VerifiedAssertion, nextChallenge: IssuedChallenge? = nil) {
        self.key = key
        self.assertion = assertion
        self.nextChallenge = nextChallenge
    }
}

/// Challenge → attestation → assertions, on any ``AppAttestStore``, so that nobody has to get the
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
    public let counterPolicy: CounterPolicy
    private let now: @Sendable () -> Date
    private let keyCache: KeyCache
    private let batcher: AcceptanceBatcher

    /// Which assertion counters a key may present (<doc:RunningTheVerificationService>, “Counters”).
    ///
    /// Apple's rule is a strictly increasing counter, and it is the default. An app that sends requests concurrently
    /// generates assertions 5, 6, 7 that may arrive as 7, 5, 6: the strict rule refuses 5 and 6. With a reorder
    /// window, each counter value is still accepted at most once, in any order within the window (the highest
    /// accepted counter and the ones below it, like IPsec's anti-replay window); anything older is refused.
    public struct CounterPolicy: Sendable, Hashable {
        /// How many counters, the highest accepted one included, may be accepted in any order.
        public let window: Int

        /// Only counters above the highest accepted one (Apple's rule).
        public static let strictlyIncreasing = CounterPolicy(window: 1)

        /// Counters not yet accepted within `size` of the highest (2...64; larger values are 64).
        public static func reorderWindow(_ size: Int) -> CounterPolicy {
            CounterPolicy(window: min(max(size, 1), AssertionAcceptance.maximumWindow))
        }

        private init(window: Int) { self.window = window }
    }

    /// Bounds on unused, unexpired challenges, so that nobody can grow the store by asking for challenges and never
    /// using them. Expired ones stop counting at once and are deleted by ``AppAttestChallengePurger``.
    public struct ChallengeLimits: Sendable, Hashable {
        /// Reserved for one key: a new one replaces the key's oldest beyond this.
        public var perKey: Int
        /// Reserved for one user: a new one replaces the user's oldest beyond this.
        public var perUser: Int
        /// Held by one issuer (``issueChallenge(purpose:keyID:userID:issuer:)``), so that one caller or address
        /// cannot take the whole ``total`` and lock everyone else out.
        public var perIssuer: Int
        /// In all, reserved or not.
        public var total: Int

        /// - Parameters:
        ///   - perKey: reserved for one key (16 by default).
        ///   - perUser: reserved for one user (64 by default).
        ///   - perIssuer: held by one issuer (1,000 by default).
        ///   - total: in all (100,000 by default).
        public init(perKey: Int = 16, perUser: Int = 64, perIssuer: Int = 1_000, total: Int = 100_000) {
            self.perKey = perKey
            self.perUser = perUser
            self.perIssuer = perIssuer
            self.total = total
        }
    }

    /// How many attested keys the service keeps parsed in memory, and for how long
    /// (<doc:RunningTheVerificationService>, “The key cache”).
    ///
    /// A cached key saves the store's read and the key's parsing on the next assertion; the store stays the
    /// authority on counters and revocations, so the age bounds only how late this process sees a revocation or a
    /// receipt made by another one (its own show at once). A full cache evicts its least recently used key, one per
    /// new key, in constant time. Each entry holds the key's record (its receipt included: about 1 KiB plus the
    /// receipt, which is up to about 4 KiB for a real device) and its parsed public key.
    public struct KeyCacheLimits: Sendable, Hashable {
        /// The most keys kept (0 turns the cache off).
        public var capacity: Int
        /// The most seconds a key is used as read, before the store is read again.
        public var maximumAge: TimeInterval

        /// - Parameters:
        ///   - capacity: the most keys kept (10,000 by default; 0 turns the cache off; negative values are 0).
        ///   - maximumAge: seconds a key is used as read (30 by default, at least 0).
        public init(capacity: Int = 10_000, maximumAge: TimeInterval = 30) {
            self.capacity = max(0, capacity)
            self.maximumAge = maximumAge.isFinite ? max(0, maximumAge) : 0
        }
    }

    /// A service over a store.
    /// - Parameters:
    ///   - verifier: the verifier, configured once.
    ///   - store: where challenges, keys and counters are kept.
    ///   - challengeLifetime: how long a challenge stays usable, in seconds.
    ///   - challengeLimits: how many unused challenges may be outstanding.
    ///   - receiptValidator: validates the receipt of each new attestation when given.
    ///   - counterPolicy: which assertion counters are accepted (strictly increasing by default).
    ///   - keyCacheLimits: how many parsed keys are kept in memory, and for how long.
    ///   - now: the clock (tests move it).
    public init(
        verifier: AppAttestVerifier, store: any AppAttestStore, challengeLifetime: TimeInterval = 300,
        challengeLimits: ChallengeLimits = ChallengeLimits(), receiptValidator: AppAttestReceiptValidator? = nil,
        counterPolicy: CounterPolicy = .strictlyIncreasing, keyCacheLimits: KeyCacheLimits = KeyCacheLimits(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
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
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `keyRevoked`, `invalidUserID`, `tooManyChallenges`,
    ///   `storeUnavailable`.
    public func issueChallenge(purpose: String, keyID: KeyID? = nil, userID: String? = nil, issuer: String? = nil)
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
    /// - Throws: ``AppAttestServiceError``.
    public func registerAttestation(
        _ attestationObject: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String? = nil
    ) async throws(AppAttestServiceError) -> KeyRecord {
        try Self.checkUserID(userID)
        try await consume(challenge, purpose: Purpose.attestation, keyID: keyID, userID: userID)
        let attested: VerifiedAttestation
        do { attested = try verifier.verifyAttestation(attestationObject, keyID: keyID, challenge: challenge) } catch {
            throw AppAttestServiceError(.verificationFailed, error.reason, verification: error)
        }
        var riskMetric: Int?
        if let receiptValidator {
            do {
                riskMetric = try receiptValidator.validate(attested.receipt, expecting: .attestation(attested))
                    .riskMetric
            } catch {
                throw AppAttestServiceError(.verificationFailed, "receipt: \(error.reason)", verification: error)
            }
        }
        let time = now()
        let record = KeyRecord(
            keyID: keyID, userID: userID, appID: attested.appID, environment: attested.environment,
            publicKey: attested.publicKey.x963Representation, counter: 0, receipt: attested.receipt,
            riskMetric: riskMetric,
            createdAt: time, receiptUpdatedAt: time, revokedAt: nil)
        let insertion = try await run { () async throws(StoreError) -> KeyInsertion in try await store.insertKey(record)
        }
        if case .duplicate(let existing) = insertion {
            // A key belongs to one user (“Verifying attestations”); re-registering it is a replay either way.
            if existing.userID != userID {
                throw AppAttestServiceError(.keyBoundToAnotherUser, "this key is registered to another user")
            }
            throw AppAttestServiceError(.keyAlreadyRegistered, "this key is already registered")
        }
        keyCache.insert(record, publicKey: attested.publicKey)
        return record
    }

    /// Verifies an assertion with the stored key and counter, consumes the challenge it carries when one is
    /// given, and advances the counter atomically: of several concurrent assertions with the same counter,
    /// exactly one is accepted.
    /// - Parameters:
    ///   - assertion: the CBOR bytes from `generateAssertion`.
    ///   - clientData: the exact bytes the app hashed, and the challenge they bind, if any, at its defined place
    ///     (``AppAttestClientData``); the challenge must have been issued for ``Purpose/assertion``.
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
        try await authenticate(assertion, clientData: try AppAttestClientData.opaque(clientData), keyID: keyID)
    }

    private func authenticate(
        _ assertion: [UInt8], clientData binding: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool = false
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        let clientData = binding.bytes
        // The key's immutable parts (point, App ID, user) come from a short-lived cache when they can: the store's
        // conditional update below is what decides, so a stale counter or a revocation made elsewhere cannot let
        // an assertion through; it only means the refusal is found there instead of here.
        let entry = try await liveKey(keyID)
        // The environment policy applies now, not only when the key was attested: an App ID reconfigured for
        // production only stops accepting its development keys at once.
        guard verifier.configuration.apps[entry.record.appID]?.contains(entry.record.environment) == true else {
            throw AppAttestServiceError(
                .environmentNotAllowed,
                "\(entry.record.environment.rawValue) keys are not allowed for \(entry.record.appID)")
        }
        // With a reorder window, counters below the highest are acceptable: the verifier checks the lowest one the
        // window could accept, and the store decides exactly.
        let window = UInt32(counterPolicy.window)
        let floor = entry.counter >= window ? entry.counter - window : 0
        let verified: VerifiedAssertion
        do {
            verified = try verifier.verifyAssertion(
                assertion, clientData: clientData, publicKey: entry.publicKey, appID: entry.record.appID,
                previousCounter: window > 1 ? floor : entry.counter)
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
            keyID: keyID, counter: verified.counter, window: counterPolicy.window, challenge: use, nextChallenge: next)
        // Group commit: concurrent acceptances share one store transaction (AcceptanceBatcher).
        let outcome = try await run { () async throws(StoreError) -> AssertionAcceptanceOutcome in
            try await batcher.accept(acceptance)
        }
        switch outcome {
        case .accepted(let highest):
            keyCache.advance(keyID, to: highest)
            var updated = entry.record
            updated.counter = highest
            return AuthenticatedAssertion(
                key: updated, assertion: verified,
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
    private func liveKey(_ keyID: KeyID) async throws(AppAttestServiceError) -> KeyCache.Entry {
        if let cached = keyCache.entry(keyID) { return cached }
        guard let record = try await run({ () async throws(StoreError) -> KeyRecord? in try await store.key(keyID) })
        else {
            throw AppAttestServiceError(.unknownKey, "no key \(keyID)")
        }
        guard record.revokedAt == nil else { throw AppAttestServiceError(.keyRevoked, "key \(keyID) was revoked") }
        let publicKey: AttestedPublicKey
        do { publicKey = try AttestedPublicKey(x963Representation: record.publicKey) } catch {
            throw AppAttestServiceError(.verificationFailed, error.reason, verification: error)
        }
        return keyCache.insert(record, publicKey: publicKey)
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

    /// Revokes a key: its assertions are refused from now on.
    public func revokeKey(_ keyID: KeyID) async throws(AppAttestServiceError) -> Bool {
        keyCache.remove(keyID)
        let time = now()
        return try await run { () async throws(StoreError) -> Bool in try await store.revokeKey(keyID, at: time) }
    }

    /// Stores a new receipt for a key (after a refresh).
    public func updateReceipt(_ keyID: KeyID, receipt: AppAttestReceipt) async throws(AppAttestServiceError) -> Bool {
        keyCache.remove(keyID)
        let time = now()
        return try await run { () async throws(StoreError) -> Bool in
            try await store.updateReceipt(
                keyID, receipt: receipt.rawRepresentation, riskMetric: receipt.riskMetric, at: time)
        }
    }

    /// The keys of a user (reinstalls and restores rotate keys, so a user may have several, “Security model”).
    public func keys(forUser userID: String) async throws(AppAttestServiceError) -> [KeyRecord] {
        try Self.checkUserID(userID)
        return try await run { () async throws(StoreError) -> [KeyRecord] in try await store.keys(forUser: userID) }
    }

    /// Deletes expired challenges.
    public func purgeExpiredChallenges() async throws(AppAttestServiceError) -> Int {
        let time = now()
        return try await run { () async throws(StoreError) -> Int in try await store.purgeExpiredChallenges(now: time) }
    }

    // MARK: Helpers

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

    private func run<T>(_ body: () async throws(StoreError) -> T) async throws(AppAttestServiceError) -> T {
        do { return try await body() } catch {
            throw AppAttestServiceError(.storeUnavailable, error.description)
        }
    }
}
