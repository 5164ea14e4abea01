internal import AppAttestCrypto
public import Foundation

/// Verifies App Attest attestation objects and assertions, following Apple's steps (<doc:VerifyingAttestations>,
/// <doc:VerifyingAssertions>).
///
/// Build one verifier at start-up and share it: it is `Sendable`, synchronous and does no I/O. It holds the
/// trust anchor parsed once and remembers intermediates already verified against it, so that a chain costs one
/// P-384 signature verification instead of two (see `ChainVerifier`).
///
/// ```swift
/// let verifier = try AppAttestVerifier(configuration: .init(
///     appID: try AppID("ABCDE12345.com.example.app"), environment: .production))
/// let attested = try verifier.verifyAttestation(object, keyID: keyID, challenge: challenge)
/// // store attested.key (its point, App ID, environment, counter 0) and attested.receipt …
/// let verified = try verifier.verifyAssertion(assertion, clientData: clientData, key: attested.key)
/// // store verified.counter atomically (compare-and-set on the previous value)
/// ```
public struct AppAttestVerifier: Sendable {
    /// What the verifier accepts.
    public struct Configuration: Sendable {
        /// The App IDs this server accepts, each with the environments allowed for it (<doc:VerifyingAttestations>).
        public var apps: [AppID: Set<AppAttestEnvironment>]
        /// The root that attestation chains must end at; Apple's by default.
        public var trustAnchor: TrustAnchor
        /// When certificates must be valid. `.now` in production; pinned for recorded data.
        public var verificationTime: VerificationTime
        /// Accepted clock skew, in seconds, when checking certificate validity (0 by default, at most
        /// ``AppAttestVerifier/maximumClockSkewLeeway``). A chain that is not valid at the verification time but is
        /// valid that much earlier or later is accepted.
        public var clockSkewLeeway: TimeInterval

        /// One App ID in one environment.
        public init(
            appID: AppID, environment: AppAttestEnvironment, trustAnchor: TrustAnchor = .appleAppAttestationRoot,
            verificationTime: VerificationTime = .now, clockSkewLeeway: TimeInterval = 0
        ) {
            self.init(
                apps: [appID: [environment]], trustAnchor: trustAnchor, verificationTime: verificationTime,
                clockSkewLeeway: clockSkewLeeway)
        }

        /// Several App IDs, each with its allowed environments.
        public init(
            apps: [AppID: Set<AppAttestEnvironment>], trustAnchor: TrustAnchor = .appleAppAttestationRoot,
            verificationTime: VerificationTime = .now, clockSkewLeeway: TimeInterval = 0
        ) {
            self.apps = apps
            self.trustAnchor = trustAnchor
            self.verificationTime = verificationTime
            self.clockSkewLeeway = clockSkewLeeway
        }
    }

    /// The instant at which certificate validity is judged: the system clock at each verification.
    ///
    /// A fixed instant, for recorded test vectors and replays of old data, is `fixed(_:)`, behind
    /// `@_spi(FixedVerificationTime)` so that production code cannot pin time by accident.
    public struct VerificationTime: Sendable, Hashable {
        private let fixedDate: Date?

        /// The system clock at each verification.
        public static let now = VerificationTime(fixedDate: nil)

        /// A fixed instant, for recorded test vectors and replays of old data.
        @_spi(FixedVerificationTime)
        public static func fixed(_ date: Date) -> VerificationTime { VerificationTime(fixedDate: date) }

        var date: Date { fixedDate ?? Date() }
    }

    /// The largest clock skew leeway accepted, in seconds (a week): enough for replaying recorded data, and far
    /// from the values that would overflow time arithmetic.
    public static let maximumClockSkewLeeway: TimeInterval = 604_800

    /// The configuration this verifier was built from.
    public let configuration: Configuration
    /// When certificates must be valid; a copy of the verifier with another time shares the trust state.
    public var verificationTime: VerificationTime
    private let chainVerifier: ChainVerifier
    private let appsByRPIDHash: [[UInt8]: (AppID, Set<AppAttestEnvironment>)]

