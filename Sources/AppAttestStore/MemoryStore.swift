public import AppAttest
public import Foundation

/// An in-memory store for tests and single-process use: an actor, so that every operation is atomic.
public actor MemoryAppAttestStore: AppAttestStore, CountsUnreservedChallenges {
    private var challenges: [[UInt8]: ChallengeRecord] = [:]
    private var keys: [KeyID: KeyRecord] = [:]
    /// Counters accepted below the highest, for the reorder window (``AssertionAcceptance/advance(highest:seen:counter:window:)``).
    private var seen: [KeyID: UInt64] = [:]
    private var events: [KeyID: [KeyEvent]] = [:]
    private var buckets: [String: (tokens: Double, updatedAt: Date)] = [:]

    /// An empty store.
    public init() {}

    public func insertChallenge(_ record: ChallengeRecord) throws(StoreError) {
        challenges[record.challenge] = record
    }

    public func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date) throws(StoreError) {
        let sameOwner: (ChallengeRecord) -> Bool
        if let keyID = record.keyID {
            sameOwner = { $0.keyID == keyID }
        } else if let userID = record.userID {
            sameOwner = { $0.keyID == nil && $0.userID == userID && $0.issuer == record.issuer }
        } else {
            return try insertChallenge(record)
        }
        let outstanding = challenges.values.filter { sameOwner($0) && $0.expiresAt > now }
            .sorted { $0.expiresAt > $1.expiresAt }
        for old in outstanding.dropFirst(max(0, limit - 1)) { challenges.removeValue(forKey: old.challenge) }
        challenges[record.challenge] = record
    }

    public func outstandingChallenges(issuer: String, now: Date) throws(StoreError) -> Int {
        challenges.values.reduce(0) { $1.issuer == issuer && $1.expiresAt > now ? $0 + 1 : $0 }
    }

    public func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        throws(StoreError) -> ChallengeRecord?
    {
        guard let record = challenges[challenge], record.purpose == purpose,
            record.keyID == nil || record.keyID == keyID, record.userID == nil || record.userID == userID
        else { return nil }
        return challenges.removeValue(forKey: challenge)
    }

    public func challenge(_ challenge: [UInt8]) throws(StoreError) -> ChallengeRecord? {
        challenges[challenge]
    }

    public func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) throws(StoreError) -> Int {
        challenges.values.reduce(0) { count, record in
            guard record.expiresAt > now else { return count }
            if let keyID { return record.keyID == keyID ? count + 1 : count }
            if let userID { return record.userID == userID ? count + 1 : count }
            return count + 1
        }
    }

    package func outstandingUnreservedChallenges(now: Date) throws(StoreError) -> Int {
        challenges.values.reduce(0) { $1.keyID == nil && $1.expiresAt > now ? $0 + 1 : $0 }
    }

    public func purgeExpiredChallenges(now: Date) throws(StoreError) -> Int {
        let expired = challenges.filter { $0.value.expiresAt < now }.map(\.key)
        for challenge in expired { challenges.removeValue(forKey: challenge) }
        return expired.count
    }

    public func insertKey(_ record: KeyRecord, maximumKeysPerUser: Int?) throws(StoreError) -> KeyInsertion {
        if let existing = keys[record.keyID] { return .duplicate(existing) }
        keys[record.keyID] = record
        events[record.keyID, default: []].append(KeyEvent(keyID: record.keyID, kind: .attested, time: record.createdAt))
        var superseded: [KeyID] = []
        if let userID = record.userID, let limit = maximumKeysPerUser {
            let others = keys.values.filter {
                $0.userID == userID && $0.key.appID == record.key.appID && $0.revokedAt == nil
                    && $0.keyID != record.keyID
            }
            .sorted { ($0.createdAt, $0.keyID.base64EncodedString) > ($1.createdAt, $1.keyID.base64EncodedString) }
            for old in others.dropFirst(max(0, limit - 1)) {
                keys[old.keyID]?.revokedAt = record.createdAt
                events[old.keyID, default: []].append(
                    KeyEvent(
                        keyID: old.keyID, kind: .superseded, time: record.createdAt,
                        detail: record.keyID.base64EncodedString))
                superseded.append(old.keyID)
            }
        }
        return .inserted(superseding: superseded)
    }

    public func key(_ keyID: KeyID) throws(StoreError) -> KeyRecord? { keys[keyID] }

    public func keys(withIDs keyIDs: [KeyID]) throws(StoreError) -> [KeyRecord] { keyIDs.compactMap { keys[$0] } }

    public func keys(forUser userID: String) throws(StoreError) -> [KeyRecord] {
        keys.values.filter { $0.userID == userID }.sorted { $0.createdAt < $1.createdAt }
    }

    public func acceptAssertion(_ acceptance: AssertionAcceptance) throws(StoreError) -> AssertionAcceptanceOutcome {
        guard var record = keys[acceptance.keyID] else { return .unknownKey }
        guard record.revokedAt == nil else { return .keyRevoked }
        if let use = acceptance.challenge {
            guard let stored = challenges[use.challenge] else { return .challengeRefused(nil) }
            guard stored.purpose == use.purpose, stored.keyID == nil || stored.keyID == acceptance.keyID,
                stored.userID == nil || stored.userID == use.userID, stored.expiresAt > use.now
            else { return .challengeRefused(stored) }
        }
        guard
            let (highest, mask) = acceptance.counterPolicy.advance(
                highest: record.key.counter, seen: seen[acceptance.keyID] ?? 0, counter: acceptance.counter)
        else { return .counterRefused(highestCounter: record.key.counter) }
        // The actor runs this to the end before any other call: both changes or neither.
        if let use = acceptance.challenge { challenges.removeValue(forKey: use.challenge) }
        if let next = acceptance.nextChallenge { challenges[next.challenge] = next }
        record.key.counter = highest
        keys[acceptance.keyID] = record
        seen[acceptance.keyID] = mask
        return .accepted(highestCounter: highest)
    }

    public func revokeKey(_ keyID: KeyID, at time: Date, reason: String?) throws(StoreError) -> Bool {
        guard var record = keys[keyID], record.revokedAt == nil else { return false }
        record.revokedAt = time
        keys[keyID] = record
        events[keyID, default: []].append(KeyEvent(keyID: keyID, kind: .revoked, time: time, detail: reason))
        return true
    }

    public func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date) throws(StoreError)
        -> Bool
    {
        guard var record = keys[keyID], record.revokedAt == nil else { return false }
        record.receipt = receipt
        record.riskMetric = riskMetric
        record.receiptUpdatedAt = time
        keys[keyID] = record
        events[keyID, default: []].append(
            KeyEvent(keyID: keyID, kind: .receiptRefreshed, time: time, detail: riskMetric.map { "\($0)" }))
        return true
    }

    public func appendKeyEvent(_ event: KeyEvent) throws(StoreError) {
        events[event.keyID, default: []].append(event)
    }

    public func keyEvents(_ keyID: KeyID, limit: Int) throws(StoreError) -> [KeyEvent] {
        Array((events[keyID] ?? []).suffix(max(0, limit)))
    }

    public func purgeKeyEvents(before time: Date, batchSize limit: Int) throws(StoreError) -> Int {
        var purged = 0
        for (keyID, list) in events {
            let kept = list.filter { $0.time >= time || KeyEvent.Kind.keptByPurge.contains($0.kind) }
            purged += list.count - kept.count
            events[keyID] = kept.isEmpty ? nil : kept
        }
        return purged
    }

    public func takeToken(bucket name: String, rate: Double, burst: Double, now: Date) throws(StoreError)
        -> TimeInterval?
    {
        let state = buckets[name] ?? (tokens: burst, updatedAt: now)
        let available = min(burst, state.tokens + max(0, now.timeIntervalSince(state.updatedAt)) * rate)
        guard available >= 1 else { return (1 - available) / rate }
        buckets[name] = (tokens: available - 1, updatedAt: max(state.updatedAt, now))
        return nil
    }
}
