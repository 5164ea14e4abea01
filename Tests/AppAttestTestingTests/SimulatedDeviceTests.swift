@_spi(FixedVerificationTime) import AppAttest
import AppAttestTesting
import Crypto
import Foundation
import Testing

/// The simulated device and test authority: genuine objects pass a verifier that trusts the test root, and every
/// knob produces exactly the error it is meant to.
@Suite("Simulated device and test CA")
struct SimulatedDeviceTests {
    static let authority = try! TestCertificateAuthority()
    static let appID = try! AppID("ABCDE12345.com.example.app")
    static let now = Date(timeIntervalSince1970: 1_780_000_000)  // 2026-05-28
    let challenge = Array("server challenge 0123456789".utf8)

    func device(_ environment: AppAttestEnvironment = .production) -> SimulatedDevice {
        try! SimulatedDevice(authority: Self.authority, appID: Self.appID, environment: environment)
    }

    func verifier(_ environments: Set<AppAttestEnvironment> = [.production]) -> AppAttestVerifier {
        try! AppAttestVerifier(
            configuration: .init(
                apps: [Self.appID: environments], trustAnchor: Self.authority.trustAnchor,
                verificationTime: .fixed(Self.now)))
    }

    func options(_ change: (inout SimulatedDevice.AttestationOptions) -> Void = { _ in })
        -> SimulatedDevice.AttestationOptions
    {
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Self.now
        change(&options)
        return options
    }

    @Test("a genuine attestation and its assertions verify with the test root, counters 1, 2, 3")
    func genuine() throws {
        let device = device()
        let object = try device.attest(challenge: challenge, options())
        let attested = try verifier().verifyAttestation(object, keyID: device.keyID, challenge: challenge)
        #expect(attested.key.keyID == device.keyID)
        #expect(attested.key.publicKey.x963Representation == device.publicKey)
        #expect(attested.key.environment == .production)
        #expect(attested.osVersion == "17.4")
        var previous: UInt32 = 0
        for expected in UInt32(1)...3 {
            let clientData = Array("request \(expected)".utf8)
            let assertion = try device.assert(clientData: clientData)
            let verified = try verifier().verifyAssertion(
                assertion, clientData: clientData,
                key: AttestedKey(
                    publicKey: attested.key.publicKey, appID: Self.appID, environment: .production, counter: previous))
            #expect(verified.counter == expected)
            previous = verified.counter
        }
        #expect(device.counter == 3)
    }

    @Test("the default verifier, anchored at Apple's root, refuses the test authority")
    func appleRootRefuses() throws {
        let device = device()
        let apple = try AppAttestVerifier(
            configuration: .init(
                appID: Self.appID, environment: .production, verificationTime: .fixed(Self.now)))
        expectCode(.certificateChain) {
            _ = try apple.verifyAttestation(
                try device.attest(challenge: challenge, options()), keyID: device.keyID, challenge: challenge)
        }
    }

    @Test("development devices and the 2026 leaf shape; iOS 27 extensions")
    func variants() throws {
        let development = device(.development)
        let object = try development.attest(
            challenge: challenge,
            options {
                $0.appAttestExtendedKeyUsage = true
                $0.osVersion = "27.0"
                $0.extensions = AuthenticatorExtensions(bundleVersion: "7", validationCategoryBytes: [4, 0, 0, 0])
            })
        let result = try verifier([.development]).verifyAttestation(
            object, keyID: development.keyID, challenge: challenge)
        #expect(result.key.environment == .development)
        #expect(result.osVersion == "27.0")
        #expect(result.extensions?.bundleVersion == "7")
        #expect(result.extensions?.validationCategory == 4)
        var assertOptions = SimulatedDevice.AssertionOptions()
        assertOptions.extensions = AuthenticatorExtensions(bundleVersion: "8")
        let assertion = try development.assert(clientData: [1], assertOptions)
        let verified = try verifier([.development]).verifyAssertion(
            assertion, clientData: [1],
            key: AttestedKey(publicKey: result.key.publicKey, appID: Self.appID, environment: .production, counter: 0))
        #expect(verified.extensions?.bundleVersion == "8")
    }

