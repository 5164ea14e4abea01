internal import AppAttestCrypto
public import Foundation
internal import SwiftASN1

/// An App Attest receipt: the CMS-signed statement Apple attaches to an attestation (type ATTEST) or returns from
/// the refresh endpoint (type RECEIPT), carrying the risk metric (<doc:ReceiptsAndRiskMetric>).
///
/// Only ``AppAttestReceiptValidator`` creates one, after the signature and the signer's chain to Apple Root CA -
/// G3 have been verified; ``AppAttestReceipt/inspect(_:)`` reads the fields of an unverified receipt for display.
public struct AppAttestReceipt: Sendable, Hashable {
    /// Field 6.
    public enum ReceiptType: Sendable, Hashable, CustomStringConvertible {
        /// From an attestation.
        case attest
        /// From the refresh endpoint.
        case receipt
        /// A value this library does not know.
        case other(String)

        init(_ text: String) {
            switch text {
            case "ATTEST": self = .attest
            case "RECEIPT": self = .receipt
            default: self = .other(text)
            }
        }

        public var description: String {
            switch self {
            case .attest: return "ATTEST"
            case .receipt: return "RECEIPT"
            case .other(let text): return text
            }
        }
    }

    /// The receipt as received (CMS, BER or DER).
    public let rawRepresentation: [UInt8]
    /// Field 2: `TEAMID.bundle.id`.
    public let appID: String
    /// Field 3: the attested key's certificate (the credCert), DER.
    public let attestedCertificate: [UInt8]
    /// The public point of ``attestedCertificate``.
    public let attestedPublicKey: [UInt8]?
    /// Field 4: the clientDataHash given to `attestKey`.
    public let clientHash: [UInt8]
    /// Field 5: an opaque token.
    public let token: String
    /// Field 6.
    public let type: ReceiptType
    /// Field 7 as written (`sandbox` or `production`; not documented by Apple).
    public let environmentName: String?
    /// Field 12.
    public let creationTime: Date
    /// Field 17: roughly how many keys the device attested for the app in the last 30 days (RECEIPT only).
    public let riskMetric: Int?
    /// Field 19: when the receipt may be refreshed (RECEIPT only).
    public let notBefore: Date?
    /// Field 21.
    public let expirationTime: Date?
    /// The certificate that signed the receipt, DER.
    public let signerCertificate: [UInt8]

    /// Field 7 as an environment: `sandbox` is development.
    public var environment: AppAttestEnvironment? {
        switch environmentName {
        case "production": return .production
        case "sandbox": return .development
        default: return nil
        }
    }

    /// Reads an unverified receipt for display: signature and chain are not checked, and the result says so
    /// by being a plain summary. Use ``AppAttestReceiptValidator`` to trust a receipt.
    /// - Throws: ``AppAttestError/Code/malformed`` or ``AppAttestError/Code/signatureInvalid``.
    public static func inspect(_ bytes: some Collection<UInt8>) throws(AppAttestError) -> AppAttestReceipt {
        let message = try signedData(Array(bytes))
        return try AppAttestReceipt(message: message, raw: Array(bytes))
    }

    static func signedData(_ bytes: [UInt8]) throws(AppAttestError) -> CMSSignedData {
        do { return try CMSSignedData(verifyingSignatureOf: bytes) } catch {
            switch error {
            case .malformed(let message): throw AppAttestError(.malformed, "receipt: \(message)")
            case .signature(let message): throw AppAttestError(.signatureInvalid, "receipt signature: \(message)")
            }
        }
    }

