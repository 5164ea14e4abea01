import AppAttest
import AppAttestCBOR
import AppAttestVectors
import Foundation
import Testing

@Suite("Assertion verification")
struct AssertionVerifierTests {
    let vector = realVector("basd-2021-04-14-assertion")  // counter 3
    var key: AttestedPublicKey { try! AttestedPublicKey(x963Representation: vector.publicKey!) }
    var verifier: AppAttestVerifier {
        try! AppAttestVerifier(configuration: .init(appID: vector.appID, environment: .development))
    }

    func verify(_ bytes: [UInt8], previous: UInt32 = 0, clientData: [UInt8]? = nil) throws -> VerifiedAssertion {
        try verifier.verifyAssertion(
            bytes, clientData: clientData ?? vector.clientData!,
            key: AttestedKey(publicKey: key, appID: vector.appID, environment: .production, counter: previous))
    }

    @Test("a genuine assertion yields the new counter; the parsed key is reusable")
    func genuine() throws {
        let result = try verify(vector.assertion!, previous: 2)
        #expect(result.counter == 3)
        #expect(result.key.keyID == key.keyID)
        #expect(result.extensions == nil)
        // Apple sets AT in assertions although no credential data follows (“Verifying attestations”).
        #expect(result.authenticatorData.flags.contains(.attestedCredentialData))
        let viaHash = try verifier.verifyAssertion(
            vector.assertion!, clientDataHash: AppAttestSHA256.hash(vector.clientData!),
            key: AttestedKey(publicKey: key, appID: vector.appID, environment: .production, counter: 2))
        #expect(viaHash == result)
    }

    @Test("the counter must strictly increase, across the whole UInt32 range")
    func counters() {
        expectCode(.counterNotIncreasing) { _ = try verify(vector.assertion!, previous: 3) }
        expectCode(.counterNotIncreasing) { _ = try verify(vector.assertion!, previous: 4) }
        expectCode(.counterNotIncreasing) { _ = try verify(vector.assertion!, previous: .max) }
        #expect(throws: Never.self) { try verify(vector.assertion!, previous: 0) }
    }

    @Test("the signature is over nonce hashed once more by ECDSA, never nonce as a digest")
    func doubleHash() throws {
        let object = try AssertionObject(cborEncoded: vector.assertion!)
        let nonce = AppAttestSHA256.hash(
            object.authenticatorData.rawRepresentation + AppAttestSHA256.hash(vector.clientData!))
        // Passing the nonce as if it were the client data hash makes the verifier hash differently: invalid.
        expectCode(.signatureInvalid) {
            _ = try verifier.verifyAssertion(
                vector.assertion!, clientDataHash: nonce,
                key: AttestedKey(publicKey: key, appID: vector.appID, environment: .production, counter: 0))
        }
    }

    @Test("client data, key and App ID are all bound")
    func bindings() throws {
        expectCode(.signatureInvalid) { _ = try verify(vector.assertion!, clientData: vector.clientData! + [0]) }
        let otherKey = try AttestedPublicKey(
            x963Representation: realVector("veehaitch-2020-11-21-assertion").publicKey!)
        expectCode(.signatureInvalid) {
            _ = try verifier.verifyAssertion(
                vector.assertion!, clientData: vector.clientData!,
                key: AttestedKey(publicKey: otherKey, appID: vector.appID, environment: .production, counter: 0))
        }
        let other = try AppID("ABCDE12345.com.example.other")
        expectCode(.appIdMismatch, "App ID not configured") {
            _ = try verifier.verifyAssertion(
                vector.assertion!, clientData: vector.clientData!,
                key: AttestedKey(publicKey: key, appID: other, environment: .production, counter: 0))
        }
        let both = try AppAttestVerifier(
            configuration: .init(apps: [other: [.production], vector.appID: [.development]]))
        expectCode(.appIdMismatch, "configured, but not the key's") {
            _ = try both.verifyAssertion(
                vector.assertion!, clientData: vector.clientData!,
                key: AttestedKey(publicKey: key, appID: other, environment: .production, counter: 0))
        }
        expectCode(.malformed, "a client data hash of 31 bytes") {
            _ = try verifier.verifyAssertion(
                vector.assertion!, clientDataHash: [UInt8](repeating: 0, count: 31),
                key: AttestedKey(publicKey: key, appID: vector.appID, environment: .production, counter: 0))
        }
    }

