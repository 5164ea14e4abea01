public import AppAttest
public import Foundation

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
    /// given, those reserved for one of the user's keys included), else in all.
    func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int

    /// How many challenges that expire after `now` were issued to `issuer` (``ChallengeRecord/issuer``).
    func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int

    /// Stores a new challenge reserved for a key (else for a user), first deleting that key's (user's) oldest
    /// unexpired challenges so that, with this one, at most `limit` are outstanding for it; in one transaction. A
    /// user's challenges are those reserved for the user and no key, with the record's issuer (none when it has none):
    /// one reserved for a key (whatever its user) counts against the key alone, and one another issuer asked for
    /// against that issuer, so that a caller reserving challenges for a user never evicts those of the user's keys,
    /// nor those another caller reserved for the user.
    /// A new challenge never fails for a key's or a user's limit, so that nobody else can lock a device out of
    /// challenges by asking for them; a record reserved for neither is stored as ``insertChallenge(_:)`` stores it.
    func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date) async throws(StoreError)

    /// Deletes challenges that expired before `now`; returns how many.
    func purgeExpiredChallenges(now: Date) async throws(StoreError) -> Int

    /// Inserts a key unless its keyId is already stored, with its ``KeyEvent/Kind/attested`` event. When it is
    /// inserted with a user and `maximumKeysPerUser` is given, that user's oldest active keys of the same App ID beyond
    /// the limit (the new one counted) are revoked, each with a ``KeyEvent/Kind/superseded`` event; all in one
    /// transaction, serialized per user and App ID, so that concurrent registrations never leave more than the limit
    /// active.
    func insertKey(_ record: KeyRecord, maximumKeysPerUser: Int?) async throws(StoreError) -> KeyInsertion

    /// The key with this id.
    func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord?

    /// The keys bound to a user, oldest first.
    func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord]

    /// The stored keys among `keyIDs`, in no particular order (an id with no key has no record), read in one
    /// statement where the store can: the service reads the keys of concurrent cache misses together.
    func keys(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord]

    /// Accepts a verified assertion in one transaction: the counter is recorded (above the highest, or, with a
    /// window above 1, a counter not yet accepted within it) only if the key exists and is not revoked and the
    /// challenge, when given, is unexpired and usable by this key and user, in which case it is consumed. Exactly one
    /// of several concurrent calls with the same counter, or the same challenge, succeeds. On a refusal nothing
    /// changes.
    func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError) -> AssertionAcceptanceOutcome

    /// Marks a key revoked, with a ``KeyEvent/Kind/revoked`` event carrying `reason`, in one transaction; returns
    /// whether it was active (nothing is written when it was not).
    func revokeKey(_ keyID: KeyID, at time: Date, reason: String?) async throws(StoreError) -> Bool

    /// Accepts several verified assertions in one transaction (group commit), each exactly as
    /// ``acceptAssertion(_:)`` would, in order: the outcomes are in the same order. A store error fails them all and
    /// changes nothing.
    func acceptAssertions(_ batch: [AssertionAcceptance]) async throws(StoreError) -> [AssertionAcceptanceOutcome]

    /// Releases the store's connections or files; the store is not used afterwards. Frameworks call it at shutdown.
    func close() async

    /// Replaces a key's receipt, with a ``KeyEvent/Kind/receiptRefreshed`` event, in one transaction; returns whether
    /// the key exists and is not revoked (a revoked key's receipt is not replaced: its events end with why it is
    /// refused).
    func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date) async throws(StoreError)
        -> Bool

    // MARK: Fleet operations

    /// Appends an event that goes with no change of the store (an attestation refused, a key of an environment no
    /// longer allowed).
    func appendKeyEvent(_ event: KeyEvent) async throws(StoreError)

    /// The latest `limit` events of a key, oldest first.
    func keyEvents(_ keyID: KeyID, limit: Int) async throws(StoreError) -> [KeyEvent]

    /// Deletes the events that happened before `time` (the audit trail's retention), in batches of at most `limit`
    /// each a transaction of its own, until none is left; returns how many. A key's revocations (``KeyEvent/Kind/revoked``,
    /// ``KeyEvent/Kind/superseded``) are kept: they say why the key is refused.
    func purgeKeyEvents(before time: Date, batchSize limit: Int) async throws(StoreError) -> Int

    /// Takes one token from the bucket `name`, which refills at `rate` tokens per second up to `burst`, atomically
    /// for every process that shares this store (a fleet's budget, not one instance's).
    /// - Returns: nil when a token was taken; else the seconds until one is available (nothing is taken).
    func takeToken(bucket name: String, rate: Double, burst: Double, now: Date) async throws(StoreError)
        -> TimeInterval?
}

