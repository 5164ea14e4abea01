public import AppAttest
public import Foundation

/// A one-time challenge as stored: random bytes bound to a purpose and, optionally, to a key or a user.
public struct ChallengeRecord: Sendable, Hashable {
    /// The random challenge bytes (at least 16, “Verifying assertions and counters”).
    public var challenge: [UInt8]
    /// What it may be used for, e.g. `attestation` or `assertion`.
    public var purpose: String
    /// The key it is reserved for, if any.
    public var keyID: KeyID?
    /// The user it is reserved for, if any.
    public var userID: String?
    /// When it stops being usable.
    public var expiresAt: Date
    /// Who asked for it (a caller's name, a client's address), so that what one issuer may hold is bounded
    /// (``AppAttestService/ChallengeLimits/perIssuer``); nil when not known. Stored, not returned by reads.
    public var issuer: String?

    /// A challenge record.
    public init(
        challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?, expiresAt: Date, issuer: String? = nil
    ) {
        self.challenge = challenge
        self.purpose = purpose
        self.keyID = keyID
        self.userID = userID
        self.expiresAt = expiresAt
        self.issuer = issuer
    }
}

/// An attested key as stored.
public struct KeyRecord: Sendable, Hashable {
    /// The key's identifier.
    public var keyID: KeyID
    /// The user the key is bound to; nil for keys registered without one.
    public var userID: String?
    /// The App ID it was attested for.
    public var appID: AppID
    /// The environment it was attested in.
    public var environment: AppAttestEnvironment
    /// The 65-byte uncompressed point.
    public var publicKey: [UInt8]
    /// The counter of the last accepted assertion (0 after attestation).
    public var counter: UInt32
    /// The latest receipt (from the attestation, then from refreshes).
    public var receipt: [UInt8]
    /// The risk metric of the latest receipt, when it carried one.
    public var riskMetric: Int?
    /// When it was registered.
    public var createdAt: Date
    /// When its receipt was last replaced.
    public var receiptUpdatedAt: Date
    /// When the key was revoked; a revoked key verifies nothing.
    public var revokedAt: Date?

    /// A key record.
    public init(
        keyID: KeyID, userID: String?, appID: AppID, environment: AppAttestEnvironment, publicKey: [UInt8],
        counter: UInt32, receipt: [UInt8], riskMetric: Int?, createdAt: Date, receiptUpdatedAt: Date, revokedAt: Date?
    ) {
        self.keyID = keyID
        self.userID = userID
        self.appID = appID
        self.environment = environment
        self.publicKey = publicKey
        self.counter = counter
        self.receipt = receipt
        self.riskMetric = riskMetric
        self.createdAt = createdAt
        self.receiptUpdatedAt = receiptUpdatedAt
        self.revokedAt = revokedAt
    }
}

/// A store failure that is not a verdict: the backend could not answer.
///
/// A struct with static members rather than an enum, so that new kinds can be added without breaking code that
/// handles the existing ones.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        /// A stable name for logs and metrics.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// The backend is unreachable or failed (adapters answer 503).
        public static let unavailable = Kind("unavailable")
        /// The stored data does not decode (a corrupted row, a schema from the future).
        public static let corrupted = Kind("corrupted")

        public var description: String { rawValue }
    }

    /// What kind of failure this is.
    public let kind: Kind
    /// What the backend said, for logs (never shown to clients).
    public let message: String
    /// The operation was abandoned at its deadline (``StoreDeadline``): what it did may still be applied, so it is not
    /// to be retried as if it had rolled back.
    package var timedOut = false

    /// A store failure.
    /// - Parameters:
    ///   - kind: what kind of failure this is.
    ///   - message: what the backend said.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "store \(kind.rawValue): \(message)" }
}

/// The outcome of inserting a key.
public enum KeyInsertion: Sendable, Hashable {
    case inserted
    /// The keyId is already stored; the existing record is returned.
    case duplicate(KeyRecord)
}

/// An assertion the service has verified, for the store to accept in one transaction: its counter, against the key's
/// stored counters, and the challenge its client data binds, if any, consumed at the same time. Either both happen or
/// neither does.
public struct AssertionAcceptance: Sendable, Hashable {
    /// The key that signed it.
    public var keyID: KeyID
    /// The assertion's counter.
    public var counter: UInt32
    /// How many counters, the highest accepted one included, may be accepted in any order, each at most once
    /// (``AppAttestService/CounterPolicy``): 1 accepts only counters above the highest (strictly increasing); at most
    /// 64.
    public var window: Int
    /// The challenge to consume, when the client data binds one.
    public var challenge: ChallengeUse?
    /// A new challenge to store with the acceptance (the next request's, returned with this one's response), in the
    /// same transaction; nothing is stored on a refusal.
    public var nextChallenge: ChallengeRecord?

