public import AppAttest
public import AppAttestStore
import Foundation
import Synchronization

/// Asks Apple for a key's fresh receipt (`ReceiptRefreshClient` in `AppleDeviceAPI` does, with the team's provider
/// key), for ``AppAttestService/refreshReceipt(_:using:)``.
public protocol AppAttestReceiptRefresher: Sendable {
    /// Apple's answer for `key`'s receipt: a new receipt, not modified since the last one, or no data.
    /// - Throws: any error of the refresher (the service reports it as
    ///   ``AppAttestServiceError/Code/receiptRefreshFailed``, with the error as ``AppAttestServiceError/underlying``).
    func refreshReceipt(for key: KeyRecord) async throws -> AppAttestReceiptRefresh
}

/// What a receipt refresh found.
public enum AppAttestReceiptRefresh: Sendable, Hashable {
    /// A new receipt, validated, now stored for the key.
    case refreshed(AppAttestReceipt)
    /// Apple has nothing newer than the stored receipt.
    case notModified
    /// Apple has no data for the key.
    case noData
}

extension AppAttestService {
    /// The key as stored, revoked or not (the store is read, not the cache).
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `storeUnavailable`.
    public func key(_ keyID: KeyID) async throws(AppAttestServiceError) -> KeyRecord {
        guard let record = try await run({ () async throws(StoreError) -> KeyRecord? in try await store.key(keyID) })
        else { throw AppAttestServiceError(.unknownKey, "no key \(keyID)") }
        return record
    }

    /// The App ID a key was attested for: from the key cache when it holds the key (an App ID never changes), else
    /// from the store; for a caller's scope, checked before anything else is done with the key.
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `storeUnavailable`.
    public func appID(ofKey keyID: KeyID) async throws(AppAttestServiceError) -> AppID {
        if let cached = keyCache.entry(keyID) { return cached.record.key.appID }
        return try await key(keyID).key.appID
    }

    /// Revokes a key: its assertions are refused from now on, by this process at once and by others within the key
    /// cache's age (``KeyCacheLimits/maximumAge``). The revocation and its reason are written to the key's events in
    /// the same transaction.
    /// - Parameters:
    ///   - keyID: the key.
    ///   - reason: why, for the key's events (at most `KeyEvent.maximumDetailLength` bytes are kept).
    /// - Returns: whether the key was active (false: it was already revoked). A key that a newer key of its user
    ///   superseded (``AppAttestServiceError/Code/keySuperseded``, which asks its device to register again) is then
    ///   revoked by this decision, with its own event: it is refused `keyRevoked` from then on.
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `storeUnavailable`.
    @discardableResult
    public func revokeKey(_ keyID: KeyID, reason: String? = nil) async throws(AppAttestServiceError) -> Bool {
        keyCache.remove(keyID)
        let time = now()
        _ = try await key(keyID)
        let revoked = try await run { () async throws(StoreError) -> Bool in
            try await store.revokeKey(keyID, at: time, reason: reason)
        }
        if revoked {
            FleetMetrics.keyEvent(.revoked, metricsFactory)
        } else if try await supersession(keyID) {
            // The owner's decision outranks the limit's: the latest revocation event is what the refusal says.
            try await run { () async throws(StoreError) in
                try await store.appendKeyEvent(KeyEvent(keyID: keyID, kind: .revoked, time: time, detail: reason))
            }
            FleetMetrics.keyEvent(.revoked, metricsFactory)
        }
        // Again, for a refusal cached meanwhile with the earlier reason.
        keyCache.remove(keyID)
        return revoked
    }

    /// Stores a new receipt for a key (after a refresh made elsewhere).
    /// - Returns: whether the key exists and is not revoked (a revoked key's receipt is not replaced).
    /// - Throws: ``AppAttestServiceError``: `storeUnavailable`.
    public func updateReceipt(_ keyID: KeyID, receipt: AppAttestReceipt) async throws(AppAttestServiceError) -> Bool {
        keyCache.remove(keyID)
        let time = now()
        let updated = try await run { () async throws(StoreError) -> Bool in
            try await store.updateReceipt(
                keyID, receipt: receipt.rawRepresentation, riskMetric: receipt.riskMetric, at: time)
        }
        if updated { FleetMetrics.keyEvent(.receiptRefreshed, metricsFactory) }
        // Again, for a read that began before the write and cached the old record (its risk metric) meanwhile.
        keyCache.remove(keyID)
        return updated
    }

