@_spi(FixedVerificationTime) import AppAttest
import AppAttestTesting
import Foundation
import Testing

@Suite("Synthetic receipts from the test receipt authority")
struct TestReceiptTests {
    static let authority = try! TestCertificateAuthority()
    static let receipts = try! TestReceiptAuthority()
    static let appID = try! AppID("ABCDE12345.com.example.app")
    static let now = Date(timeIntervalSince1970: 1_780_000_000)

    @Test(
        "an attestation's receipt validates against the test receipt root, in BER and DER forms",
        arguments: [true, false])
    func attestationReceipt(indefinite: Bool) throws {
        let device = try SimulatedDevice(
            authority: Self.authority, appID: Self.appID, environment: .development, receiptAuthority: Self.receipts)
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Self.now
        let challenge: [UInt8] = [1, 2, 3]
        var object = try device.attest(challenge: challenge, options)
        if !indefinite {
            // Re-sign the same fields as DER.
            let verified = try verifier().verifyAttestation(object, keyID: device.keyID, challenge: challenge)
            options.receipt = try Self.receipts.sign(
                .attest(
                    appID: Self.appID, attestedCertificate: verified.certificateChain[0],
                    clientHash: verified.clientDataHash,
                    environment: .development, creationTime: Self.now), indefiniteLength: false)
            object = try device.attest(challenge: challenge, options)
        }
        let attestation = try verifier().verifyAttestation(object, keyID: device.keyID, challenge: challenge)
        #expect(attestation.receipt.prefix(2) == (indefinite ? [0x30, 0x80] : [0x30, 0x82]))
        let validator = try AppAttestReceiptValidator(
            configuration: .init(
                trustAnchor: Self.receipts.trustAnchor, verificationTime: .fixed(Self.now.addingTimeInterval(60))))
        let receipt = try validator.validate(attestation.receipt, expecting: .attestation(attestation))
        #expect(receipt.type == .attest)
        #expect(receipt.environment == .development)
        #expect(receipt.clientHash == AppAttestSHA256.hash(challenge))
        // Apple's real anchor refuses it.
        let apple = try AppAttestReceiptValidator(configuration: .init(verificationTime: .fixed(Self.now)))
        expectCode(.certificateChain) {
            _ = try apple.validate(attestation.receipt, expecting: .attestation(attestation))
        }
    }

    @Test("refreshed receipts carry the risk metric, not-before and expiration; an expired signer is refused")
    func refreshed() throws {
        let device = try SimulatedDevice(authority: Self.authority, appID: Self.appID, receiptAuthority: Self.receipts)
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Self.now
        let attestation = try verifier().verifyAttestation(
            try device.attest(challenge: [7], options), keyID: device.keyID, challenge: [7])
        let later = Self.now.addingTimeInterval(2 * 86_400)
        let fields = TestReceiptAuthority.Fields.attest(
            appID: Self.appID, attestedCertificate: attestation.certificateChain[0],
            clientHash: attestation.clientDataHash,
            environment: .production, creationTime: Self.now
        ).refreshed(at: later, riskMetric: 3)
        let bytes = try Self.receipts.sign(fields, indefiniteLength: false)
        let validator = try AppAttestReceiptValidator(
            configuration: .init(
                trustAnchor: Self.receipts.trustAnchor, verificationTime: .fixed(later.addingTimeInterval(10))))
        let receipt = try validator.validate(
            bytes,
            expecting: .init(
                appID: Self.appID, publicKey: attestation.key.publicKey, type: .receipt, environment: .production,
                freshlyReceived: true))
        #expect(receipt.riskMetric == 3)
        #expect(receipt.notBefore == later.addingTimeInterval(86_400))
        #expect(receipt.type == .receipt)
        let expiredSigner = try TestReceiptAuthority(signerNotValidAfter: Self.now)
        let expiredBytes = try expiredSigner.sign(fields)
        let expiredValidator = try AppAttestReceiptValidator(
            configuration: .init(
                trustAnchor: expiredSigner.trustAnchor, verificationTime: .fixed(later)))
        expectCode(.certificateValidity) {
            _ = try expiredValidator.validate(
                expiredBytes,
                expecting: .init(appID: Self.appID, publicKey: attestation.key.publicKey, freshlyReceived: false))
        }
    }