    /// A challenge to consume with the counter.
    public struct ChallengeUse: Sendable, Hashable {
        /// The challenge's bytes.
        public var challenge: [UInt8]
        /// The purpose it must have been issued for.
        public var purpose: String
        /// The user of the key (a challenge reserved for a user is usable by that user's keys).
        public var userID: String?
        /// Challenges that expire at or before this instant are refused.
        public var now: Date

        /// A challenge use.
        public init(challenge: [UInt8], purpose: String, userID: String?, now: Date) {
            self.challenge = challenge
            self.purpose = purpose
            self.userID = userID
            self.now = now
        }
    }

    /// An acceptance to attempt.
    public init(
        keyID: KeyID, counter: UInt32, window: Int, challenge: ChallengeUse?, nextChallenge: ChallengeRecord? = nil
    ) {
        self.keyID = keyID
        self.counter = counter
        self.window = window
        self.challenge = challenge
        self.nextChallenge = nextChallenge
    }

    /// The largest window: the highest counter and the 63 below it (one 63-bit mask beside the counter).
    public static let maximumWindow = 64

    /// The window's mask of a key whose history below its highest counter is not known (a key stored before the
    /// window existed): every counter below the highest counts as used, all 63 bits set.
    package static let allBelowHighestSeen = Int64.max

    /// ``window`` as the stores apply it: at least 1 (strictly increasing), at most ``maximumWindow``.
    package var boundedWindow: Int { Self.bounded(window) }

    private static func bounded(_ window: Int) -> Int { min(max(window, 1), maximumWindow) }

    /// The counter state after accepting `counter` into (`highest`, `seen`), or nil when it is refused. Bit `d - 1` of
    /// `seen` records that `highest - d` was accepted, for `d` in 1...63; stores keep it beside the counter. This is
    /// the rule the SQL statements of the SQLite and PostgreSQL stores apply. A `window` below 1 is 1, above
    /// ``maximumWindow`` it is ``maximumWindow``.
    public static func advance(highest: UInt32, seen: UInt64, counter: UInt32, window: Int) -> (UInt32, UInt64)? {
        if counter > highest {
            let shift = UInt64(counter - highest)
            if shift >= 64 { return (counter, 0) }
            let kept = (seen & ((UInt64(1) << (63 - shift)) - 1)) << shift
            return (counter, kept | (UInt64(1) << (shift - 1)))
        }
        let distance = UInt64(highest - counter)
        guard distance >= 1, distance <= UInt64(bounded(window) - 1) else { return nil }
        let bit = UInt64(1) << (distance - 1)
        guard seen & bit == 0 else { return nil }
        return (highest, seen | bit)
    }
}

extension AssertionAcceptance {
    /// The rounds a batch of counter acceptances takes as `UPDATE … FROM` statements, which apply one input row per
    /// key: each round holds a key at most once and at most `maximumSize` acceptances, and a key's acceptances keep
    /// their order across rounds. `order` is the batch's indices in the order the statements take them.
    package static func rounds(_ batch: [AssertionAcceptance], order indices: [Int], maximumSize: Int = .max)
        -> [[Int]]
    {
        let size = max(maximumSize, 1)
        // The usual batch, a few distinct keys: one round, found without hashing.
        if indices.count <= min(size, 16) {
            var distinct = true
            search: for (position, index) in indices.enumerated() {
                for earlier in indices[..<position] where batch[earlier].keyID == batch[index].keyID {
                    distinct = false
                    break search
                }
            }
            if distinct { return indices.isEmpty ? [] : [indices] }
        }
        var rounds: [[Int]] = []
        var occurrences: [KeyID: Int] = [:]
        for index in indices {
            let round = occurrences[batch[index].keyID, default: 0]
            occurrences[batch[index].keyID] = round + 1
            if round == rounds.count { rounds.append([]) }
            rounds[round].append(index)
        }
        // A full round is split in place: its parts still hold each key once, and they run before the next round.
        return rounds.flatMap { round in
            stride(from: 0, to: round.count, by: size).map { Array(round[$0..<min($0 + size, round.count)]) }
        }
    }

    /// The outcomes, in the batch's order, of the acceptances the rounds' statements accepted (`accepted[round]`
    /// holds, for each acceptance of that round in its order, the key's highest counter after the round, or nil when
    /// the statement refused it); nil for the refused ones, which the store then explains.
    package static func acceptedOutcomes(
        _ batch: [AssertionAcceptance], rounds: [[Int]], accepted: [[Int64?]]
    ) -> [AssertionAcceptanceOutcome?] {
        var outcomes = [AssertionAcceptanceOutcome?](repeating: nil, count: batch.count)
        for (round, indices) in rounds.enumerated() {
            for (position, index) in indices.enumerated() {
                if let highest = accepted[round][position] {
                    outcomes[index] = .accepted(highestCounter: UInt32(clamping: highest))
                }
            }
        }
        return outcomes
    }
}

