public import AppAttest
public import Crypto
public import Foundation
import SwiftASN1
import X509

/// A certificate authority shaped like Apple's App Attest PKI, for tests: a P-384 root and a P-384
/// intermediate (pathlen 0) that issue credCerts like Apple's (“Verifying attestations”): subject CN = hex(keyId), the
/// nonce
/// extension `1.2.840.113635.100.8.2` with its `[1]` wrapper, the attestation and device property extensions
/// (App ID under `[1204]`, OS version under `[1400]`), optionally the extended key usage of 2026 leaves.
///
/// A verifier accepts what this authority issues only when configured with ``trustAnchor``, a
/// `TrustAnchor.customRootForTesting(…)`; the default verifier (Apple's root) rejects it with
/// `certificateChain`.
public struct TestCertificateAuthority: Sendable {
    /// The root certificate, DER.
    public let rootCertificate: [UInt8]
    /// The intermediate certificate, DER.
    public let intermediateCertificate: [UInt8]
    /// When the root and intermediate become valid.
    public let notValidBefore: Date
    /// When the root and intermediate expire.
    public let notValidAfter: Date

    let intermediateKey: P384.Signing.PrivateKey
    let intermediateName: DistinguishedName
    let intermediateKeyIdentifier: ArraySlice<UInt8>

    /// The trust anchor to configure a verifier with: this authority's root, explicitly for testing.
    public var trustAnchor: TrustAnchor { .customRootForTesting(derRepresentation: rootCertificate) }

    /// A new authority with freshly generated keys.
    /// - Parameters:
    ///   - name: a distinguishing word for the subject names (never "Apple").
    ///   - notValidBefore: start of the root and intermediate validity (default 2020-01-01).
    ///   - notValidAfter: end of the root and intermediate validity (default 2050-01-01).
    public init(
        name: String = "Test", notValidBefore: Date = Date(timeIntervalSince1970: 1_577_836_800),
        notValidAfter: Date = Date(timeIntervalSince1970: 2_524_608_000)
    ) throws {
        try self.init(
            rootKey: P384.Signing.PrivateKey(), intermediateKey: P384.Signing.PrivateKey(), name: name,
            notValidBefore: notValidBefore, notValidAfter: notValidAfter)
    }

