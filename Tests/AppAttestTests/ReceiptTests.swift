@_spi(FixedVerificationTime) import AppAttest
import AppAttestVectors
import Foundation
import Testing

@Suite("Receipts")
struct ReceiptTests {
    /// Every attestation that verifies, from the real-device file and Apple's 2026 sample.
    static let attestations: [TestVector] = {
        var vectors: [TestVector] = []
        for name in ["real-devices.json", "apple-docs-2026.json"] {
            for case .vector(let vector) in try! loadVectorFile(name).entries
            where vector.kind == .attestation && vector.expect == .valid(counter: nil) {
                vectors.append(vector)
            }
        }
        return vectors
    }()
    static let ids = attestations.map(\.id)

    func vector(_ id: String) -> TestVector { Self.attestations.first { $0.id == id }! }

    func attested(_ vector: TestVector) throws -> VerifiedAttestation {
        try makeVerifier(for: vector).verifyAttestation(
            vector.attestation!, keyID: vector.keyID!, clientDataHash: vector.clientDataHash!)
    }

    func validator(at date: Date) throws -> AppAttestReceiptValidator {
        try AppAttestReceiptValidator(configuration: .init(verificationTime: .fixed(date)))
    }

    @Test("the receipt of every real attestation validates at its verifyAt, with its fields", arguments: ids)
    func realReceipt(_ id: String) throws {
        let vector = vector(id)
        let attestation = try attested(vector)
        let receipt = try validator(at: vector.verifyAt!).validate(
            attestation.receipt, expecting: .attestation(attestation, freshlyReceived: false))
        #expect(receipt.appID == vector.appID.rawValue, "\(id)")
        #expect(receipt.type == .attest, "\(id)")
        #expect(receipt.environment == vector.environment, "\(id): \(receipt.environmentName ?? "-")")
        #expect(receipt.clientHash == vector.clientDataHash, "\(id)")
        #expect(receipt.attestedPublicKey == attestation.key.publicKey.x963Representation, "\(id)")
        #expect(receipt.attestedCertificate == attestation.certificateChain[0], "\(id)")
        #expect(receipt.riskMetric == nil, "\(id): ATTEST receipts carry no metric")
        #expect(receipt.token.count == 88 || !receipt.token.isEmpty, "\(id)")
        #expect(abs(receipt.creationTime.timeIntervalSince(vector.verifyAt!)) < 2 * 86_400, "\(id)")
        if let expiration = receipt.expirationTime {
            #expect(abs(expiration.timeIntervalSince(receipt.creationTime) - 90 * 86_400) < 86_400, "\(id): 90 days")
        }
    }