    /// - Throws: ``AppAttestError/Code/invalidConfiguration`` when no App ID is configured, an App ID allows
    ///   no environment, the leeway is negative, or the trust anchor is not a usable certificate.
    public init(configuration: Configuration) throws(AppAttestError) {
        guard !configuration.apps.isEmpty else {
            throw AppAttestError(.invalidConfiguration, "no App ID configured")
        }
        guard configuration.apps.values.allSatisfy({ !$0.isEmpty }) else {
            throw AppAttestError(.invalidConfiguration, "an App ID allows no environment")
        }
        guard (0...Self.maximumClockSkewLeeway).contains(configuration.clockSkewLeeway) else {
            throw AppAttestError(
                .invalidConfiguration, "the clock skew leeway must be from 0 to 604800 seconds (a week)")
        }
        let root: X509Certificate
        do { root = try X509Certificate(derEncoded: configuration.trustAnchor.derRepresentation) } catch {
            throw AppAttestError(.invalidConfiguration, "trust anchor: \(error)")
        }
        do { chainVerifier = try ChainVerifier(root: root) } catch {
            throw AppAttestError(.invalidConfiguration, "trust anchor: \(error)")
        }
        self.configuration = configuration
        self.verificationTime = configuration.verificationTime
        self.appsByRPIDHash = Dictionary(
            uniqueKeysWithValues: configuration.apps.map { ($0.key.rpIDHash, ($0.key, $0.value)) })
    }

    // MARK: Attestation

    /// Verifies an attestation object against the one-time challenge the server issued.
    ///
    /// The clientDataHash is SHA-256 of `challenge`, as real devices compute it (<doc:VerifyingAttestations> step 2).
    /// - Parameters:
    ///   - attestationObject: the CBOR bytes from `attestKey`.
    ///   - keyID: the key identifier the app sent with it.
    ///   - challenge: the challenge bytes the server issued for this attestation.
    /// - Returns: the verified key and what came with it; store ``VerifiedAttestation/key`` (its counter is 0)
    ///   and ``VerifiedAttestation/receipt``.
    /// - Throws: ``AppAttestError`` with the first failed check's code.
    public func verifyAttestation(
        _ attestationObject: some Collection<UInt8>, keyID: KeyID, challenge: some Collection<UInt8>
    ) throws(AppAttestError) -> VerifiedAttestation {
        var timeline: VerificationTimeline?
        return try verifyAttestation(attestationObject, keyID: keyID, challenge: challenge, timeline: &timeline)
    }

    /// ``verifyAttestation(_:keyID:challenge:)``, marking each step's end in `timeline` when it is not nil.
    package func verifyAttestation(
        _ attestationObject: some Collection<UInt8>, keyID: KeyID, challenge: some Collection<UInt8>,
        timeline: inout VerificationTimeline?
    ) throws(AppAttestError) -> VerifiedAttestation {
        let clientDataHash = SHA256.hash(Array(challenge))
        return try verifyAttestation(
            attestationObject, keyID: keyID, clientDataHash: clientDataHash, timeline: &timeline)
    }

    /// Verifies an attestation object against the exact clientDataHash passed to `attestKey`.
    ///
    /// - Warning: Real apps pass SHA-256 of the server's challenge; use
    ///   ``verifyAttestation(_:keyID:challenge:)`` unless you hold the hash itself (Apple's documentation
    ///   samples passed the raw challenge, <doc:SecurityModel>). Never try both forms on the same object.
    /// - Throws: ``AppAttestError`` with the first failed check's code.
    public func verifyAttestation(
        _ attestationObject: some Collection<UInt8>, keyID: KeyID, clientDataHash: some Collection<UInt8>
    ) throws(AppAttestError) -> VerifiedAttestation {
        var timeline: VerificationTimeline?
        return try verifyAttestation(
            attestationObject, keyID: keyID, clientDataHash: clientDataHash, timeline: &timeline)
    }