    /// An authority from fixed keys, so that its certificates can be reproduced.
    public init(
        rootKey: P384.Signing.PrivateKey, intermediateKey: P384.Signing.PrivateKey, name: String = "Test",
        notValidBefore: Date = Date(timeIntervalSince1970: 1_577_836_800),
        notValidAfter: Date = Date(timeIntervalSince1970: 2_524_608_000)
    ) throws {
        let rootName = try DistinguishedName {
            CommonName("\(name) App Attestation Root CA")
            OrganizationName("swift-app-attest testing")
        }
        let intermediateName = try DistinguishedName {
            CommonName("\(name) App Attestation CA 1")
            OrganizationName("swift-app-attest testing")
        }
        let rootPublic = Certificate.PublicKey(rootKey.publicKey)
        let rootSKI = SubjectKeyIdentifier(hash: rootPublic)
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: rootPublic, notValidBefore: notValidBefore,
            notValidAfter: notValidAfter, issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                rootSKI
            },
            issuerPrivateKey: Certificate.PrivateKey(rootKey))
        let intermediatePublic = Certificate.PublicKey(intermediateKey.publicKey)
        let intermediateSKI = SubjectKeyIdentifier(hash: intermediatePublic)
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: intermediatePublic, notValidBefore: notValidBefore,
            notValidAfter: notValidAfter, issuer: rootName, subject: intermediateName,
            signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                AuthorityKeyIdentifier(keyIdentifier: rootSKI.keyIdentifier)
                intermediateSKI
            },
            issuerPrivateKey: Certificate.PrivateKey(rootKey))
        self.rootCertificate = try Self.der(root)
        self.intermediateCertificate = try Self.der(intermediate)
        self.notValidBefore = notValidBefore
        self.notValidAfter = notValidAfter
        self.intermediateKey = intermediateKey
        self.intermediateName = intermediateName
        self.intermediateKeyIdentifier = intermediateSKI.keyIdentifier
    }

    /// What a credCert carries.
    public struct LeafContents: Sendable {
        /// The attested key (the device's).
        public var publicKey: P256.Signing.PublicKey
        /// The 32-byte nonce, or nil to leave the extension out.
        public var nonce: [UInt8]?
        /// The raw value of the nonce extension instead of `SEQUENCE { [1] OCTET STRING nonce }`.
        public var rawNonceExtension: [UInt8]?
        /// The App ID written under `[1204]` of extension 8.5.
        public var appID: String
        /// The OS version written under `[1400]` of extension 8.7.
        public var osVersion: String?
        /// Adds the extended key usage `1.2.840.113635.100.4.24` of leaves issued since 2026.
        public var appAttestExtendedKeyUsage: Bool
        /// The start of the leaf's validity.
        public var notValidBefore: Date
        /// The end of the leaf's validity.
        public var notValidAfter: Date
        /// The subject CN; `hex(SHA-256(point))` when nil, as Apple writes it.
        public var commonName: String?

        /// A validity window for leaves.
        public init(
            publicKey: P256.Signing.PublicKey, nonce: [UInt8]?, appID: String, osVersion: String? = "17.4",
            appAttestExtendedKeyUsage: Bool = false, notValidBefore: Date, notValidAfter: Date
        ) {
            self.publicKey = publicKey
            self.nonce = nonce
            self.appID = appID
            self.osVersion = osVersion
            self.appAttestExtendedKeyUsage = appAttestExtendedKeyUsage
            self.notValidBefore = notValidBefore
            self.notValidAfter = notValidAfter
        }
    }

    /// Issues a credCert, DER.
    public func issueLeaf(_ contents: LeafContents) throws -> [UInt8] {
        let point = [UInt8](contents.publicKey.x963Representation)
        let commonName = contents.commonName ?? AppAttestSHA256.hash(point).hexString
        let subject = try DistinguishedName {
            CommonName(commonName)
            OrganizationalUnitName("AAA Certification")
            OrganizationName("swift-app-attest testing")
        }
        var extensions: [Certificate.Extension] = [
            try Certificate.Extension(BasicConstraints.notCertificateAuthority, critical: true),
            try Certificate.Extension(
                KeyUsage(digitalSignature: true, nonRepudiation: true, keyEncipherment: true, dataEncipherment: true),
                critical: true),
        ]
        if contents.appAttestExtendedKeyUsage {
            let eku = try ExtendedKeyUsage([.init(oid: [1, 2, 840, 113_635, 100, 4, 24])])
            extensions.append(try Certificate.Extension(eku, critical: false))
        }
        extensions.append(
            Certificate.Extension(
                oid: [1, 2, 840, 113_635, 100, 8, 5], critical: false,
                value: Self.taggedSequence([(1204, Array(contents.appID.utf8))])[...]))
        if let osVersion = contents.osVersion {
            extensions.append(
                Certificate.Extension(
                    oid: [1, 2, 840, 113_635, 100, 8, 7], critical: false,
                    value: Self.taggedSequence([(1400, Array(osVersion.utf8))])[...]))
        }
        if let raw = contents.rawNonceExtension {
            extensions.append(
                Certificate.Extension(oid: [1, 2, 840, 113_635, 100, 8, 2], critical: false, value: raw[...]))
        } else if let nonce = contents.nonce {
            extensions.append(
                Certificate.Extension(
                    oid: [1, 2, 840, 113_635, 100, 8, 2], critical: false, value: Self.nonceExtension(nonce)[...]))
        }
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: Certificate.PublicKey(contents.publicKey),
            notValidBefore: contents.notValidBefore, notValidAfter: contents.notValidAfter, issuer: intermediateName,
            subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions(extensions),
            issuerPrivateKey: Certificate.PrivateKey(intermediateKey))
        return try Self.der(leaf)
    }

    /// `SEQUENCE { [1] EXPLICIT OCTET STRING nonce }`, as Apple encodes it (“Verifying attestations”).
    static func nonceExtension(_ nonce: [UInt8]) -> [UInt8] {
        let octets = tlv([0x04], nonce)
        return tlv([0x30], tlv([0xA1], octets))
    }

    /// `SEQUENCE { [tag] EXPLICIT OCTET STRING value, … }`, the shape of extensions 8.5 and 8.7.
    static func taggedSequence(_ fields: [(UInt, [UInt8])]) -> [UInt8] {
        var body: [UInt8] = []
        for (tag, value) in fields {
            body += tlv(contextTag(tag), tlv([0x04], value))
        }
        return tlv([0x30], body)
    }

    /// The identifier octets of a constructed, context-specific tag, in high-tag-number form when needed.
    static func contextTag(_ number: UInt) -> [UInt8] {
        if number < 31 { return [0xA0 | UInt8(number)] }
        var digits: [UInt8] = []
        var rest = number
        repeat {
            digits.insert(UInt8(rest & 0x7F), at: 0)
            rest >>= 7
        } while rest > 0
        for index in 0..<(digits.count - 1) { digits[index] |= 0x80 }
        return [0xBF] + digits
    }

    static func tlv(_ tag: [UInt8], _ content: [UInt8]) -> [UInt8] {
        let count = content.count
        let length: [UInt8]
        switch count {
        case 0..<0x80: length = [UInt8(count)]
        case 0x80..<0x100: length = [0x81, UInt8(count)]
        case 0x100..<0x1_0000: length = [0x82, UInt8(count >> 8), UInt8(count & 0xFF)]
        default: length = [0x83, UInt8(count >> 16), UInt8((count >> 8) & 0xFF), UInt8(count & 0xFF)]
        }
        return tag + length + content
    }

    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}
