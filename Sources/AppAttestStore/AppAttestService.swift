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
        /// Too many unused challenges are outstanding for this key, this user, or in all
        /// (``AppAttestService/ChallengeLimits``).
        public static let tooManyChallenges = Code("tooManyChallenges")
        /// The client data's binding is malformed: a method or path that cannot be bound, a challenge of a size the
        /// service never issues, client data too large (``AppAttestClientData``).
        public static let malformedBinding = Code("malformedBinding")
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
    private let keyCache = KeyCache()
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
        /// Reserved for one key.
        public var perKey: Int
        /// Reserved for one user.
        public var perUser: Int
        /// In all (challenges reserved for nobody are bounded by this alone).
        public var total: Int

        /// - Parameters:
        ///   - perKey: reserved for one key (16 by default).
        ///   - perUser: reserved for one user (64 by default).
        ///   - total: in all (100,000 by default).
        public init(perKey: Int = 16, perUser: Int = 64, total: Int = 100_000) {
            self.perKey = perKey
            self.perUser = perUser
            self.total = total
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
    ///   - now: the clock (tests move it).
    public init(
        verifier: AppAttestVerifier, store: any AppAttestStore, challengeLifetime: TimeInterval = 300,
        challengeLimits: ChallengeLimits = ChallengeLimits(), receiptValidator: AppAttestReceiptValidator? = nil,
        counterPolicy: CounterPolicy = .strictlyIncreasing, now: @escaping @Sendable () -> Date = { Date() }
    ) {
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

    /// ``challengeSize`` bytes from the system's cryptographic generator.
    static func randomChallenge() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<challengeSize).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// Issues a one-time challenge.
    /// - Parameters:
    ///   - purpose: ``Purpose/attestation``, ``Purpose/assertion``, or one of yours.
    ///   - keyID: reserve it for one key (assertions).
    ///   - userID: reserve it for one user.
    public func issueChallenge(purpose: String, keyID: KeyID? = nil, userID: String? = nil)
        async throws(AppAttestServiceError)
        -> IssuedChallenge
    {
        let time = now()
        let (limit, scope) =
            keyID != nil
            ? (challengeLimits.perKey, "this key")
            : userID != nil ? (challengeLimits.perUser, "this user") : (challengeLimits.total, "this server")
        let outstanding = try await run { () async throws(StoreError) -> Int in
            try await store.outstandingChallenges(keyID: keyID, userID: userID, now: time)
        }
        guard outstanding < limit else {
            throw AppAttestServiceError(.tooManyChallenges, "\(limit) unused challenges are outstanding for \(scope)")
        }
        let bytes = Self.randomChallenge()
        let expiresAt = time.addingTimeInterval(challengeLifetime)
        try await run { () async throws(StoreError) in
            try await store.insertChallenge(
                ChallengeRecord(challenge: bytes, purpose: purpose, keyID: keyID, userID: userID, expiresAt: expiresAt))
        }
        return IssuedChallenge(challenge: bytes, expiresAt: expiresAt)
    }

    /// Consumes the challenge, verifies the attestation against it and stores the key with counter 0.
    /// - Throws: ``AppAttestServiceError``.
    public func registerAttestation(
        _ attestationObject: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String? = nil
    ) async throws(AppAttestServiceError) -> KeyRecord {
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
    ///     counter, for the app's next request (``AuthenticatedAssertion/nextChallenge``).
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
        let entry: KeyCache.Entry
        if let cached = keyCache.entry(keyID) {
            entry = cached
        } else {
            guard
                let record = try await run({ () async throws(StoreError) -> KeyRecord? in try await store.key(keyID) })
            else {
                throw AppAttestServiceError(.unknownKey, "no key \(keyID)")
            }
            guard record.revokedAt == nil else { throw AppAttestServiceError(.keyRevoked, "key \(keyID) was revoked") }
            let publicKey: AttestedPublicKey
            do { publicKey = try AttestedPublicKey(x963Representation: record.publicKey) } catch {
                throw AppAttestServiceError(.verificationFailed, error.reason, verification: error)
            }
            entry = keyCache.insert(record, publicKey: publicKey)
        }
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
        if issuingNextChallenge {
            // Reserved for this key, and replacing the one consumed: the key's outstanding challenges do not grow.
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
        try await run { () async throws(StoreError) -> [KeyRecord] in try await store.keys(forUser: userID) }
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

/// Keys as last read, with their parsed points, for at most ``maximumAge`` seconds (so that a receipt refreshed or
/// a key revoked by another process shows within that time; this process's own changes show at once) and at most
/// ``limit`` entries. Only an optimisation: the store's atomic update is the authority on counters and revocation.
final class KeyCache: Sendable {
    /// A key as read: its record (whose counter is the one read), its parsed point, and when it was read. Shared by
    /// reference, so that a lookup copies one reference, not the record's fields.
    final class Key: Sendable {
        let record: KeyRecord
        let publicKey: AttestedPublicKey
        let fetchedAt: TimeInterval

        init(record: KeyRecord, publicKey: AttestedPublicKey, fetchedAt: TimeInterval) {
            self.record = record
            self.publicKey = publicKey
            self.fetchedAt = fetchedAt
        }
    }

    /// A cached key and the highest counter this process knows for it.
    struct Entry: Sendable {
        let key: Key
        var counter: UInt32

        var record: KeyRecord { key.record }
        var publicKey: AttestedPublicKey { key.publicKey }
    }

    private let entries = Mutex<[KeyID: Entry]>([:])
    static let limit = 10_000
    static let maximumAge: TimeInterval = 30

    private static var uptime: TimeInterval { ProcessInfo.processInfo.systemUptime }

    func entry(_ keyID: KeyID) -> Entry? {
        let now = Self.uptime
        return entries.withLock { entries in
            guard let entry = entries[keyID] else { return nil }
            guard now - entry.key.fetchedAt < Self.maximumAge else {
                entries[keyID] = nil
                return nil
            }
            return entry
        }
    }

    @discardableResult
    func insert(_ record: KeyRecord, publicKey: AttestedPublicKey) -> Entry {
        let entry = Entry(
            key: Key(record: record, publicKey: publicKey, fetchedAt: Self.uptime), counter: record.counter)
        entries.withLock { entries in
            if entries.count >= Self.limit { entries.removeAll(keepingCapacity: true) }
            entries[record.keyID] = entry
        }
        return entry
    }

    /// Records a counter this process stored, so that its own replays are refused before the store is asked.
    func advance(_ keyID: KeyID, to counter: UInt32) {
        entries.withLock { entries in
            guard let index = entries.index(forKey: keyID) else { return }
            if entries.values[index].counter < counter { entries.values[index].counter = counter }
        }
    }

    func remove(_ keyID: KeyID) {
        _ = entries.withLock { $0.removeValue(forKey: keyID) }
    }
}
