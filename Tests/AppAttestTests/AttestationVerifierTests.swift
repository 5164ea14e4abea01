import AppAttestCBOR
import AppAttestVectors
import Foundation
import Testing

@_spi(FixedVerificationTime) @testable import AppAttest

/// Rejection paths of attestation verification that the vectors do not reach, and the verifier's options.
@Suite("Attestation verification")
struct AttestationVerifierTests {
    /// A real development attestation with its challenge (wurzelpfropf), valid at its verifyAt.
    let vector = realVector("veehaitch-2020-11-21-6MURL8TA57")

    var object: [UInt8] { vector.attestation! }
    var root: CBORValue { try! CBORDecoder().decode(object) }

    /// The attestation object with one top-level or attStmt entry replaced.
    func altered(_ change: (inout [CBORMapEntry], inout [CBORMapEntry]) -> Void) -> [UInt8] {
        guard case .map(var top) = root, case .map(var statement)? = root["attStmt"] else { fatalError() }
        change(&top, &statement)
        if let index = top.firstIndex(where: { $0.key == .textString("attStmt") }) {
            top[index].value = .map(statement)
        }
        return CBORWriter.encode(.map(top))
    }

    func withChain(_ chain: [[UInt8]]) -> [UInt8] {
        altered { _, statement in
            let index = statement.firstIndex { $0.key == .textString("x5c") }!
            statement[index].value = .array(chain.map(CBORValue.byteString))
        }
    }

    func verify(_ bytes: [UInt8], using verifier: AppAttestVerifier? = nil) throws -> VerifiedAttestation {
        let verifier = verifier ?? (try! makeVerifier(for: vector))
        return try verifier.verifyAttestation(bytes, keyID: vector.keyID!, challenge: vector.challenge!)
    }

    @Test("a genuine attestation yields its key, environment, receipt and OS version")
    func genuine() throws {
        let result = try verify(object)
        #expect(result.key.keyID == vector.keyID)
        #expect(result.key.appID == vector.appID)
        #expect(result.key.environment == .development)
        #expect(result.key.publicKey.keyID == vector.keyID)
        #expect(result.key.publicKey.x963Representation.count == 65)
        #expect(result.key.counter == 0)
        #expect(result.receipt.count > 3000)
        #expect(result.receipt.prefix(2) == [0x30, 0x80])  // BER, indefinite length (“Receipts and the risk metric”)
        #expect(result.osVersion?.hasPrefix("14.") == true)
        #expect(result.extensions == nil)
        #expect(result.certificateChain.count == 2)
        #expect(result.clientDataHash == AppAttestSHA256.hash(vector.challenge!))
    }

    @Test("the challenge entry point equals the clientDataHash entry point")
    func challengeAndHash() throws {
        let verifier = try makeVerifier(for: vector)
        let viaChallenge = try verifier.verifyAttestation(object, keyID: vector.keyID!, challenge: vector.challenge!)
        let viaHash = try verifier.verifyAttestation(
            object, keyID: vector.keyID!, clientDataHash: vector.clientDataHash!)
        #expect(viaChallenge == viaHash)
        // Hashing the hash again is a different clientDataHash: never a "try both" fallback (“Security model”).
        expectCode(.nonceMismatch) {
            _ = try verifier.verifyAttestation(object, keyID: vector.keyID!, challenge: vector.clientDataHash!)
        }
    }

    @Test("Apple's 2024 documentation sample verifies with the raw challenge as clientDataHash, with extensions absent")
    func appleSample() throws {
        let sample = realVector("apple-docs-2024-sample")
        let verifier = try makeVerifier(for: sample)
        let result = try verifier.verifyAttestation(
            sample.attestation!, keyID: sample.keyID!, clientDataHash: sample.clientDataHash!)
        #expect(result.key.environment == .production)
    }

