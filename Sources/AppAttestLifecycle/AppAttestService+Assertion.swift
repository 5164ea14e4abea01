public import AppAttest
import AppAttestStore
import Foundation

extension AppAttestService {
    /// Verifies an assertion with the stored key and counter, consumes the challenge it carries when one is
    /// given, and advances the counter atomically: of several concurrent assertions with the same counter,
    /// exactly one is accepted.
    /// - Parameters:
    ///   - assertion: the CBOR bytes from `generateAssertion`.
    ///   - clientData: the exact bytes the app hashed, and the challenge they bind, if any, at its defined place
    ///     (`AppAttestClientData`); the challenge must have been issued for ``Purpose/assertion``.
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
        let binding: AppAttestClientData
        do { binding = try AppAttestClientData.opaque(clientData) } catch {
            throw AppAttestServiceError(binding: error)
        }
        return try await authenticate(assertion, clientData: binding, keyID: keyID)
    }

    /// As ``authenticateAssertion(_:clientData:keyID:issuingNextChallenge:)``, for routes that serve some App IDs
    /// only: an assertion by a key of another App ID is refused `appIDNotServed` once its signature is verified,
    /// before its challenge or its counter is used, so that a request sent to the wrong routes costs its device
    /// nothing.
    package func authenticateAssertion(
        _ assertion: [UInt8], clientData: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool,
        servingAppIDs: Set<AppID>?
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        try await authenticate(
            assertion, clientData: clientData, keyID: keyID, issuingNextChallenge: issuingNextChallenge,
            servingAppIDs: servingAppIDs)
    }

    private func authenticate(
        _ assertion: [UInt8], clientData binding: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool = false,
        servingAppIDs: Set<AppID>? = nil
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        try await traced("appattest.assertion", keyID: keyID) { trace async throws(AppAttestServiceError) in
            try await authenticate(
                assertion, clientData: binding, keyID: keyID, issuingNextChallenge: issuingNextChallenge,
                servingAppIDs: servingAppIDs, trace: trace)
        }
    }

    private func authenticate(
        _ assertion: [UInt8], clientData binding: AppAttestClientData, keyID: KeyID, issuingNextChallenge: Bool,
        servingAppIDs: Set<AppID>?, trace: ServiceTrace?
    ) async throws(AppAttestServiceError) -> AuthenticatedAssertion {
        let clientData = binding.bytes
        // The key's immutable parts (point, App ID, user) come from a short-lived cache when they can: the store's
        // conditional update below is what decides, so a stale counter or a revocation made elsewhere cannot let
        // an assertion through; it only means the refusal is found there instead of here.
        let entry = try await step(trace, "appattest.key") { () async throws(AppAttestServiceError) in
            try await liveKey(keyID)
        }
        let key = entry.attestedKey
        trace?.appID(key.appID)
        // The environment policy applies now, not only when the key was attested: an App ID reconfigured for
        // production only stops accepting its development keys at once.
        guard verifier.configuration.apps[key.appID]?.contains(key.environment) == true else {
            await recordEnvironmentRefusal(key)
            throw AppAttestServiceError(
                .environmentNotAllowed, "\(key.environment.rawValue) keys are not allowed for \(key.appID)")
        }
        // The verifier admits the counter under the policy; the store's acceptance below applies the same policy
        // atomically, against the counters already used.
        let verified: VerifiedAssertion
        var timeline = trace.map { _ in VerificationTimeline() }
        defer { if let timeline { trace?.steps(timeline) } }
        do {
            verified = try verifier.verifyAssertion(
                assertion, clientData: clientData, key: key, counterPolicy: counterPolicy, timeline: &timeline)
        } catch {
            throw AppAttestServiceError(.verificationFailed, error.reason, verification: error)
        }
        // After the signature (only the key's holder learns whose key it is), before anything is used.
        if let servingAppIDs, !servingAppIDs.contains(key.appID) {
            throw AppAttestServiceError(.appIDNotServed, "\(key.appID) is not served here")
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
        // key's outstanding challenges never grow through next challenges, and an unreserved challenge, which the
        // total and its issuer's share bound, is never turned into a reserved one, which they do not.
        if issuingNextChallenge, let challenge = binding.challenge,
            try await run({ () async throws(StoreError) -> ChallengeRecord? in try await store.challenge(challenge) })?
                .keyID == keyID
        {
            next = ChallengeRecord(
                challenge: Self.randomChallenge(), purpose: Purpose.assertion, keyID: keyID, userID: nil,
                expiresAt: now().addingTimeInterval(challengeLifetime))
        }
        let acceptance = AssertionAcceptance(
            keyID: keyID, counter: verified.counter, counterPolicy: counterPolicy, challenge: use, nextChallenge: next)
        // Group commit: concurrent acceptances share one store transaction (AcceptanceBatcher).
        let generation = keyCache.generation(of: keyID)
        let outcome = try await step(trace, "appattest.acceptance") { () async throws(AppAttestServiceError) in
            try await run { () async throws(StoreError) -> AssertionAcceptanceOutcome in
                try await batcher.accept(acceptance)
            }
        }
        switch outcome {
        case .accepted(let highest):
            keyCache.advance(keyID, to: highest)
            var updated = entry.record
            updated.key.counter = highest
            return AuthenticatedAssertion(
                record: updated, assertion: verified,
                nextChallenge: next.map { IssuedChallenge(challenge: $0.challenge, expiresAt: $0.expiresAt) })
        case .unknownKey:
            keyCache.remove(keyID)
            throw AppAttestServiceError(.unknownKey, "no key \(keyID)")
        case .keyRevoked:
            // Remembered as revoked, so that its next assertions are refused before their signatures are checked.
            var revoked = entry.record
            revoked.revokedAt = now()
            throw await refusal(ofRevoked: revoked, readSince: generation)
        case .counterRefused(let highest):
            keyCache.advance(keyID, to: highest)
            // A key read without its counter (a cache miss on SQLite) was verified against none: the answer is the
            // one the verifier would have given with the stored highest, `counterNotIncreasing` for a counter the
            // policy does not admit against it. A known counter keeps the store's answer, as before.
            if !entry.counterKnown, !counterPolicy.admits(verified.counter, highest: highest) {
                let refusal = counterPolicy.refusal(verified.counter, highest: highest)
                throw AppAttestServiceError(.verificationFailed, refusal.reason, verification: refusal)
            }
            throw AppAttestServiceError(.counterReplayed, "counter \(verified.counter) was already used for this key")
        case .challengeRefused(let stored):
            throw Self.challengeRefusal(
                stored, purpose: Purpose.assertion, keyID: keyID, userID: entry.record.userID, now: now())
        }
    }
}