    private func verifyAttestation(
        _ attestationObject: some Collection<UInt8>, keyID: KeyID, clientDataHash: some Collection<UInt8>,
        timeline: inout VerificationTimeline?
    ) throws(AppAttestError) -> VerifiedAttestation {
        // A failed step ends with its failure: its mark is written on the way out.
        var step = "decode"
        defer { timeline?.mark(step) }
        guard attestationObject.count <= AttestationObject.maximumSize else {
            throw AppAttestError(
                .malformed,
                "attestation object of \(attestationObject.count) bytes exceeds \(AttestationObject.maximumSize)")
        }
        guard clientDataHash.count <= 1024 else {
            throw AppAttestError(.malformed, "clientDataHash of \(clientDataHash.count) bytes")
        }
        let object = try AttestationObject(cborEncoded: Array(attestationObject))
        let authData = object.authenticatorData
        guard let credential = authData.attestedCredentialData else {
            throw AppAttestError(.malformed, "authenticator data without credential data")
        }

        timeline?.mark(step)
        step = "chain"

        // Step 1: x5c holds the credCert and the intermediate, and chains to the root.
        guard object.certificateChain.count == 2 else {
            throw AppAttestError(.certificateChain, "x5c holds \(object.certificateChain.count) certificates, not 2")
        }
        // Parsed without decoding its key: the chain verifier's fast path and the checks below read the key's
        // point from the SubjectPublicKeyInfo (“Verifying attestations”, Performance).
        let leaf: X509Certificate
        do { leaf = try X509Certificate(derEncoded: object.certificateChain[0], decodingPublicKey: false) } catch {
            throw AppAttestError(.malformed, "credCert: \(error)")
        }
        _ = try verifyChain(leaf: leaf, intermediates: [object.certificateChain[1]])
        timeline?.mark(step)
        step = "nonce"

        // Steps 2–4: nonce = SHA-256(authData ‖ clientDataHash) equals the credCert extension (“Verifying
        // attestations”).
        let nonce = SHA256.hash(authData.rawRepresentation, Array(clientDataHash))
        // Read the leaf's extensions once: the nonce and the device properties both come from them.
        let leafExtensions = leaf.extensions
        guard
            case .value(let extensionValue) = X509Certificate.extensionValue(
                oid: AppleExtensions.nonceOID, in: leafExtensions)
        else {
            throw AppAttestError(.nonceMismatch, "credCert has no single nonce extension \(AppleExtensions.nonceOID)")
        }
        guard let certifiedNonce = AppleExtensions.nonce(fromExtensionValue: extensionValue) else {
            throw AppAttestError(.nonceMismatch, "the nonce extension is not SEQUENCE { [1] OCTET STRING (32) }")
        }
        guard constantTimeEquals(certifiedNonce, nonce) else {
            throw AppAttestError(.nonceMismatch, "nonce extension ≠ SHA-256(authData ‖ clientDataHash)")
        }
        timeline?.mark(step)
        step = "checks"

        // Step 5: keyId = SHA-256 of the credCert public key (65-byte uncompressed point).
        guard let keyInfo = leaf.ecPublicKeyPoint, keyInfo.curve == "prime256v1", keyInfo.point.count == 65,
            keyInfo.point.first == 0x04
        else {
            throw AppAttestError(.unsupportedKey, "credCert key is not an uncompressed P-256 point")
        }
        let point = keyInfo.point
        guard constantTimeEquals(SHA256.hash(point), keyID.rawValue) else {
            throw AppAttestError(.keyIdMismatch, "SHA-256 of the credCert public key ≠ keyId")
        }

        // Step 6: rpIdHash = SHA-256(App ID).
        guard let (appID, environments) = appsByRPIDHash[authData.rpIDHash] else {
            throw AppAttestError(.appIdMismatch, "rpIdHash \(authData.rpIDHash.hexString) is not a configured App ID")
        }

        // Step 7: counter 0.
        guard authData.counter == 0 else {
            throw AppAttestError(.counterNotZero, "attestation counter is \(authData.counter)")
        }

        // Step 8: the AAGUID is an environment allowed for this App ID.
        guard let environment = credential.environment else {
            throw AppAttestError(
                .environmentMismatch, "AAGUID \(credential.aaguid.hexString) names no App Attest environment")
        }
        guard environments.contains(environment) else {
            throw AppAttestError(
                .environmentMismatch,
                "a \(environment.rawValue) key, but \(appID) allows \(environments.map(\.rawValue).sorted())")
        }

        // Step 9: credentialId = keyId.
        guard constantTimeEquals(credential.credentialID, keyID.rawValue) else {
            throw AppAttestError(.credentialIdMismatch, "credentialId ≠ keyId")
        }

        // The COSE key in authData is the credCert key (“Verifying attestations”).
        guard let cosePoint = credential.credentialPublicKeyPoint else {
            throw AppAttestError(.unsupportedKey, "the COSE key is not an EC2 P-256 ES256 key")
        }
        guard constantTimeEquals(cosePoint, point) else {
            throw AppAttestError(.publicKeyMismatch, "COSE key in authData ≠ credCert public key")
        }

        // Parsed once, here, into the representation assertions are verified with.
        let publicKey = try AttestedPublicKey(point: point, keyID: keyID)
        var osVersion: String?
        if case .value(let properties) = X509Certificate.extensionValue(
            oid: AppleExtensions.devicePropertiesOID, in: leafExtensions)
        {
            osVersion = AppleExtensions.taggedText(AppleExtensions.osVersionTag, inExtensionValue: properties)
        }
        return VerifiedAttestation(
            key: AttestedKey(publicKey: publicKey, appID: appID, environment: environment, counter: 0),
            receipt: object.receipt,
            authenticatorData: authData, clientDataHash: Array(clientDataHash), osVersion: osVersion,
            certificateChain: object.certificateChain)
    }

