public import AppAttest
public import AppAttestStore
public import Foundation

/// A store whose backend is down: every operation throws `StoreError.Kind.unavailable`. Use it to test that your
/// routes answer 503 (and never a verdict) when the database cannot answer.
public struct UnavailableAppAttestStore: AppAttestStore {
    /// A store that fails every operation.
    public init() {}

    private func fail() -> StoreError { StoreError(.unavailable, "connection refused") }

    public func insertChallenge(_ record: ChallengeRecord) async throws(StoreError) { throw fail() }
    public func consumeChallenge(_ challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?)
        async throws(StoreError) -> ChallengeRecord?
    { throw fail() }
    public func challenge(_ challenge: [UInt8]) async throws(StoreError) -> ChallengeRecord? { throw fail() }
    public func outstandingChallenges(keyID: KeyID?, userID: String?, now: Date) async throws(StoreError) -> Int {
        throw fail()
    }
    public func outstandingChallenges(issuer: String, now: Date) async throws(StoreError) -> Int { throw fail() }
    public func insertChallenge(_ record: ChallengeRecord, keepingAtMost limit: Int, now: Date)
        async throws(StoreError)
    { throw fail() }
    public func purgeExpiredChallenges(now: Date) async throws(StoreError) -> Int { throw fail() }
    public func insertKey(_ record: KeyRecord, maximumKeysPerUser: Int?) async throws(StoreError) -> KeyInsertion {
        throw fail()
    }
    public func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? { throw fail() }
    public func keys(forUser userID: String) async throws(StoreError) -> [KeyRecord] { throw fail() }
    public func keys(withIDs keyIDs: [KeyID]) async throws(StoreError) -> [KeyRecord] { throw fail() }
    public func acceptAssertion(_ acceptance: AssertionAcceptance) async throws(StoreError)
        -> AssertionAcceptanceOutcome
    { throw fail() }
    public func revokeKey(_ keyID: KeyID, at time: Date, reason: String?) async throws(StoreError) -> Bool {
        throw fail()
    }
    public func updateReceipt(_ keyID: KeyID, receipt: [UInt8], riskMetric: Int?, at time: Date)
        async throws(StoreError) -> Bool
    { throw fail() }
    public func appendKeyEvent(_ event: KeyEvent) async throws(StoreError) { throw fail() }
    public func keyEvents(_ keyID: KeyID, limit: Int) async throws(StoreError) -> [KeyEvent] { throw fail() }
    public func purgeKeyEvents(before time: Date, batchSize limit: Int) async throws(StoreError) -> Int { throw fail() }
    public func takeToken(bucket name: String, rate: Double, burst: Double, now: Date) async throws(StoreError)
        -> TimeInterval?
    { throw fail() }
}