    /// A verified attestation and the ATTEST fields of its receipt, created at `now`.
    func attestedFields() throws -> (VerifiedAttestation, TestReceiptAuthority.Fields) {
        let device = try SimulatedDevice(authority: Self.authority, appID: Self.appID, receiptAuthority: Self.receipts)
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Self.now
        let attestation = try verifier().verifyAttestation(
            try device.attest(challenge: [9], options), keyID: device.keyID, challenge: [9])
        let fields = TestReceiptAuthority.Fields.attest(
            appID: Self.appID, attestedCertificate: attestation.certificateChain[0],
            clientHash: attestation.clientDataHash, environment: .production, creationTime: Self.now)
        return (attestation, fields)
    }

    @Test("a signer that chains to the receipt root but is not Apple's receipt-signing certificate is refused")
    func foreignSigner() throws {
        let (attestation, fields) = try attestedFields()
        let foreign = try TestReceiptAuthority(imitatesAppleSigner: false)
        let validator = try AppAttestReceiptValidator(
            configuration: .init(trustAnchor: foreign.trustAnchor, verificationTime: .fixed(Self.now)))
        expectCode(.certificateChain) {
            _ = try validator.validate(
                try foreign.sign(fields),
                expecting: .init(appID: Self.appID, publicKey: attestation.key.publicKey, freshlyReceived: true))
        }
        // The same fields from the authority shaped like Apple's pass.
        let genuine = try AppAttestReceiptValidator(
            configuration: .init(trustAnchor: Self.receipts.trustAnchor, verificationTime: .fixed(Self.now)))
        _ = try genuine.validate(
            try Self.receipts.sign(fields),
            expecting: .init(appID: Self.appID, publicKey: attestation.key.publicKey, freshlyReceived: true))
    }

    @Test("the risk metric is read from RECEIPT receipts only")
    func riskMetricOnlyFromRefreshedReceipts() throws {
        var (attestation, fields) = try attestedFields()
        fields.riskMetric = 7
        let validator = try AppAttestReceiptValidator(
            configuration: .init(trustAnchor: Self.receipts.trustAnchor, verificationTime: .fixed(Self.now)))
        let receipt = try validator.validate(
            try Self.receipts.sign(fields),
            expecting: .init(appID: Self.appID, publicKey: attestation.key.publicKey, freshlyReceived: true))
        #expect(receipt.type == .attest)
        #expect(receipt.riskMetric == nil)
    }

    @Test("a creation time in the future, beyond the leeway, is refused for fresh and stored receipts alike")
    func createdInTheFuture() throws {
        var (attestation, fields) = try attestedFields()
        fields.creationTime = Self.now.addingTimeInterval(3600)
        let bytes = try Self.receipts.sign(fields)
        let validator = try AppAttestReceiptValidator(
            configuration: .init(trustAnchor: Self.receipts.trustAnchor, verificationTime: .fixed(Self.now)))
        for fresh in [true, false] {
            expectCode(.receiptFromTheFuture) {
                _ = try validator.validate(
                    bytes,
                    expecting: .init(appID: Self.appID, publicKey: attestation.key.publicKey, freshlyReceived: fresh)
                )
            }
        }
        // Within the leeway (a minute by default) it passes.
        fields.creationTime = Self.now.addingTimeInterval(30)
        _ = try validator.validate(
            try Self.receipts.sign(fields),
            expecting: .init(appID: Self.appID, publicKey: attestation.key.publicKey, freshlyReceived: true))
    }

    func verifier() throws -> AppAttestVerifier {
        try AppAttestVerifier(
            configuration: .init(
                apps: [Self.appID: [.development, .production]], trustAnchor: Self.authority.trustAnchor,
                verificationTime: .fixed(Self.now)))
    }
}