/// What the store did with an ``AssertionAcceptance``: on a refusal nothing changed, and the outcome says why.
public enum AssertionAcceptanceOutcome: Sendable, Hashable {
    /// The counter was recorded and the challenge, if any, consumed; the key's highest counter is now this.
    case accepted(highestCounter: UInt32)
    /// No such key.
    case unknownKey
    /// The key is revoked.
    case keyRevoked
    /// The challenge is unknown, used, expired, or not usable by this key: the stored record when there is one.
    case challengeRefused(ChallengeRecord?)
    /// The counter was already accepted, or is below the window.
    case counterRefused(highestCounter: UInt32)
}

/// State for App Attest with atomic operations only: challenges are consumed once, keys are
/// inserted uniquely, counters only move forward. No read-modify-write is left to the caller.
public protocol AppAttestStore: Sendable {
    /// Stores a new challenge.
    func insertChallenge(_ record: ChallengeRecord) async throws(StoreError)

    /// Removes the challenge and returns it, in one atomic step, when it may be used for `purpose` by `keyID` and
    /// `userID`: a challenge reserved for a key or a user is consumed only by that key or user, so that nobody else
    /// can burn it. nil when it is unknown, already consumed, or reserved for another purpose, key or user (it then
    /// stays). An expired challenge is removed and returned, and the caller refuses it.
    func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        async throws(StoreError) -> ChallengeRecord?

    /// The challenge, if it is stored (to say why a consumption was refused).
    func challenge(_ challenge: [UInt8]) async throws(StoreError) -> ChallengeRecord?

    /// How many challenges that expire after `now` are reserved for `keyID` (when given), else for `userID` (when
    /// given), else in all.
    func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int

    /// How many challenges that expire after `now` were issued to `issuer` (``ChallengeRecord/issuer``).
    func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int

    /// Stores a new challenge reserved for a key (else for a user), first deleting that key's (user's) oldest
    /// unexpired challenges so that, with this one, at most `limit` are outstanding for it; in one transaction. A new
    /// challenge never fails for a key's or a user's limit, so that nobody else can lock a device out of challenges by
    /// asking for them; a record reserved for neither is stored as ``insertChallenge(_:)`` stores it.
    func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date) async throws(StoreError)

    /// Deletes challenges that expired before `now`; returns how many.
    func purgeExpiredChallenges(now: Date) async throws(StoreError) -> Int

    /// Inserts a key unless its keyId is already stored.
    func insertKey(_ record: KeyRecord) async throws(StoreError) -> KeyInsertion

    /// The key with this id.
    func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord?

    /// The keys bound to a user, oldest first.
    func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord]

    /// Accepts a verified assertion in one transaction: the counter is recorded (above the highest, or, with a
    /// window above 1, a counter not yet accepted within it) only if the key exists and is not revoked and the
    /// challenge, when given, is unexpired and usable by this key and user, in which case it is consumed. Exactly one
    /// of several concurrent calls with the same counter, or the same challenge, succeeds. On a refusal nothing
    /// changes.
    func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError) -> AssertionAcceptanceOutcome

    /// Marks a key revoked; returns whether it was active.
    func revokeKey(_ keyID: KeyID, at time: Date) async throws(StoreError) -> Bool

    /// Accepts several verified assertions in one transaction (group commit), each exactly as
    /// ``acceptAssertion(_:)`` would, in order: the outcomes are in the same order. A store error fails them all and
    /// changes nothing.
    func acceptAssertions(_ batch: [AssertionAcceptance]) async throws(StoreError) -> [AssertionAcceptanceOutcome]

    /// Releases the store's connections or files; the store is not used afterwards. Frameworks call it at shutdown.
    func close() async

    /// Replaces a key's receipt; returns whether the key exists.
    func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date) async throws(StoreError)
        -> Bool
}

extension AppAttestStore {
    /// One ``acceptAssertion(_:)`` after another, for stores without a batched transaction (each is atomic; the
    /// batch as a whole is not).
    public func acceptAssertions(_ batch: [AssertionAcceptance]) async throws(StoreError)
        -> [AssertionAcceptanceOutcome]
    {
        var outcomes: [AssertionAcceptanceOutcome] = []
        outcomes.reserveCapacity(batch.count)
        for acceptance in batch { outcomes.append(try await acceptAssertion(acceptance)) }
        return outcomes
    }

    /// Nothing to release (the in-memory store, and stores that release everything when deallocated).
    public func close() async {}
}