    init(message: CMSSignedData, raw: [UInt8]) throws(AppAttestError) {
        let fields = try Self.fields(message.content)
        func text(_ type: Int) -> String? { fields[type].flatMap { String(validating: $0, as: UTF8.self) } }
        func date(_ type: Int) throws(AppAttestError) -> Date? {
            guard let value = text(type) else { return nil }
            guard let date = Self.parseDate(value) else {
                throw AppAttestError(.malformed, "receipt field \(type) is not an ISO 8601 time")
            }
            return date
        }
        guard let appID = text(2) else { throw AppAttestError(.malformed, "receipt has no App ID (field 2)") }
        guard let certificate = fields[3] else {
            throw AppAttestError(.malformed, "receipt has no attested key (field 3)")
        }
        guard let type = text(6) else { throw AppAttestError(.malformed, "receipt has no type (field 6)") }
        guard let creation = try date(12) else {
            throw AppAttestError(.malformed, "receipt has no creation time (field 12)")
        }
        self.rawRepresentation = raw
        self.appID = appID
        self.attestedCertificate = certificate
        self.attestedPublicKey = (try? X509Certificate(derEncoded: certificate))?.publicKeyInfo.point
        self.clientHash = fields[4] ?? []
        self.token = text(5) ?? ""
        self.type = ReceiptType(type)
        self.environmentName = text(7)
        self.creationTime = creation
        // The risk metric belongs to receipts from the refresh endpoint; an ATTEST receipt carrying field 17 says
        // nothing Apple documents, so it is not read.
        if self.type == .receipt, let metric = text(17) {
            guard let value = Int(metric), value >= 0 else {
                throw AppAttestError(.malformed, "receipt risk metric (field 17) is not a number")
            }
            self.riskMetric = value
        } else {
            self.riskMetric = nil
        }
        self.notBefore = try date(19)
        self.expirationTime = try date(21)
        self.signerCertificate = message.signer.derBytes
    }

    /// `SET OF SEQUENCE { INTEGER type, INTEGER version, OCTET STRING value }`, looked up by type, never by
    /// position (<doc:ReceiptsAndRiskMetric>). Unknown types are ignored; a type given twice is malformed.
    static func fields(_ payload: [UInt8]) throws(AppAttestError) -> [Int: [UInt8]] {
        let root: ASN1Node
        do { root = try BER.parse(payload) } catch {
            throw AppAttestError(.malformed, "receipt payload is not ASN.1")
        }
        guard root.identifier == .set, case .constructed(let attributes) = root.content else {
            throw AppAttestError(.malformed, "receipt payload is not a SET")
        }
        var fields: [Int: [UInt8]] = [:]
        for attribute in attributes {
            guard attribute.identifier == .sequence, case .constructed(let parts) = attribute.content else {
                throw AppAttestError(.malformed, "a receipt attribute is not a SEQUENCE")
            }
            let items = Array(parts)
            guard items.count == 3, let type = smallInteger(items[0]), smallInteger(items[1]) != nil,
                items[2].identifier == .octetString, case .primitive(let value) = items[2].content
            else { throw AppAttestError(.malformed, "a receipt attribute is not { type, version, value }") }
            guard fields[type] == nil else { throw AppAttestError(.malformed, "receipt field \(type) appears twice") }
            fields[type] = Array(value)
        }
        return fields
    }

    private static func smallInteger(_ node: ASN1Node) -> Int? {
        guard node.identifier == .integer, case .primitive(let bytes) = node.content, (1...4).contains(bytes.count),
            bytes.first! < 0x80
        else { return nil }
        return bytes.reduce(0) { $0 << 8 | Int($1) }
    }

