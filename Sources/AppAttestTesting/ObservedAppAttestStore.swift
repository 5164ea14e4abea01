package import AppAttest
package import AppAttestStore
package import Foundation

/// A store that forwards every operation to another, calling a hook before each batch of acceptances, around each
/// read of keys by keyId, and at close: for the package's tests that watch, slow down or count what a store is asked.
package struct ObservedAppAttestStore: AppAttestStore {
    /// The store that answers.
    package let inner: any AppAttestStore
    /// Called with each batch before `inner` accepts it.
    package let willAcceptBatch: @Sendable ([AssertionAcceptance]) async -> Void
    /// Called with the keyIds of each `keys(withIDs:)` before `inner` reads them, and again with nil when it has.
    package let aroundKeyRead: @Sendable ([KeyID]?) async -> Void
    /// Called at `close()`, after `inner` is closed.
    package let didClose: @Sendable () async -> Void
    /// Called with the keyId of each `key(_:)` before `inner` reads it.
    package let willReadKey: @Sendable (KeyID) async -> Void

    package init(
        _ inner: any AppAttestStore,
        willAcceptBatch: @escaping @Sendable ([AssertionAcceptance]) async -> Void = { _ in },
        aroundKeyRead: @escaping @Sendable ([KeyID]?) async -> Void = { _ in },
        didClose: @escaping @Sendable () async -> Void = {},
        willReadKey: @escaping @Sendable (KeyID) async -> Void = { _ in }
    ) {
        self.inner = inner
        self.willAcceptBatch = willAcceptBatch
        self.aroundKeyRead = aroundKeyRead
        self.didClose = didClose
        self.willReadKey = willReadKey
    }

    package func acceptAssertions(_ batch: [AssertionAcceptance]) async throws(StoreError)
        -> [AssertionAcceptanceOutcome]
    {
        await willAcceptBatch(batch)
        return try await inner.acceptAssertions(batch)
    }
    package func close() async {
        await inner.close()
        await didClose()
    }
    package func insertChallenge(_ record: ChallengeRecord) async throws(StoreError) {
        try await inner.insertChallenge(record)
    }
    package func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        async throws(StoreError) -> ChallengeRecord?
    { try await inner.consumeChallenge(challenge, purpose: purpose, keyID: keyID, userID: userID) }
    package func challenge(_ challenge: [UInt8]) async throws(StoreError) -> ChallengeRecord? {
        try await inner.challenge(challenge)
    }
    package func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int {
        try await inner.outstandingChallenges(keyID: keyID, userID: userID, now: now)
    }
    package func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int {
        try await inner.outstandingChallenges(issuer: issuer, now: now)
    }
    package func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date)
        async throws(StoreError)
    { try await inner.insertChallenge(record, keepingAtMost: limit, now: now) }
    package func purgeExpiredChallenges(now: Date) async throws(StoreError) -> Int {
        try await inner.purgeExpiredChallenges(now: now)
    }
    package func insertKey(_ record: KeyRecord, maximumKeysPerUser: Int?) async throws(StoreError) -> KeyInsertion {
        try await inner.insertKey(record, maximumKeysPerUser: maximumKeysPerUser)
    }
    package func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        await willReadKey(keyID)
        return try await inner.key(keyID)
    }
    package func keys(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] {
        await aroundKeyRead(keyIDs)
        do {
            let records = try await inner.keys(withIDs: keyIDs)
            await aroundKeyRead(nil)
            return records
        } catch {
            await aroundKeyRead(nil)
            throw error
        }
    }
    package func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord] {
        try await inner.keys(forUser: userID)
    }
    package func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError)
        -> AssertionAcceptanceOutcome
    { try await inner.acceptAssertion(acceptance) }
    package func revokeKey(_ keyID: KeyID, at time: Date, reason: String?) async throws(StoreError) -> Bool {
        try await inner.revokeKey(keyID, at: time, reason: reason)
    }
    package func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date)
        async throws(StoreError)
        -> Bool
    { try await inner.updateReceipt(keyID, receipt: receipt, riskMetric: riskMetric, at: time) }
    package func appendKeyEvent(_ event: KeyEvent) async throws(StoreError) { try await inner.appendKeyEvent(event) }
    package func keyEvents(_ keyID: KeyID, limit: Int) async throws(StoreError) -> [KeyEvent] {
        try await inner.keyEvents(keyID, limit: limit)
    }
    package func purgeKeyEvents(before time: Date, batchSize limit: Int) async throws(StoreError) -> Int {
        try await inner.purgeKeyEvents(before: time, batchSize: limit)
    }
    package func takeToken(bucket name: String, rate: Double, burst: Double, now: Date) async throws(StoreError)
        -> TimeInterval?
    { try await inner.takeToken(bucket: name, rate: rate, burst: burst, now: now) }
}
