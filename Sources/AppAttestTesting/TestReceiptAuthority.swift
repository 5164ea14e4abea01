public import AppAttest
import Crypto
public import Foundation
import SwiftASN1
import X509

/// A receipt-signing authority shaped like Apple's (“Receipts and the risk metric”): a P-384 root standing in for Apple
/// Root CA - G3, a P-256 intermediate with Apple's intermediate marker, and a P-256 signer with the subject, key usage
/// and marker extension of Apple's receipt-signing certificate, that signs receipts as CMS SignedData without signed
/// attributes, the signature over the payload itself. Validators trust it only through
/// `TrustAnchor.customRootForTesting(derRepresentation: authority.rootCertificate)`.
public struct TestReceiptAuthority: Sendable {
    /// The root certificate, DER: trust it with ``trustAnchor``.
    public let rootCertificate: [UInt8]
    /// The intermediate certificate, DER.
    public let intermediateCertificate: [UInt8]
    /// The receipt-signing certificate, DER.
    public let signerCertificate: [UInt8]
    let signerKey: P256.Signing.PrivateKey
    let signerIssuerDER: [UInt8]
    let signerSerial: [UInt8]

    /// The trust anchor for `AppAttestReceiptValidator`.
    public var trustAnchor: TrustAnchor { .customRootForTesting(derRepresentation: rootCertificate) }