    @Test("an iOS 26 leaf (2026) exposes its OS version")
    func leaf2026() throws {
        let summary = try CertificateSummary(
            derEncoded: try AttestationObject(
                cborEncoded: realVector("appattestdecoder-2026-01-14-M7PB4PDJAS").attestation!
            ).certificateChain[0])
        #expect(summary.osVersion == "26.2")
        #expect(summary.appID == "M7PB4PDJAS.DanylchukStudios.AppAttestDecoderTestApp")
        #expect(summary.appAttestNonce?.count == 64)
        #expect(summary.issuer.contains("Apple App Attestation CA 1"))
    }

    // MARK: certificateChain

    @Test("x5c must hold exactly the leaf and the intermediate, ending at Apple's root")
    func chainShapes() throws {
        let chain = try AttestationObject(cborEncoded: object).certificateChain
        let root = TrustAnchor.appleAppAttestationRoot.derRepresentation
        let warmed = try makeVerifier(for: vector)
        _ = try verify(object, using: warmed)  // the intermediate is now cached
        for (name, verifier) in [("fresh", try makeVerifier(for: vector)), ("cached", warmed)] {
            expectCode(.certificateChain, "\(name): leaf only") {
                _ = try verify(withChain([chain[0]]), using: verifier)
            }
            expectCode(.certificateChain, "\(name): leaf twice") {
                _ = try verify(withChain([chain[0], chain[0]]), using: verifier)
            }
            expectCode(.certificateChain, "\(name): leaf and root") {
                _ = try verify(withChain([chain[0], root]), using: verifier)
            }
            expectCode(.certificateChain, "\(name): intermediate first") {
                _ = try verify(withChain([chain[1], chain[0]]), using: verifier)
            }
            expectCode(.certificateChain, "\(name): intermediate twice") {
                _ = try verify(withChain([chain[1], chain[1]]), using: verifier)
            }
            expectCode(.certificateChain, "\(name): root as leaf") {
                _ = try verify(withChain([root, chain[1]]), using: verifier)
            }
            expectCode(.certificateChain, "\(name): three certificates") {
                _ = try verify(withChain([chain[0], chain[1], root]), using: verifier)
            }
            expectCode(.malformed, "\(name): garbage leaf") {
                _ = try verify(withChain([[0x30, 0x03, 0x02, 0x01, 0x00], chain[1]]), using: verifier)
            }
            expectCode(.malformed, "\(name): garbage intermediate") {
                _ = try verify(withChain([chain[0], [0x30, 0x00]]), using: verifier)
            }
            expectCode(.malformed, "\(name): leaf with a trailing byte") {
                _ = try verify(withChain([chain[0] + [0], chain[1]]), using: verifier)
            }
        }
    }

    @Test("a leaf whose signature is altered is refused, before and after the intermediate is cached")
    func forgedLeafSignature() throws {
        let chain = try AttestationObject(cborEncoded: object).certificateChain
        var forged = chain[0]
        forged[forged.count - 1] ^= 0x01  // last byte of the ECDSA signature's s
        let fresh = try makeVerifier(for: vector)
        expectCode(.certificateChain, "fresh verifier") { _ = try verify(withChain([forged, chain[1]]), using: fresh) }
        _ = try verify(object, using: fresh)  // caches the intermediate
        expectCode(.certificateChain, "cached intermediate") {
            _ = try verify(withChain([forged, chain[1]]), using: fresh)
        }
        _ = try verify(object, using: fresh)
    }

    @Test("an intermediate whose signature is altered is refused even after the genuine one was cached")
    func forgedIntermediate() throws {
        let chain = try AttestationObject(cborEncoded: object).certificateChain
        var forged = chain[1]
        forged[forged.count - 1] ^= 0x01
        let verifier = try makeVerifier(for: vector)
        _ = try verify(object, using: verifier)
        expectCode(.certificateChain) { _ = try verify(withChain([chain[0], forged]), using: verifier) }
    }

    @Test("another trust anchor refuses Apple's chain; the intermediate as anchor is no partial chain")
    func otherAnchors() throws {
        let chain = try AttestationObject(cborEncoded: object).certificateChain
        for anchor in [chain[1], chain[0]] {
            let verifier = try AppAttestVerifier(
                configuration: .init(
                    appID: vector.appID, environment: .development,
                    trustAnchor: .customRootForTesting(derRepresentation: anchor),
                    verificationTime: .fixed(vector.verifyAt!)))
            expectCode(.certificateChain) { _ = try verify(object, using: verifier) }
        }
    }