    static let attestationKnobs:
        [(String, AppAttestError.Code, @Sendable (inout SimulatedDevice.AttestationOptions) -> Void)] = [
            ("other App ID", .appIdMismatch, { $0.appID = try! AppID("ZZZZZ99999.com.example.other") }),
            ("other environment", .environmentMismatch, { $0.environment = .development }),
            ("unknown AAGUID", .environmentMismatch, { $0.aaguid = Array("appattestsandbox".utf8) }),
            ("counter 1", .counterNotZero, { $0.counter = 1 }),
            ("counter 2^32-1", .counterNotZero, { $0.counter = .max }),
            (
                "credentialId of another key", .credentialIdMismatch,
                { $0.credentialID = Array(repeating: 7, count: 32) }
            ),
            ("COSE key of another key", .publicKeyMismatch, { $0.coseKey = P256.Signing.PrivateKey().publicKey }),
            ("credCert of another key", .keyIdMismatch, { $0.certificateKey = P256.Signing.PrivateKey().publicKey }),
            ("wrong nonce", .nonceMismatch, { $0.nonce = .wrong }),
            ("no nonce extension", .nonceMismatch, { $0.nonce = .missing }),
            ("nonce without its [1] wrapper", .nonceMismatch, { $0.nonce = .withoutContextTag }),
            ("leaf only", .certificateChain, { $0.chain = .leafOnly }),
            ("swapped certificates", .certificateChain, { $0.chain = .intermediateFirst }),
            ("root included", .certificateChain, { $0.chain = .withRoot }),
            ("foreign intermediate", .certificateChain, { $0.chain = .foreignIntermediate }),
            ("untrusted authority", .certificateChain, { $0.chain = .issuedByOtherAuthority }),
            ("expired leaf", .certificateValidity, { $0.leafNotValidAfter = now.addingTimeInterval(-1) }),
            ("leaf not yet valid", .certificateValidity, { $0.leafNotValidBefore = now.addingTimeInterval(60) }),
            ("fmt packed", .malformed, { $0.format = "packed" }),
            ("trailing bytes", .malformed, { $0.trailingBytes = [0x00] }),
            ("truncated", .malformed, { $0.truncatedTo = 300 }),
            ("authData: junk after the COSE key", .malformed, { $0.authenticatorDataSuffix = [0x01] }),
            (
                "authData: junk after the extensions", .malformed,
                {
                    $0.extensions = AuthenticatorExtensions(); $0.authenticatorDataSuffix = [0xA0]
                }
            ),
        ]

    @Test("every attestation knob produces its error", arguments: 0..<attestationKnobs.count)
    func attestationKnob(_ index: Int) throws {
        let (name, code, change) = Self.attestationKnobs[index]
        let device = device()
        let object = try device.attest(challenge: challenge, options(change))
        expectCode(code, name) {
            _ = try verifier().verifyAttestation(object, keyID: device.keyID, challenge: challenge)
        }
    }

    static let assertionKnobs:
        [(String, AppAttestError.Code, @Sendable (inout SimulatedDevice.AssertionOptions) -> Void)] = [
            ("other App ID", .appIdMismatch, { $0.appID = try! AppID("ZZZZZ99999.com.example.other") }),
            ("other key", .signatureInvalid, { $0.signingKey = P256.Signing.PrivateKey() }),
            ("nonce signed as a digest", .signatureInvalid, { $0.signNonceAsDigest = true }),
            ("corrupted signature", .signatureInvalid, { $0.corruptSignature = true }),
            ("replayed counter", .counterNotIncreasing, { $0.counter = 5 }),
            ("lower counter", .counterNotIncreasing, { $0.counter = 4 }),
            ("counter 0", .counterNotIncreasing, { $0.counter = 0 }),
            ("trailing bytes", .malformed, { $0.trailingBytes = [0xFF] }),
            ("truncated", .malformed, { $0.truncatedTo = 60 }),
        ]

    @Test("every assertion knob produces its error", arguments: 0..<assertionKnobs.count)
    func assertionKnob(_ index: Int) throws {
        let (name, code, change) = Self.assertionKnobs[index]
        let device = try SimulatedDevice(authority: Self.authority, appID: Self.appID, counter: 5)
        let key = try AttestedPublicKey(x963Representation: device.publicKey)
        var options = SimulatedDevice.AssertionOptions()
        change(&options)
        let assertion = try device.assert(clientData: [9, 9], options)
        expectCode(code, name) {
            _ = try verifier().verifyAssertion(
                assertion, clientData: [9, 9],
                key: AttestedKey(publicKey: key, appID: Self.appID, environment: .production, counter: 5))
        }
    }

    @Test("counter boundaries: 2^32-1 is accepted after 2^32-2, and nothing after it")
    func counterBoundaries() throws {
        let device = try SimulatedDevice(authority: Self.authority, appID: Self.appID, counter: .max - 1)
        let key = try AttestedPublicKey(x963Representation: device.publicKey)
        let last = try device.assert(clientData: [1])
        #expect(
            try verifier().verifyAssertion(
                last, clientData: [1],
                key: AttestedKey(publicKey: key, appID: Self.appID, environment: .production, counter: .max - 1)
            ).counter == .max)
        expectCode(.counterNotIncreasing) {
            _ = try verifier().verifyAssertion(
                last, clientData: [1],
                key: AttestedKey(publicKey: key, appID: Self.appID, environment: .production, counter: .max))
        }
    }
}

func expectCode(
    _ code: AppAttestError.Code, _ comment: String = "", sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) {
    do {
        try body()
        Issue.record("expected \(code), but it succeeded. \(comment)", sourceLocation: sourceLocation)
    } catch let error as AppAttestError {
        #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(code), got \(error). \(comment)", sourceLocation: sourceLocation)
    }
}