extension AppAttestStore {
    /// Inserts a key unless its keyId is already stored, superseding none.
    public func insertKey(_ record: KeyRecord) async throws(StoreError) -> KeyInsertion {
        try await insertKey(record, maximumKeysPerUser: nil)
    }

    /// Marks a key revoked without a reason; returns whether it was active.
    public func revokeKey(_ keyID: KeyID, at time: Date) async throws(StoreError) -> Bool {
        try await revokeKey(keyID, at: time, reason: nil)
    }

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

    /// One ``key(_:)`` after another, for stores without a read of several keys.
    public func keys(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        var records: [KeyRecord] = []
        for keyID in keyIDs {
            if let record = try await key(keyID) { records.append(record) }
        }
        return records
    }

    /// Nothing to release (the in-memory store, and stores that release everything when deallocated).
    public func close() async {}
}

/// A store whose key reads run on the calling thread (SQLite's reader, `keys(withIDs:)`): a read that waits (on a lock
/// another process holds, on a disk that does not answer) holds that thread, so a read started beside it would hold
/// another thread without helping. The service's key read batcher starts none beside a read that stalls on such a
/// store.
package protocol KeyReadsHoldTheCallingThread: AppAttestStore {}

/// A store that reads keys without their receipts: the service's assertion path, which never uses a receipt, reads
/// its keys this way. A real receipt is 3.6–4.0 KB, most of a key's bytes, and a fleet far larger than the key cache
/// reads a key for nearly every assertion (README, “Scale”): SQLite reads the other columns from an index that holds
/// them (never the row and its receipt), PostgreSQL leaves the receipt where it stores it out of line.
package protocol KeyReadsWithoutReceipts: AppAttestStore {
    /// The stored keys among `keyIDs`, as ``AppAttestStore/keys(withIDs:)`` reads them but each with an empty
    /// ``KeyRecord/receipt``.
    func keysWithoutReceipts(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord]
}

/// A store that keeps each key's counter and revocation apart from the key's unchanging columns (SQLite's
/// `key_counters`, whose pages every accepted assertion changes, so that a reader finds them changed at nearly every
/// read): the service's assertion path reads a key it does not hold from the unchanging columns alone. It verifies
/// the signature first, and the acceptance's atomic update decides the counter and the revocation in any case.
package protocol KeyReadsWithoutCounters: KeyReadsWithoutReceipts {
    /// The stored keys among `keyIDs`, as ``KeyReadsWithoutReceipts/keysWithoutReceipts(withIDs:)`` reads them but
    /// each with counter 0 and no revocation, whatever is stored.
    func keysWithoutCounters(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord]
}

/// A store whose operations give up after a bound (PostgreSQL's operation timeout, SQLite's busy timeout): the
/// service's batchers fail what has waited longer than that for its turn, rather than queue it behind a store that
/// stopped answering for as long as the outage lasts.
package protocol StoreOperationsAreBounded: AppAttestStore {
    /// How long one operation may take before the store gives up on it.
    var operationBound: Duration { get }
}

/// A store that counts the challenges reserved for no key apart: the service bounds those by its total
/// (``ChallengeLimits``), since each reserved for a key is bounded by the key's own limit. Counted with the others, a
/// fleet whose devices each hold a challenge (the next-challenge mode) filled the total, and every registration's
/// challenge was refused.
package protocol CountsUnreservedChallenges: AppAttestStore {
    /// How many challenges that expire after `now` are reserved for no key.
    func outstandingUnreservedChallenges(now: Date) async throws(StoreError) -> Int
}
