import AppAttest
import AppAttestCBOR
import AppAttestVectors
import Crypto
public import Foundation

/// Writes a vector file (TestVectors/README.md format) from simulated devices: at least one vector for every
/// reason, for attestations and assertions, with iOS 27 extension data and boundary counters (0, 1, 2^32−1).
/// The file carries the test root in `trustAnchorCertificate`, so any reader verifies it without this module.
public enum SyntheticVectors {
    /// The instant the simulated attestations happen; vectors are verified an hour later.
    public static let issuedAt = Date(timeIntervalSince1970: 1_780_272_000)  // 2026-06-01T00:00:00Z

    /// Generates the file's JSON with a new test authority and new device keys.
    public static func generate() throws -> Data {
        try generate(authority: TestCertificateAuthority(name: "Synthetic"))
    }

    /// Generates the file's JSON with the given authority.
    public static func generate(authority: TestCertificateAuthority) throws -> Data {
        let appID = try AppID("SYNTH12345.com.example.synthetic")
        let otherApp = try AppID("OTHER12345.com.example.other")
        let verifyAt = issuedAt.addingTimeInterval(3600)
        var vectors: [[String: Any]] = []

        func attestation(
            _ id: String, expect: [String], environment: AppAttestEnvironment = .production,
            deviceEnvironment: AppAttestEnvironment = .production, rawClientDataHash: Bool = false,
            _ change: (inout SimulatedDevice.AttestationOptions) -> Void = { _ in }
        ) throws {
            let device = try SimulatedDevice(authority: authority, appID: appID, environment: deviceEnvironment)
            var options = SimulatedDevice.AttestationOptions()
            options.issuedAt = issuedAt
            change(&options)
            var vector: [String: Any] = [
                "id": id, "kind": "attestation", "source": source, "appId": appID.rawValue,
                "environment": environment.rawValue, "keyId": device.keyID.base64EncodedString,
                "verifyAt": ISO8601DateFormatter().string(from: verifyAt), "expect": expectation(expect),
            ]
            if rawClientDataHash {
                let hash = (0..<32).map { _ in UInt8.random(in: 0...255) }
                vector["clientDataHash"] = Data(hash).base64EncodedString()
                vector["attestation"] = Data(try device.attest(clientDataHash: hash, options)).base64EncodedString()
            } else {
                let challenge = (0..<32).map { _ in UInt8.random(in: 0...255) }
                vector["challenge"] = Data(challenge).base64EncodedString()
                vector["clientDataHash"] = Data(AppAttestSHA256.hash(challenge)).base64EncodedString()
                vector["attestation"] = Data(try device.attest(challenge: challenge, options)).base64EncodedString()
            }
            vectors.append(vector)
        }

        func assertion(
            _ id: String, expect: [String], previous: UInt32, next: UInt32? = nil,
            _ change: (inout SimulatedDevice.AssertionOptions) -> Void = { _ in }
        ) throws {
            let device = try SimulatedDevice(authority: authority, appID: appID, counter: previous)
            var options = SimulatedDevice.AssertionOptions()
            options.counter = next
            change(&options)
            let clientData = Array("{\"challenge\":\"\(UUID().uuidString)\",\"path\":\"/v1/order\"}".utf8)
            let object = try device.assert(clientData: clientData, options)
            var expectation = self.expectation(expect)
            if expect.isEmpty { expectation["counter"] = Int(next ?? previous &+ 1) }
            vectors.append([
                "id": id, "kind": "assertion", "source": source, "appId": appID.rawValue,
                "assertion": Data(object).base64EncodedString(), "clientData": Data(clientData).base64EncodedString(),
                "publicKey": Data(device.publicKey).base64EncodedString(), "keyId": device.keyID.base64EncodedString,
                "previousCounter": Int(previous), "expect": expectation,
            ])
        }

        let extensions = AuthenticatorExtensions(entries: [
            CBORMapEntry(key: .textString("apple_bundle_version_01"), value: .textString("3")),
            CBORMapEntry(key: .textString("apple_validation_category_01"), value: .byteString([4, 0, 0, 0])),
            CBORMapEntry(key: .textString("apple_future_key_01"), value: .unsignedInteger(1)),
        ])

        // Attestations that verify.
        try attestation("synthetic-attestation-production", expect: [])
        try attestation(
            "synthetic-attestation-development", expect: [], environment: .development, deviceEnvironment: .development)
        try attestation("synthetic-attestation-ios27-extensions", expect: []) {
            $0.extensions = extensions
            $0.appAttestExtendedKeyUsage = true
            $0.osVersion = "27.0"
        }
        try attestation("synthetic-attestation-raw-client-data-hash", expect: [], rawClientDataHash: true)
        // One attestation per reason.
        try attestation("NEG-synthetic-attestation-fmt", expect: ["malformed"]) { $0.format = "packed" }
        try attestation("NEG-synthetic-attestation-trailing-byte", expect: ["malformed"]) { $0.trailingBytes = [0] }
        try attestation("NEG-synthetic-attestation-truncated", expect: ["malformed"]) { $0.truncatedTo = 500 }
        try attestation("NEG-synthetic-attestation-authdata-junk", expect: ["malformed"]) {
            $0.extensions = extensions
            $0.authenticatorDataSuffix = [0x00]
        }
        try attestation("NEG-synthetic-attestation-leaf-only", expect: ["certificateChain"]) { $0.chain = .leafOnly }
        try attestation("NEG-synthetic-attestation-swapped-chain", expect: ["certificateChain"]) {
            $0.chain = .intermediateFirst
        }
        try attestation("NEG-synthetic-attestation-untrusted-authority", expect: ["certificateChain"]) {
            $0.chain = .issuedByOtherAuthority
        }
        try attestation("NEG-synthetic-attestation-expired-leaf", expect: ["certificateValidity"]) {
            $0.leafNotValidAfter = verifyAt.addingTimeInterval(-60)
        }
        try attestation("NEG-synthetic-attestation-future-leaf", expect: ["certificateValidity"]) {
            $0.leafNotValidBefore = verifyAt.addingTimeInterval(60)
        }
        try attestation("NEG-synthetic-attestation-wrong-nonce", expect: ["nonceMismatch"]) { $0.nonce = .wrong }
        try attestation("NEG-synthetic-attestation-nonce-without-tag", expect: ["nonceMismatch"]) {
            $0.nonce = .withoutContextTag
        }
        try attestation("NEG-synthetic-attestation-certificate-key", expect: ["keyIdMismatch"]) {
            $0.certificateKey = P256.Signing.PrivateKey().publicKey
        }
        try attestation("NEG-synthetic-attestation-cose-key", expect: ["publicKeyMismatch"]) {
            $0.coseKey = P256.Signing.PrivateKey().publicKey
        }
        try attestation("NEG-synthetic-attestation-other-app", expect: ["appIdMismatch"]) { $0.appID = otherApp }
        try attestation("NEG-synthetic-attestation-counter-1", expect: ["counterNotZero"]) { $0.counter = 1 }
        try attestation("NEG-synthetic-attestation-counter-max", expect: ["counterNotZero"]) { $0.counter = .max }
        try attestation(
            "NEG-synthetic-attestation-development-as-production", expect: ["environmentMismatch"],
            deviceEnvironment: .development)
        try attestation("NEG-synthetic-attestation-credential-id", expect: ["credentialIdMismatch"]) {
            $0.credentialID = [UInt8](repeating: 0xAB, count: 32)
        }

        // Assertions that verify, at the counter boundaries.
        try assertion("synthetic-assertion-counter-1", expect: [], previous: 0)
        try assertion("synthetic-assertion-counter-2", expect: [], previous: 1)
        try assertion("synthetic-assertion-counter-max", expect: [], previous: .max - 1)
        try assertion("synthetic-assertion-skip-ahead", expect: [], previous: 3, next: 1000)
        try assertion("synthetic-assertion-ios27-extensions", expect: [], previous: 0) { $0.extensions = extensions }
        // One assertion per reason.
        try assertion("NEG-synthetic-assertion-truncated", expect: ["malformed"], previous: 0) { $0.truncatedTo = 80 }
        try assertion("NEG-synthetic-assertion-trailing-byte", expect: ["malformed"], previous: 0) {
            $0.trailingBytes = [0]
        }
        try assertion("NEG-synthetic-assertion-other-key", expect: ["signatureInvalid"], previous: 0) {
            $0.signingKey = P256.Signing.PrivateKey()
        }
        try assertion("NEG-synthetic-assertion-nonce-as-digest", expect: ["signatureInvalid"], previous: 0) {
            $0.signNonceAsDigest = true
        }
        try assertion("NEG-synthetic-assertion-corrupt-signature", expect: ["signatureInvalid"], previous: 0) {
            $0.corruptSignature = true
        }
        try assertion("NEG-synthetic-assertion-other-app", expect: ["appIdMismatch"], previous: 0) {
            $0.appID = otherApp
        }
        try assertion("NEG-synthetic-assertion-counter-0", expect: ["counterNotIncreasing"], previous: 0, next: 0)
        try assertion("NEG-synthetic-assertion-replay", expect: ["counterNotIncreasing"], previous: 7, next: 7)
        try assertion("NEG-synthetic-assertion-rollback", expect: ["counterNotIncreasing"], previous: 7, next: 6)
        try assertion("NEG-synthetic-assertion-after-max", expect: ["counterNotIncreasing"], previous: .max, next: .max)

        let file: [String: Any] = [
            "format": TestVectorFile.formatName, "version": 1,
            "description": """
            Synthetic vectors from swift-app-attest's simulated device and test certificate authority \
            (AppAttestTesting): one or more per reason, for attestations and assertions, with iOS 27 extension \
            data and boundary counters. They chain to the test root in trustAnchorCertificate, not to Apple's.
            """,
            "trustAnchor": "swift-app-attest synthetic test root (see trustAnchorCertificate)",
            "trustAnchorCertificate": Data(authority.rootCertificate).base64EncodedString(),
            "vectors": vectors,
        ]
        return try JSONSerialization.data(withJSONObject: file, options: [.prettyPrinted, .sortedKeys])
    }

    private static var source: [String: Any] {
        [
            "repository": "swift-app-attest", "path": "Sources/AppAttestTesting/SyntheticVectors.swift",
            "license": "Apache-2.0",
        ]
    }

    private static func expectation(_ reasons: [String]) -> [String: Any] {
        reasons.isEmpty ? ["result": "valid"] : ["result": "invalid", "reasons": reasons]
    }
}