    // MARK: certificateValidity and time

    @Test("validity is judged at the verification time, with the configured leeway")
    func validityAndLeeway() throws {
        let expired = realVector("NEG-after-leaf-expiry")  // verifyAt = leaf notAfter + 1 day
        let strict = try makeVerifier(for: expired)
        expectCode(.certificateValidity) {
            _ = try strict.verifyAttestation(expired.attestation!, keyID: expired.keyID!, challenge: expired.challenge!)
        }
        let halfDay = try makeVerifier(for: expired, leeway: 12 * 3600)
        expectCode(.certificateValidity) {
            _ = try halfDay.verifyAttestation(
                expired.attestation!, keyID: expired.keyID!, challenge: expired.challenge!)
        }
        let twoDays = try makeVerifier(for: expired, leeway: 2 * 86400)
        #expect(throws: Never.self) {
            try twoDays.verifyAttestation(expired.attestation!, keyID: expired.keyID!, challenge: expired.challenge!)
        }

        let early = realVector("NEG-before-leaf-notBefore")  // leaf notBefore - 1 hour
        let twoHours = try makeVerifier(for: early, leeway: 7200)
        #expect(throws: Never.self) {
            try twoHours.verifyAttestation(early.attestation!, keyID: early.keyID!, challenge: early.challenge!)
        }
    }

    @Test("the cached intermediate is still checked for validity, and so is the root")
    func cachedValidity() throws {
        var verifier = try makeVerifier(for: vector)
        _ = try verify(object, using: verifier)
        // 2031: the intermediate (until 2030-03-13) and the leaf have expired.
        verifier.verificationTime = .fixed(Date(timeIntervalSince1970: 1_924_992_000))
        expectCode(.certificateValidity) { _ = try verify(object, using: verifier) }
        // 2050: past the root's notAfter (2045-03-15).
        verifier.verificationTime = .fixed(Date(timeIntervalSince1970: 2_524_608_000))
        expectCode(.certificateValidity) { _ = try verify(object, using: verifier) }
        // The default is the system clock: every recorded leaf has long expired.
        let now = try AppAttestVerifier(configuration: .init(appID: vector.appID, environment: .development))
        expectCode(.certificateValidity) { _ = try verify(object, using: now) }
    }

    // MARK: Other codes

    @Test("App IDs and environments come from the configuration")
    func configurationPolicy() throws {
        let other = try AppID("ABCDE12345.com.example.other")
        let both = try AppAttestVerifier(
            configuration: .init(
                apps: [other: [.production], vector.appID: [.development, .production]],
                verificationTime: .fixed(vector.verifyAt!)))
        #expect(try verify(object, using: both).key.appID == vector.appID)
        let wrongApp = try AppAttestVerifier(
            configuration: .init(
                appID: other, environment: .development, verificationTime: .fixed(vector.verifyAt!)))
        expectCode(.appIdMismatch) { _ = try verify(object, using: wrongApp) }
        let production = try AppAttestVerifier(
            configuration: .init(
                appID: vector.appID, environment: .production, verificationTime: .fixed(vector.verifyAt!)))
        expectCode(.environmentMismatch) { _ = try verify(object, using: production) }
    }

    /// The Base64 character after `character` (its value plus one).
    static func nextBase64Character(_ character: Character) -> Character {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        return alphabet[(alphabet.firstIndex(of: character)! + 1) % 64]
    }

    @Test("a keyId in Base64 or Base64URL, padded or not, is the same key; anything else is malformed")
    func keyIDs() throws {
        #expect(throws: AppAttestError.self) { try KeyID(base64Encoded: "abc") }
        #expect((try? KeyID(base64Encoded: String(repeating: "A", count: 43) + "=")) != nil)
        // Bytes chosen so that the standard spelling holds both '+' and '/'.
        let raw: [UInt8] = [0xFB, 0xFF, 0xBF] + (0..<29).map { UInt8(truncatingIfNeeded: $0 &* 37) }
        let key = try KeyID(rawValue: raw)
        let standard = key.base64EncodedString
        #expect(standard.contains("+") && standard.contains("/") && standard.hasSuffix("="))
        let url = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        for spelling in [standard, String(standard.dropLast()), url, String(url.dropLast())] {
            #expect(try KeyID(base64Encoded: spelling) == key, "\(spelling)")
        }
        // The two alphabets mixed, a wrong length or padding, characters of neither.
        let mixed = "-" + standard.dropFirst(1)
        for bad in [
            mixed, standard + "=", String(standard.dropLast(2)), String(standard.dropLast()) + "A",
            String(standard.dropLast(2)) + "==", "*" + standard.dropFirst(1),
            // The unused low bits of the last character set: another text for the same bytes, refused.
            String(standard.dropLast(2)) + String(Self.nextBase64Character(standard.dropLast().last!)) + "=",
        ] {
            #expect(throws: AppAttestError.self, "\(bad)") { try KeyID(base64Encoded: bad) }
        }
        #expect(throws: AppAttestError.self) { try KeyID(base64Encoded: String(repeating: "-", count: 43) + "==") }
        #expect(throws: AppAttestError.self) { try KeyID(rawValue: [UInt8](repeating: 0, count: 31)) }
        do { _ = try KeyID(rawValue: [1, 2, 3]) } catch { #expect(error.code == .malformed) }
    }

    @Test("invalid configurations are refused")
    func invalidConfigurations() throws {
        let app = vector.appID
        for configuration in [
            AppAttestVerifier.Configuration(apps: [:]),
            AppAttestVerifier.Configuration(apps: [app: []]),
            AppAttestVerifier.Configuration(appID: app, environment: .production, clockSkewLeeway: -1),
            AppAttestVerifier.Configuration(appID: app, environment: .production, clockSkewLeeway: .infinity),
            // Finite but absurd: it overflowed the time arithmetic and crashed the command (audit finding 8).
            AppAttestVerifier.Configuration(appID: app, environment: .production, clockSkewLeeway: 1e19),
            AppAttestVerifier.Configuration(appID: app, environment: .production, clockSkewLeeway: .nan),
            AppAttestVerifier.Configuration(
                appID: app, environment: .production,
                trustAnchor: .customRootForTesting(derRepresentation: [0x30, 0x00])),
        ] {
            expectCode(.invalidConfiguration) { _ = try AppAttestVerifier(configuration: configuration) }
        }
        for text in [
            "", "ABC.com.x", "ABCDE12345", "ABCDE12345.", "ABCDE1234!.com.x", "ABCDE12345.com x", "ÄBCDE12345.com.x",
        ] {
            expectCode(.invalidConfiguration, "\(text)") { _ = try AppID(text) }
        }
        #expect(try AppID(teamID: "ABCDE12345", bundleID: "com.example.app").bundleID == "com.example.app")
        #expect(try AppID("ABCDE12345.com.example.app").teamID == "ABCDE12345")
    }

    @Test("an OpenSSL failure unrelated to the input maps to internalCryptoFailure")
    func internalFailureMapping() {
        #expect(
            AppAttestError(chainFailure: .internalError("X509_STORE_CTX_new failed")).code == .internalCryptoFailure)
        #expect(AppAttestError(chainFailure: .unparseable("x")).code == .malformed)
        #expect(AppAttestError(chainFailure: .chain("x")).code == .certificateChain)
        #expect(AppAttestError(chainFailure: .validity("x")).code == .certificateValidity)
    }

    @Test("error codes have stable names equal to the vector reasons")
    func codeNames() {
        let reasons = [
            "malformed", "certificateChain", "certificateValidity", "nonceMismatch", "keyIdMismatch",
            "publicKeyMismatch", "appIdMismatch", "counterNotZero", "environmentMismatch", "credentialIdMismatch",
            "signatureInvalid", "counterNotIncreasing",
        ]
        for reason in reasons { #expect(AppAttestError.Code(reason)?.description == reason) }
        #expect(AppAttestError.Code.allCases.count == reasons.count + 7)
        #expect(AppAttestError.Code("nope") == nil)
    }
}
