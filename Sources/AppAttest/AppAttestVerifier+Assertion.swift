internal import AppAttestCrypto
import Foundation

extension AppAttestVerifier {
    // MARK: Assertion

    /// Verifies an assertion made with a stored, attested key.
    ///
    /// The signature is ECDSA-SHA256 over nonce = SHA-256(authenticatorData ‖ SHA-256(clientData)), so the
    /// digest signed is SHA-256(nonce) (<doc:VerifyingAssertions>). Checking the challenge inside `clientData` is the
    /// caller's (<doc:VerifyingAssertions> step 6): do it after this returns, then store the new counter with a
    /// compare-and-set that applies the same `counterPolicy`.
    /// - Parameters:
    ///   - assertion: the CBOR bytes from `generateAssertion`.
    ///   - clientData: the exact bytes the app hashed.
    ///   - key: the key as stored after attestation, with its highest accepted counter; reuse the parsed value.
    ///   - counterPolicy: which counters are admitted (strictly increasing, Apple's rule, by default).
    /// - Throws: ``AppAttestError`` with the first failed check's code.
    public func verifyAssertion(
        _ assertion: some Collection<UInt8>, clientData: some Collection<UInt8>, key: AttestedKey,
        counterPolicy: CounterPolicy = .strictlyIncreasing
    ) throws(AppAttestError) -> VerifiedAssertion {
        try verifyAssertion(
            assertion, clientDataHash: AttestedPublicKey.clientDataHash(clientData), key: key,
            counterPolicy: counterPolicy)
    }

    /// ``verifyAssertion(_:clientData:key:counterPolicy:)``, marking each step's end in `timeline` when it is not nil.
    package func verifyAssertion(
        _ assertion: some Collection<UInt8>, clientData: some Collection<UInt8>, key: AttestedKey,
        counterPolicy: CounterPolicy, timeline: inout VerificationTimeline?
    ) throws(AppAttestError) -> VerifiedAssertion {
        try verifyAssertion(
            assertion, clientDataHash: AttestedPublicKey.clientDataHash(clientData), key: key,
            counterPolicy: counterPolicy, timeline: &timeline)
    }

    /// Verifies an assertion given SHA-256 of the client data rather than the data itself.
    /// - Throws: ``AppAttestError`` with the first failed check's code.
    public func verifyAssertion(
        _ assertion: some Collection<UInt8>, clientDataHash: some Collection<UInt8>, key: AttestedKey,
        counterPolicy: CounterPolicy = .strictlyIncreasing
    ) throws(AppAttestError) -> VerifiedAssertion {
        var timeline: VerificationTimeline?
        return try verifyAssertion(
            assertion, clientDataHash: clientDataHash, key: key, counterPolicy: counterPolicy, timeline: &timeline)
    }

    private func verifyAssertion(
        _ assertion: some Collection<UInt8>, clientDataHash: some Collection<UInt8>, key: AttestedKey,
        counterPolicy: CounterPolicy, timeline: inout VerificationTimeline?
    ) throws(AppAttestError) -> VerifiedAssertion {
        var step = "decode"
        defer { timeline?.mark(step) }
        guard assertion.count <= AssertionObject.maximumSize else {
            throw AppAttestError(
                .malformed, "assertion of \(assertion.count) bytes exceeds \(AssertionObject.maximumSize)")
        }
        guard clientDataHash.count == 32 else {
            throw AppAttestError(.malformed, "clientDataHash of \(clientDataHash.count) bytes, not 32")
        }
        guard configuration.apps[key.appID] != nil else {
            throw AppAttestError(.appIdMismatch, "\(key.appID) is not a configured App ID")
        }
        let object = try AssertionObject(cborEncoded: Array(assertion))
        let authData = object.authenticatorData
        timeline?.mark(step)
        step = "signature"

        // Steps 1–3: the signature over nonce, with SHA-256 applied by ECDSA (the double hash, “Verifying assertions
        // and counters”).
        guard
            key.publicKey.isValidAssertionSignature(
                derEncoded: object.signature, authenticatorData: authData.rawRepresentation,
                clientDataHash: Array(clientDataHash))
        else {
            throw AppAttestError(.signatureInvalid, "the signature does not verify over the nonce with the stored key")
        }
        timeline?.mark(step)
        step = "checks"
        // Step 4: rpIdHash.
        guard constantTimeEquals(authData.rpIDHash, key.appID.rpIDHash) else {
            throw AppAttestError(.appIdMismatch, "rpIdHash is not SHA-256 of \(key.appID)")
        }
        // Step 5: an increasing counter (“Verifying assertions and counters”), or one within the policy's window.
        guard counterPolicy.admits(authData.counter, highest: key.counter) else {
            throw counterPolicy.refusal(authData.counter, highest: key.counter)
        }
        return VerifiedAssertion(key: key, counter: authData.counter, authenticatorData: authData)
    }
}