    @Test("Apple's 2026 sample receipt: every field")
    func appleSample() throws {
        let vector = vector("apple-docs-2026-sample")
        let attestation = try attested(vector)
        let receipt = try validator(at: vector.verifyAt!).validate(
            attestation.receipt, expecting: .attestation(attestation, freshlyReceived: false))
        #expect(receipt.appID == "1234567890.com.example.myapp")
        #expect(receipt.environmentName == "production")
        #expect(receipt.clientHash == Array("example_server_challenge".utf8))
        #expect(receipt.creationTime == AppAttestReceiptTestsSupport.date("2026-04-21T18:13:12.153Z"))
        #expect(receipt.expirationTime == AppAttestReceiptTestsSupport.date("2026-07-20T18:13:12.153Z"))
        #expect(
            receipt.token == "rbktMq89mvDpRCK/8lcPhdL4dWQz9OXIwHGde5xQfSuIKsN3OjOWF8u+v0UA4q8vjCRgEEJTlc9BwiIzNSNOHQ==")
        #expect(receipt.rawRepresentation.prefix(2) == [0x30, 0x80])  // BER, indefinite length
        let signer = try CertificateSummary(derEncoded: receipt.signerCertificate)
        #expect(signer.subject.contains("Application Attestation Fraud Receipt Signing"))
    }

    @Test("each expectation is enforced")
    func mismatches() throws {
        let vector = vector("veehaitch-2020-11-21-6MURL8TA57")
        let attestation = try attested(vector)
        let validator = try validator(at: vector.verifyAt!)
        let base = AppAttestReceiptValidator.Expectation.attestation(attestation, freshlyReceived: false)
        var other = base
        other.appID = try AppID("ABCDE12345.com.example.other")
        expectCode(.appIdMismatch) { _ = try validator.validate(attestation.receipt, expecting: other) }
        other = base
        other.publicKey = try AttestedPublicKey(x963Representation: realVector("basd-2021-04-14-assertion").publicKey!)
        expectCode(.publicKeyMismatch) { _ = try validator.validate(attestation.receipt, expecting: other) }
        other = base
        other.clientDataHash = [UInt8](repeating: 0, count: 32)
        expectCode(.clientHashMismatch) { _ = try validator.validate(attestation.receipt, expecting: other) }
        other = base
        other.type = .receipt
        expectCode(.receiptTypeMismatch) { _ = try validator.validate(attestation.receipt, expecting: other) }
        other = base
        other.environment = .production
        expectCode(.environmentMismatch) { _ = try validator.validate(attestation.receipt, expecting: other) }
        // Fresh receipts: at most five minutes old (“Receipts and the risk metric”); the vector's verifyAt is hours
        // after creation.
        other = base
        other.freshlyReceived = true
        let receipt = try validator.validate(attestation.receipt, expecting: base)
        let fresh = try self.validator(at: receipt.creationTime.addingTimeInterval(299))
        #expect(throws: Never.self) { try fresh.validate(attestation.receipt, expecting: other) }
        let stale = try self.validator(at: receipt.creationTime.addingTimeInterval(301))
        expectCode(.receiptTooOld) { _ = try stale.validate(attestation.receipt, expecting: other) }
    }

    @Test("the signer's chain ends at Apple Root CA - G3 at the verification time, never at the embedded copy")
    func chain() throws {
        let vector = vector("veehaitch-2020-11-21-6MURL8TA57")
        let attestation = try attested(vector)
        let expectation = AppAttestReceiptValidator.Expectation.attestation(attestation, freshlyReceived: false)
        // The 2020 signer expired on 2021-06-18.
        expectCode(.certificateValidity) {
            _ = try validator(at: Date(timeIntervalSince1970: 1_640_000_000)).validate(
                attestation.receipt, expecting: expectation)
        }
        // Anchored at the App Attestation root instead: no path.
        let wrongRoot = try AppAttestReceiptValidator(
            configuration: .init(
                trustAnchor: .appleAppAttestationRoot, verificationTime: .fixed(vector.verifyAt!)))
        expectCode(.certificateChain) { _ = try wrongRoot.validate(attestation.receipt, expecting: expectation) }
        // G3 is pinned by its hash.
        #expect(
            AppAttestSHA256.hash(TrustAnchor.appleRootCAG3.derRepresentation).hexString
                == "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
    }

    @Test("hostile receipts are malformed or have an invalid signature")
    func hostile() throws {
        let vector = vector("veehaitch-2020-11-21-6MURL8TA57")
        let attestation = try attested(vector)
        let validator = try validator(at: vector.verifyAt!)
        let expectation = AppAttestReceiptValidator.Expectation.attestation(attestation, freshlyReceived: false)
        let receipt = attestation.receipt
        expectCode(.malformed, "empty") { _ = try validator.validate([], expecting: expectation) }
        expectCode(.malformed, "trailing") { _ = try validator.validate(receipt + [0], expecting: expectation) }
        expectCode(.malformed, "oversized") {
            _ = try validator.validate([UInt8](repeating: 0x30, count: 70_000), expecting: expectation)
        }
        for length in stride(from: 0, to: receipt.count, by: 97) {
            expectCode(.malformed, "prefix \(length)") {
                _ = try validator.validate(Array(receipt.prefix(length)), expecting: expectation)
            }
        }
        // A flipped byte in the payload breaks the signature.
        var flipped = receipt
        let payloadOffset = receipt.firstRange(of: Array("6MURL8TA57".utf8))!.lowerBound
        flipped[payloadOffset] ^= 0x01
        expectCode(.signatureInvalid) { _ = try validator.validate(flipped, expecting: expectation) }
    }
}

extension ReceiptTests {
    @Test("2020 receipts signed over the content despite signed attributes: accepted as Apple made them, nothing else")
    func legacySignatureForm() throws {
        let vector = vector("veehaitch-2020-08-16-6MURL8TA57")
        let attestation = try attested(vector)
        let validator = try validator(at: vector.verifyAt!)
        let expectation = AppAttestReceiptValidator.Expectation.attestation(attestation, freshlyReceived: false)
        #expect(throws: Never.self) { try validator.validate(attestation.receipt, expecting: expectation) }
        // A changed payload byte breaks both the messageDigest attribute and the signature over the content.
        var flipped = attestation.receipt
        let offset = flipped.firstRange(of: Array("6MURL8TA57".utf8))!.lowerBound
        flipped[offset] ^= 0x01
        expectCode(.signatureInvalid, "payload") { _ = try validator.validate(flipped, expecting: expectation) }
        // A changed messageDigest attribute (the content and its signature intact) is refused too.
        let messageDigestAttribute: [UInt8] = [
            0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x04, 0x31, 0x22, 0x04, 0x20,
        ]
        var wrongDigest = attestation.receipt
        let at = wrongDigest.firstRange(of: messageDigestAttribute)!.upperBound
        wrongDigest[at] ^= 0x01
        expectCode(.signatureInvalid, "messageDigest") {
            _ = try validator.validate(wrongDigest, expecting: expectation)
        }
    }
}

enum AppAttestReceiptTestsSupport {
    static func date(_ text: String) -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)!
    }
}