    @Test("keys that are not P-256 points are unsupported")
    func unsupportedKeys() throws {
        let point = vector.publicKey!
        var offCurve = point
        offCurve[64] ^= 0x01
        var compressedTag = point
        compressedTag[0] = 0x02
        for (name, bytes) in [
            ("64 bytes", Array(point.dropFirst())), ("off the curve", offCurve),
            ("wrong tag", compressedTag), ("empty", []), ("all zero", [UInt8](repeating: 0, count: 65)),
        ] {
            expectCode(.unsupportedKey, name) { _ = try AttestedPublicKey(x963Representation: bytes) }
        }
        #expect(key.x963Representation == point)
        #expect(key.keyID == (try KeyID(rawValue: AppAttestSHA256.hash(point))))
    }

    @Test("hostile assertion bytes are typed errors")
    func hostile() throws {
        let object = try AssertionObject(cborEncoded: vector.assertion!)
        func assertion(_ signature: CBORValue, _ authData: CBORValue) -> [UInt8] {
            CBORWriter.encode(
                .map([
                    CBORMapEntry(key: .textString("signature"), value: signature),
                    CBORMapEntry(key: .textString("authenticatorData"), value: authData),
                ]))
        }
        let sig = CBORValue.byteString(object.signature)
        let auth = object.authenticatorData.rawRepresentation
        let cases: [(String, [UInt8])] = [
            ("empty", []),
            ("not a map", [0x80]),
            ("oversized", [UInt8](repeating: 0x00, count: AssertionObject.maximumSize + 1)),
            ("authData of 36 bytes", assertion(sig, .byteString(Array(auth.prefix(36))))),
            ("authData with a trailing byte", assertion(sig, .byteString(auth + [0x00]))),
            ("authData followed by a non-map item", assertion(sig, .byteString(auth + [0x01]))),
            ("authData followed by a map and more", assertion(sig, .byteString(auth + [0xA0, 0x00]))),
            ("signature as text", assertion(.textString("x"), .byteString(auth))),
            ("empty signature", assertion(.byteString([]), .byteString(auth))),
            ("oversized signature", assertion(.byteString([UInt8](repeating: 0x30, count: 200)), .byteString(auth))),
            ("authData as an array", assertion(sig, .array([]))),
            (
                "extra key",
                CBORWriter.encode(
                    .map([
                        CBORMapEntry(key: .textString("signature"), value: sig),
                        CBORMapEntry(key: .textString("authenticatorData"), value: .byteString(auth)),
                        CBORMapEntry(key: .textString("x"), value: .null),
                    ]))
            ),
            ("trailing byte after the map", vector.assertion! + [0x00]),
        ]
        for (name, bytes) in cases {
            expectCode(.malformed, name) { _ = try verify(bytes) }
        }
        // Every proper prefix of a real assertion is malformed.
        for length in 0..<vector.assertion!.count {
            expectCode(.malformed, "prefix \(length)") { _ = try verify(Array(vector.assertion!.prefix(length))) }
        }
        // A non-DER signature (BER long-form length) is refused by OpenSSL's strict re-encoding check.
        var long = object.signature
        long.replaceSubrange(0..<2, with: [0x30, 0x81, long[1]])
        expectCode(.signatureInvalid, "BER signature") {
            _ = try verify(assertion(.byteString(long), .byteString(auth)))
        }
    }

    @Test("iOS 27 extensions in assertion authData are parsed and kept, unknown keys included")
    func extensions() throws {
        let map: CBORValue = .map([
            CBORMapEntry(key: .textString(AuthenticatorExtensions.bundleVersionKey), value: .textString("42")),
            CBORMapEntry(
                key: .textString(AuthenticatorExtensions.validationCategoryKey), value: .byteString([4, 0, 0, 0])),
            CBORMapEntry(key: .textString("apple_future_key_01"), value: .unsignedInteger(7)),
        ])
        let data = try AuthenticatorData(
            assertionRepresentation: Array(repeating: 0, count: 37) + CBORWriter.encode(map))
        #expect(data.extensions?.bundleVersion == "42")
        #expect(data.extensions?.validationCategory == 4)
        #expect(data.extensions?.validationCategoryBytes == [4, 0, 0, 0])
        #expect(data.extensions?.value(for: "apple_future_key_01") == .unsignedInteger(7))
        #expect(data.extensions?.entries.count == 3)
        // Known keys of unexpected types leave the properties empty but never fail.
        let odd: CBORValue = .map([
            CBORMapEntry(key: .textString(AuthenticatorExtensions.bundleVersionKey), value: .unsignedInteger(1))
        ])
        let oddData = try AuthenticatorData(
            assertionRepresentation: Array(repeating: 0, count: 37) + CBORWriter.encode(odd))
        #expect(oddData.extensions?.bundleVersion == nil)
        #expect(oddData.extensions?.validationCategory == nil)
    }
}