    static func parseDate(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// Validates App Attest receipts (<doc:ReceiptsAndRiskMetric>): the signature, the signer's chain to Apple Root
/// CA - G3 at the verification time (the root copy inside the receipt is ignored), the App ID, the attested key, the client
/// hash of ATTEST receipts, the type and environment, and the five-minute creation rule for freshly received
/// receipts only.
public struct AppAttestReceiptValidator: Sendable {
    /// What the validator accepts.
    public struct Configuration: Sendable {
        /// The root the signer must chain to: Apple Root CA - G3 by default.
        public var trustAnchor: TrustAnchor
        /// When the signer's certificates must be valid; pin it for recorded receipts (signers rotate yearly).
        public var verificationTime: AppAttestVerifier.VerificationTime
        /// How old a freshly received receipt may be (Apple: five minutes).
        public var maximumAge: TimeInterval
        /// How far in the future a receipt's creation time may be, for clock skew (a minute by default, at most a
        /// week). Beyond it the receipt is refused with `receiptFromTheFuture`.
        public var clockSkewLeeway: TimeInterval

        /// - Parameters:
        ///   - trustAnchor: the root the signer must chain to.
        ///   - verificationTime: when the signer's certificates must be valid.
        ///   - maximumAge: how old a freshly received receipt may be, in seconds.
        ///   - clockSkewLeeway: how far in the future a creation time may be, in seconds (0 to a week).
        public init(
            trustAnchor: TrustAnchor = .appleRootCAG3, verificationTime: AppAttestVerifier.VerificationTime = .now,
            maximumAge: TimeInterval = 300, clockSkewLeeway: TimeInterval = 60
        ) {
            self.trustAnchor = trustAnchor
            self.verificationTime = verificationTime
            self.maximumAge = maximumAge
            self.clockSkewLeeway = clockSkewLeeway
        }
    }

    /// What a receipt must match.
    public struct Expectation: Sendable {
        /// Field 2.
        public var appID: AppID
        /// Field 3 must carry this key.
        public var publicKey: AttestedPublicKey
        /// Field 4, for ATTEST receipts: the attestation's clientDataHash. nil skips the check.
        public var clientDataHash: [UInt8]?
        /// Field 6, if it must be one type.
        public var type: AppAttestReceipt.ReceiptType?
        /// Field 7, if it must be one environment.
        public var environment: AppAttestEnvironment?
        /// Apply the five-minute creation rule: true for a receipt just received from Apple (in an attestation
        /// or a refresh response), false for a stored one you re-validate or are about to refresh
        /// (<doc:ReceiptsAndRiskMetric>).
        public var freshlyReceived: Bool

        /// What a receipt must match; `freshlyReceived` chooses the five-minute creation rule.
        public init(
            appID: AppID, publicKey: AttestedPublicKey, clientDataHash: [UInt8]? = nil,
            type: AppAttestReceipt.ReceiptType? = nil, environment: AppAttestEnvironment? = nil,
            freshlyReceived: Bool
        ) {
            self.appID = appID
            self.publicKey = publicKey
            self.clientDataHash = clientDataHash
            self.type = type
            self.environment = environment
            self.freshlyReceived = freshlyReceived
        }

        /// What the receipt inside a verified attestation must match (type ATTEST, same key, App ID, client
        /// hash and environment).
        public static func attestation(_ attestation: VerifiedAttestation, freshlyReceived: Bool = true) -> Expectation
        {
            Expectation(
                appID: attestation.key.appID, publicKey: attestation.key.publicKey,
                clientDataHash: attestation.clientDataHash,
                type: .attest, environment: attestation.key.environment, freshlyReceived: freshlyReceived)
        }
    }

    /// The configuration this validator was built from.
    public let configuration: Configuration
    private let chainVerifier: ChainVerifier

    /// - Throws: ``AppAttestError/Code/invalidConfiguration`` when the trust anchor is unusable, or the maximum age
    ///   or the leeway is out of range.
    public init(configuration: Configuration = .init()) throws(AppAttestError) {
        guard configuration.maximumAge >= 0, configuration.maximumAge.isFinite else {
            throw AppAttestError(.invalidConfiguration, "the maximum receipt age must be a finite, non-negative number")
        }
        guard (0...AppAttestVerifier.maximumClockSkewLeeway).contains(configuration.clockSkewLeeway) else {
            throw AppAttestError(
                .invalidConfiguration, "the clock skew leeway must be from 0 to 604800 seconds (a week)")
        }
        do {
            chainVerifier = try ChainVerifier(
                root: try X509Certificate(derEncoded: configuration.trustAnchor.derRepresentation))
        } catch {
            throw AppAttestError(.invalidConfiguration, "receipt trust anchor: \(error)")
        }
        self.configuration = configuration
    }

    /// Validates a receipt.
    /// - Throws: ``AppAttestError`` with the first failed check's code: `malformed`, `signatureInvalid`,
    ///   `certificateChain`, `certificateValidity`, `appIdMismatch`, `publicKeyMismatch`, `clientHashMismatch`,
    ///   `receiptTypeMismatch`, `environmentMismatch`, `receiptTooOld`.
    public func validate(_ bytes: some Collection<UInt8>, expecting expectation: Expectation) throws(AppAttestError)
        -> AppAttestReceipt
    {
        let raw = Array(bytes)
        // Steps 1–2: the signature, then the signer's chain to the pinned root.
        let message = try AppAttestReceipt.signedData(raw)
        let now = configuration.verificationTime.date
        do {
            try chainVerifier.verifyPath(
                leaf: message.signer, untrusted: message.certificates,
                at: Int64(now.timeIntervalSince1970.rounded(.down)))
        } catch {
            throw AppAttestError(chainFailure: error)
        }
        // Chaining to Apple Root CA - G3 is not identity: that root certifies many Apple services. Only Apple's
        // receipt-signing certificate, issued by its App Attest intermediate, may sign receipts.
        try Self.requireReceiptSigner(message.signer, among: message.certificates)
        // Step 3: the payload.
        let receipt = try AppAttestReceipt(message: message, raw: raw)
        // Step 4: the App ID.
        guard receipt.appID == expectation.appID.rawValue else {
            throw AppAttestError(.appIdMismatch, "receipt App ID is not \(expectation.appID)")
        }
        // Step 6: the attested key (field 3 is a certificate, “Receipts and the risk metric”).
        guard receipt.attestedPublicKey == expectation.publicKey.x963Representation else {
            throw AppAttestError(.publicKeyMismatch, "the receipt's attested certificate carries another key")
        }
        if let hash = expectation.clientDataHash, receipt.type == .attest, !constantTimeEquals(receipt.clientHash, hash)
        {
            throw AppAttestError(.clientHashMismatch, "receipt client hash ≠ the attestation's clientDataHash")
        }
        if let type = expectation.type, receipt.type != type {
            throw AppAttestError(.receiptTypeMismatch, "a \(receipt.type) receipt, expected \(type)")
        }
        if let environment = expectation.environment, receipt.environment != environment {
            throw AppAttestError(
                .environmentMismatch,
                "a \(receipt.environmentName ?? "no-environment") receipt, expected \(environment.rawValue)")
        }
        // No receipt is created after the verification time (beyond the clock skew leeway), fresh or stored.
        guard receipt.creationTime.timeIntervalSince(now) <= configuration.clockSkewLeeway else {
            throw AppAttestError(.receiptFromTheFuture, "receipt created after the verification time")
        }
        // Step 5: at most five minutes old, for fresh receipts only.
        if expectation.freshlyReceived {
            let age = now.timeIntervalSince(receipt.creationTime)
            guard age <= configuration.maximumAge else {
                throw AppAttestError(.receiptTooOld, "receipt created \(Int(age)) s before the verification time")
            }
        }
        return receipt
    }

    /// What every receipt-signing certificate of Apple's carries, and its issuer too (“Receipts and the risk metric”).
    static let signerCommonName = "Application Attestation Fraud Receipt Signing"
    static let signerMarker = "1.2.840.113635.100.12.15"
    static let intermediateMarker = "1.2.840.113635.100.6.2.3"
    static let keyUsage = "2.5.29.15"
    static let extendedKeyUsage = "2.5.29.37"
    /// `BIT STRING` with digitalSignature alone.
    static let digitalSignatureOnly: [UInt8] = [0x03, 0x02, 0x07, 0x80]

    /// Refuses a signer that is not Apple's receipt-signing certificate: its subject, its key usage
    /// (digitalSignature alone, critical), no extended key usage, Apple's marker extension, and an issuer with the
    /// App Attest intermediate's marker.
    static func requireReceiptSigner(_ signer: X509Certificate, among certificates: [X509Certificate])
        throws(AppAttestError)
    {
        let extensions = signer.extensions
        guard signer.subjectCommonName == signerCommonName else {
            throw AppAttestError(.certificateChain, "the receipt signer is not Apple's receipt-signing certificate")
        }
        guard case .value = X509Certificate.extensionValue(oid: signerMarker, in: extensions) else {
            throw AppAttestError(.certificateChain, "the receipt signer lacks Apple's receipt-signing marker")
        }
        guard extensions.contains(where: { $0.oid == keyUsage && $0.isCritical && $0.value == digitalSignatureOnly }),
            case .absent = X509Certificate.extensionValue(oid: extendedKeyUsage, in: extensions)
        else {
            throw AppAttestError(.certificateChain, "the receipt signer's key usage is not digitalSignature alone")
        }
        let issuer = signer.issuer
        guard let intermediate = certificates.first(where: { $0.subject == issuer }),
            case .value = intermediate.extensionValue(oid: intermediateMarker)
        else {
            throw AppAttestError(.certificateChain, "the receipt signer's issuer is not Apple's receipt intermediate")
        }
    }
}