    /// - Parameters:
    ///   - signerNotValidBefore: the start of the signer's validity (Apple's rotate about yearly).
    ///   - signerNotValidAfter: its end.
    ///   - imitatesAppleSigner: false makes a signer that chains to the same root but is not a receipt signer
    ///     (another subject, other key usages, no marker extensions), which validators must refuse.
    public init(
        signerNotValidBefore: Date = Date(timeIntervalSince1970: 1_577_836_800),
        signerNotValidAfter: Date = Date(timeIntervalSince1970: 2_524_608_000),
        imitatesAppleSigner: Bool = true
    ) throws {
        let rootKey = P384.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let signerKey = P256.Signing.PrivateKey()
        let start = Date(timeIntervalSince1970: 1_577_836_800)
        let end = Date(timeIntervalSince1970: 2_524_608_000)
        let rootName = try DistinguishedName {
            CommonName("Test Root CA - G3")
            OrganizationName("swift-app-attest testing")
        }
        let intermediateName = try DistinguishedName {
            CommonName("Test Application Integration CA")
            OrganizationName("swift-app-attest testing")
        }
        let signerName = try DistinguishedName {
            CommonName(imitatesAppleSigner ? "Application Attestation Fraud Receipt Signing" : "Another Apple Service")
            OrganizationName("swift-app-attest testing")
        }
        // Apple's marker extensions, each with a NULL value.
        let signerMarker = Certificate.Extension(
            oid: [1, 2, 840, 113635, 100, 12, 15], critical: false, value: [5, 0])
        let intermediateMarker = Certificate.Extension(
            oid: [1, 2, 840, 113635, 100, 6, 2, 3], critical: false, value: [5, 0])
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: start,
            notValidAfter: end, issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: start,
            notValidAfter: end, issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                if imitatesAppleSigner { intermediateMarker }
            },
            issuerPrivateKey: .init(rootKey))
        let serial = Certificate.SerialNumber()
        let signer = try Certificate(
            version: .v3, serialNumber: serial, publicKey: .init(signerKey.publicKey),
            notValidBefore: signerNotValidBefore, notValidAfter: signerNotValidAfter, issuer: intermediateName,
            subject: signerName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                if imitatesAppleSigner {
                    Critical(KeyUsage(digitalSignature: true))
                    signerMarker
                } else {
                    Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                }
            },
            issuerPrivateKey: .init(intermediateKey))
        self.rootCertificate = try TestCertificateAuthority.der(root)
        self.intermediateCertificate = try TestCertificateAuthority.der(intermediate)
        self.signerCertificate = try TestCertificateAuthority.der(signer)
        self.signerKey = signerKey
        var serializer = DER.Serializer()
        try serializer.serialize(intermediateName)
        self.signerIssuerDER = serializer.serializedBytes
        self.signerSerial = Array(serial.bytes)
    }

    /// The fields of a receipt (“Receipts and the risk metric”). Dates are written as Apple writes them, ISO 8601 with
    /// milliseconds.
    public struct Fields: Sendable {
        /// Field 2: `TEAMID.bundle.id`.
        public var appID: String
        /// Field 3: the credCert, DER.
        public var attestedCertificate: [UInt8]
        /// Field 4: the clientDataHash given to `attestKey`.
        public var clientHash: [UInt8]
        /// Field 5: an opaque token.
        public var token: String
        /// Field 6: `ATTEST` or `RECEIPT`.
        public var type: String
        /// Field 7: `sandbox` or `production`.
        public var environment: String?
        /// Field 12: the creation time.
        public var creationTime: Date
        /// Field 17: the risk metric (refreshed receipts).
        public var riskMetric: Int?
        /// Field 19: when the receipt may be refreshed.
        public var notBefore: Date?
        /// Field 21: the expiration time.
        public var expirationTime: Date?

        /// An ATTEST receipt as Apple attaches it to an attestation: expiration 90 days after creation.
        public static func attest(
            appID: AppID, attestedCertificate: [UInt8], clientHash: [UInt8], environment: AppAttestEnvironment,
            creationTime: Date
        ) -> Fields {
            Fields(
                appID: appID.rawValue, attestedCertificate: attestedCertificate, clientHash: clientHash,
                token: Data((0..<64).map { _ in UInt8.random(in: 0...255) }).base64EncodedString(), type: "ATTEST",
                environment: environment == .production ? "production" : "sandbox", creationTime: creationTime,
                riskMetric: nil, notBefore: nil, expirationTime: creationTime.addingTimeInterval(90 * 86_400))
        }

        /// A RECEIPT from the refresh endpoint: not-before one day and expiration 90 days after creation.
        public func refreshed(at time: Date, riskMetric: Int) -> Fields {
            var copy = self
            copy.type = "RECEIPT"
            copy.creationTime = time
            copy.riskMetric = riskMetric
            copy.notBefore = time.addingTimeInterval(86_400)
            copy.expirationTime = time.addingTimeInterval(90 * 86_400)
            return copy
        }

        /// Fields of a receipt, each optional one left out when nil.
        public init(
            appID: String, attestedCertificate: [UInt8], clientHash: [UInt8], token: String, type: String,
            environment: String?, creationTime: Date, riskMetric: Int?, notBefore: Date?, expirationTime: Date?
        ) {
            self.appID = appID
            self.attestedCertificate = attestedCertificate
            self.clientHash = clientHash
            self.token = token
            self.type = type
            self.environment = environment
            self.creationTime = creationTime
            self.riskMetric = riskMetric
            self.notBefore = notBefore
            self.expirationTime = expirationTime
        }
    }

    /// Signs a receipt. `indefiniteLength` writes Apple's attestation form: BER with indefinite lengths and the
    /// payload in 1000-byte chunks (“Receipts and the risk metric”); otherwise DER, as refreshed receipts have been
    /// seen.
    public func sign(_ fields: Fields, indefiniteLength: Bool = true) throws -> [UInt8] {
        let payload = Self.payload(fields)
        let signature = Array(try signerKey.signature(for: payload).derRepresentation)
        typealias T = TestCertificateAuthority
        let sha256 = T.tlv(
            [0x30], T.tlv([0x06], [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01]) + [0x05, 0x00])
        let ecdsaSHA256 = T.tlv([0x30], T.tlv([0x06], [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02]))
        let dataOID = T.tlv([0x06], [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01])
        let signedDataOID = T.tlv([0x06], [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02])
        let signerInfo = T.tlv(
            [0x30],
            T.tlv([0x02], [0x01]) + T.tlv([0x30], signerIssuerDER + T.tlv([0x02], Self.integer(signerSerial))) + sha256
                + ecdsaSHA256 + T.tlv([0x04], signature))
        // Like Apple's: signer, intermediate and the root itself, which validators must ignore (“Receipts and the risk
        // metric”).
        let certificates = signerCertificate + intermediateCertificate + rootCertificate
        if indefiniteLength {
            var chunks: [UInt8] = []
            var offset = 0
            while offset < payload.count {
                let end = min(offset + 1000, payload.count)
                chunks += T.tlv([0x04], Array(payload[offset..<end]))
                offset = end
            }
            let content = Self.indefinite([0x30], dataOID + Self.indefinite([0xA0], Self.indefinite([0x24], chunks)))
            let signedData = Self.indefinite(
                [0x30],
                T.tlv([0x02], [0x01]) + T.tlv([0x31], sha256) + content + Self.indefinite([0xA0], certificates)
                    + T.tlv([0x31], signerInfo))
            return Self.indefinite([0x30], signedDataOID + Self.indefinite([0xA0], signedData))
        }
        let content = T.tlv([0x30], dataOID + T.tlv([0xA0], T.tlv([0x04], payload)))
        let signedData = T.tlv(
            [0x30],
            T.tlv([0x02], [0x01]) + T.tlv([0x31], sha256) + content + T.tlv([0xA0], certificates)
                + T.tlv([0x31], signerInfo))
        return T.tlv([0x30], signedDataOID + T.tlv([0xA0], signedData))
    }

    static func payload(_ fields: Fields) -> [UInt8] {
        typealias T = TestCertificateAuthority
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var attributes: [(Int, [UInt8])] = [
            (2, Array(fields.appID.utf8)), (3, fields.attestedCertificate), (4, fields.clientHash),
            (5, Array(fields.token.utf8)), (6, Array(fields.type.utf8)),
            (12, Array(formatter.string(from: fields.creationTime).utf8)),
        ]
        if let environment = fields.environment { attributes.append((7, Array(environment.utf8))) }
        if let metric = fields.riskMetric { attributes.append((17, Array(String(metric).utf8))) }
        if let notBefore = fields.notBefore { attributes.append((19, Array(formatter.string(from: notBefore).utf8))) }
        if let expiration = fields.expirationTime {
            attributes.append((21, Array(formatter.string(from: expiration).utf8)))
        }
        let encoded = attributes.sorted { $0.0 < $1.0 }.map { type, value in
            T.tlv([0x30], T.tlv([0x02], [UInt8(type)]) + T.tlv([0x02], [0x01]) + T.tlv([0x04], value))
        }
        return T.tlv([0x31], encoded.flatMap { $0 })
    }

    /// BER indefinite length: tag, 0x80, content, end-of-contents.
    static func indefinite(_ tag: [UInt8], _ content: [UInt8]) -> [UInt8] { tag + [0x80] + content + [0x00, 0x00] }

    /// A positive DER INTEGER's content octets.
    static func integer(_ bytes: [UInt8]) -> [UInt8] {
        var trimmed = Array(bytes.drop { $0 == 0 })
        if trimmed.isEmpty { trimmed = [0] }
        return trimmed[0] >= 0x80 ? [0] + trimmed : trimmed
    }
}
