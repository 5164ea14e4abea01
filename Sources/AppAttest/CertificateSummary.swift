internal import AppAttestCrypto
public import Foundation

/// What a certificate says, for display and logs: names, validity, key and extensions, with Apple's App
/// Attest extensions decoded (<doc:VerifyingAttestations>). Reading a summary verifies nothing.
public struct CertificateSummary: Sendable, Hashable, Codable {
    /// The subject as an RFC 2253 string.
    public var subject: String
    /// The issuer as an RFC 2253 string.
    public var issuer: String
    /// The serial number in hex.
    public var serialNumber: String
    /// The start of the validity period.
    public var notBefore: Date?
    /// The end of the validity period.
    public var notAfter: Date?
    /// The signature algorithm's name.
    public var signatureAlgorithm: String
    /// The subject public key's algorithm.
    public var publicKeyAlgorithm: String
    /// The curve of an EC key.
    public var publicKeyCurve: String?
    /// The public point in hex, for EC keys.
    public var publicKey: String?
    /// SHA-256 of the DER, hex.
    public var sha256Fingerprint: String
    /// Every extension, in certificate order, Apple's decoded where known.
    public var extensions: [Extension]
    /// The nonce of extension 1.2.840.113635.100.8.2, hex, when present and well formed.
    public var appAttestNonce: String?
    /// The App ID of extension 1.2.840.113635.100.8.5 `[1204]`.
    public var appID: String?
    /// The OS version of extension 1.2.840.113635.100.8.7 `[1400]`.
    public var osVersion: String?

    /// One extension.
    public struct Extension: Sendable, Hashable, Codable {
        /// The dotted OID.
        public var oid: String
        /// OpenSSL's name for it, when it has one.
        public var name: String?
        /// Whether it is marked critical.
        public var critical: Bool
        /// The DER value inside `extnValue`, hex.
        public var value: String
    }

    /// Parses a DER certificate.
    /// - Throws: ``AppAttestError/Code/malformed`` when OpenSSL cannot parse it.
    public init(derEncoded bytes: some Collection<UInt8>) throws(AppAttestError) {
        let certificate: X509Certificate
        do { certificate = try X509Certificate(derEncoded: Array(bytes)) } catch {
            throw AppAttestError(.malformed, "certificate: \(error)")
        }
        subject = certificate.subject
        issuer = certificate.issuer
        serialNumber = certificate.serialNumberHex
        notBefore = certificate.notBefore.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        notAfter = certificate.notAfter.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        signatureAlgorithm = certificate.signatureAlgorithm
        let key = certificate.publicKeyInfo
        publicKeyAlgorithm = key.algorithm
        publicKeyCurve = key.curve
        publicKey = key.point?.hexString
        sha256Fingerprint = SHA256.hash(certificate.derBytes).hexString
        let all = certificate.extensions
        extensions = all.map {
            Extension(oid: $0.oid, name: $0.name, critical: $0.isCritical, value: $0.value.hexString)
        }
        let value = { (oid: String) in all.first { $0.oid == oid }?.value }
        appAttestNonce = value(AppleExtensions.nonceOID).flatMap(AppleExtensions.nonce(fromExtensionValue:))?.hexString
        appID = value(AppleExtensions.attestationPropertiesOID).flatMap {
            AppleExtensions.taggedText(AppleExtensions.appIDTag, inExtensionValue: $0)
        }
        osVersion = value(AppleExtensions.devicePropertiesOID).flatMap {
            AppleExtensions.taggedText(AppleExtensions.osVersionTag, inExtensionValue: $0)
        }
    }
}