    /// Refreshes a key's receipt at Apple and stores a new one (<doc:RunningTheVerificationService>). Refreshes of
    /// one key that arrive while one is under way share its outcome: one call to Apple, and no older receipt stored
    /// over a newer one by two refreshes that finish out of order.
    /// - Throws: ``AppAttestServiceError``: `unknownKey`, `keyRevoked`, `keySuperseded`, `receiptRefreshFailed`
    ///   (Apple's or the refresher's error in ``AppAttestServiceError/underlying``), `storeUnavailable`.
    public func refreshReceipt(_ keyID: KeyID, using refresher: some AppAttestReceiptRefresher)
        async throws(AppAttestServiceError) -> AppAttestReceiptRefresh
    {
        let (refresh, started) = receiptRefreshes.running.withLock { running in
            if let refresh = running[keyID] { return (refresh, false) }
            // A task of its own: a caller that goes away does not cancel the others' refresh.
            let refresh = Task { () -> Result<AppAttestReceiptRefresh, AppAttestServiceError> in
                do throws(AppAttestServiceError) {
                    return .success(try await refreshAlone(keyID, using: refresher))
                } catch {
                    return .failure(error)
                }
            }
            running[keyID] = refresh
            return (refresh, true)
        }
        let outcome = await refresh.value
        if started { receiptRefreshes.running.withLock { $0[keyID] = nil } }
        return try outcome.get()
    }

    private func refreshAlone(_ keyID: KeyID, using refresher: some AppAttestReceiptRefresher)
        async throws(AppAttestServiceError) -> AppAttestReceiptRefresh
    {
        let generation = keyCache.generation(of: keyID)
        let record = try await key(keyID)
        guard record.revokedAt == nil else { throw await refusal(ofRevoked: record, readSince: generation) }
        let outcome: AppAttestReceiptRefresh
        do { outcome = try await refresher.refreshReceipt(for: record) } catch {
            throw AppAttestServiceError(.receiptRefreshFailed, "\(error)", underlying: error)
        }
        if case .refreshed(let receipt) = outcome { _ = try await updateReceipt(keyID, receipt: receipt) }
        return outcome
    }

    /// The keys of a user (reinstalls and restores rotate keys, so a user may have several, “Security model”).
    /// - Throws: ``AppAttestServiceError``: `invalidUserID`, `storeUnavailable`.
    public func keys(forUser userID: String) async throws(AppAttestServiceError) -> [KeyRecord] {
        try Self.checkUserID(userID)
        return try await run { () async throws(StoreError) -> [KeyRecord] in try await store.keys(forUser: userID) }
    }

    /// Whether the store answers a read within `deadline` (a readiness probe: shorter than requests' deadline, so
    /// that a load balancer learns quickly that this instance cannot serve).
    /// - Throws: ``AppAttestServiceError/Code/storeUnavailable``.
    public func checkStore(within deadline: Duration) async throws(AppAttestServiceError) {
        let store = store
        // A key that cannot exist: all zeros is not SHA-256 of a point in practice.
        let probe = KeyID.unassigned
        try await run { () async throws(StoreError) in
            _ = try await StoreDeadline.run(deadline, "the store") { () async throws(StoreError) -> KeyRecord? in
                try await store.key(probe)
            }
        }
    }
}

/// The receipt refreshes under way, by key (``AppAttestService/refreshReceipt(_:using:)``).
final class ReceiptRefreshes: Sendable {
    let running = Mutex<[KeyID: Task<Result<AppAttestReceiptRefresh, AppAttestServiceError>, Never>]>([:])
}
