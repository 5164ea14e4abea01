public import AppAttest
public import AppAttestStore
import Foundation

extension AppAttestService {
    /// Consumes the challenge, verifies the attestation against it and stores the key with counter 0.
    ///
    /// Posting the same key, object, challenge and user again answers the registered key, as the first time, however
    /// long after (while the key is registered and not revoked, its receipt the one the object carries, and the
    /// object's certificates still valid): an app whose answer was lost cannot attest the key again (a device attests
    /// each key once), so it sends the same attestation, perhaps at its next launch, days later. Nothing is stored
    /// twice; a caller that does something once per registration (a welcome credit, binding the device to an account)
    /// keys it on the keyId, as a second delivery of the first post would need anyway.
    /// - Throws: ``AppAttestServiceError``.
    public func registerAttestation(
        _ attestationObject: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String? = nil
    ) async throws(AppAttestServiceError) -> KeyRecord {
        try await traced("appattest.attestation", keyID: keyID) { trace async throws(AppAttestServiceError) in
            try await register(attestationObject, keyID: keyID, challenge: challenge, userID: userID, trace: trace)
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
                attestationObject, keyID: keyID, challenge: challenge, userID: userID, trace: trace)
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

    /// The key as this very attestation registered it, when the same key, object, challenge and user come again: an
    /// app posts its attestation again when the answer was lost, since the device cannot attest the key twice, and an
    /// app that was suspended mid-request posts it at its next launch, whenever that is. Only reached once the
    /// challenge is known to be used, and only for a key that exists and is not revoked: the object must verify against
    /// the challenge (its certificates valid now) and carry the receipt stored with the key, so that nothing but the
    /// first registration's own object gets its answer, and nothing changes.
    ///
    /// What a repost's check found is remembered by key for a few minutes (``RepostedAttestations``): the same body
    /// again is answered, and any other body for the key refused, without verifying a chain once more, so that a
    /// registration's body posted in a loop, altered or not, costs a read each, not a chain verification.
    private func registeredBefore(
        _ object: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String?, trace: ServiceTrace?
    ) async throws(AppAttestServiceError) -> KeyRecord? {
        guard let existing = try await run({ () async throws(StoreError) -> KeyRecord? in try await store.key(keyID) }),
            existing.revokedAt == nil, existing.userID == userID,
            // The receipt first (a parse, no signature checked): only the registration's own object goes further.
            (try? AttestationObject(cborEncoded: object))?.receipt == existing.receipt
        else { return nil }
        let digest = RepostedAttestations.digest(object, challenge: challenge, userID: userID)
        switch repostedAttestations.outcome(for: keyID) {
        case .verified(let verified): return verified == digest ? existing : nil
        case .failed: return nil
        case nil: break
        }
        var timeline = trace.map { _ in VerificationTimeline() }
        defer { if let timeline { trace?.steps(timeline) } }
        guard
            let attested = try? verifier.verifyAttestation(
                object, keyID: keyID, challenge: challenge, timeline: &timeline),
            attested.receipt == existing.receipt, attested.key.publicKey == existing.key.publicKey
        else {
            repostedAttestations.record(.failed, for: keyID)
            return nil
        }
        repostedAttestations.record(.verified(digest), for: keyID)
        return existing
    }
}