    /// Chain verification at the configured time, then within the leeway on either side.
    private func verifyChain(leaf: X509Certificate, intermediates: [[UInt8]]) throws(AppAttestError)
        -> ChainVerifier.VerifiedChain
    {
        let now = verificationTime.date.timeIntervalSince1970
        guard now.isFinite, abs(now) < 1e11 else {
            throw AppAttestError(.invalidConfiguration, "verification time out of range")
        }
        let leeway = configuration.clockSkewLeeway
        var times = [Int64(now.rounded(.down))]
        if leeway > 0 {
            times += [Int64((now - leeway).rounded(.down)), Int64((now + leeway).rounded(.down))]
        }
        var firstValidityError: String?
        for time in times {
            do {
                return try chainVerifier.verify(leaf: leaf, intermediates: intermediates, at: time)
            } catch {
                if case .validity(let message) = error {
                    if firstValidityError == nil { firstValidityError = message }
                } else {
                    throw AppAttestError(chainFailure: error)
                }
            }
        }
        throw AppAttestError(
            .certificateValidity, firstValidityError ?? "certificate not valid at the verification time")
    }
}

extension AppAttestError {
    /// The error for a chain the verifier refused.
    init(chainFailure: ChainVerifier.Failure) {
        switch chainFailure {
        case .validity(let message): self.init(.certificateValidity, message)
        case .chain(let message): self.init(.certificateChain, message)
        case .unparseable(let message): self.init(.malformed, message)
        case .internalError(let message): self.init(.internalCryptoFailure, message)
        }
    }
}

/// An attestation that passed every check. Only ``AppAttestVerifier`` creates one.
public struct VerifiedAttestation: Sendable, Hashable {
    /// The attested key (its App ID from the authenticator data's rpIdHash, its environment from the AAGUID, counter
    /// 0): store it and verify assertions with it.
    public let key: AttestedKey
    /// The App Attest receipt as received (CMS, BER); validate and store it (<doc:ReceiptsAndRiskMetric>).
    public let receipt: [UInt8]
    /// The authenticator data (counter 0).
    public let authenticatorData: AuthenticatorData
    /// The clientDataHash the nonce was checked against.
    public let clientDataHash: [UInt8]
    /// The OS version from the credCert (extension 1.2.840.113635.100.8.7, tag 1400), e.g. "17.4".
    public let osVersion: String?
    /// The DER certificates of `x5c`, leaf first.
    public let certificateChain: [[UInt8]]

    /// The iOS 27 extensions map of the authenticator data, if any.
    public var extensions: AuthenticatorExtensions? { authenticatorData.extensions }
}

/// An assertion that passed every check. Only ``AppAttestVerifier`` creates one.
public struct VerifiedAssertion: Sendable, Hashable {
    /// The key that signed it, as it was given to the verifier.
    public let key: AttestedKey
    /// The assertion's counter: store it atomically, with the policy it was verified under.
    public let counter: UInt32
    /// The authenticator data.
    public let authenticatorData: AuthenticatorData
    /// The iOS 27 extensions map of the authenticator data, if any.
    public var extensions: AuthenticatorExtensions? { authenticatorData.extensions }
}
