internal import SwiftASN1

/// Apple's private extensions in the credCert (<doc:VerifyingAttestations>), decoded with swift-asn1's strict DER
/// parser.
enum AppleExtensions {
    /// The nonce: `1.2.840.113635.100.8.2`.
    static let nonceOID = "1.2.840.113635.100.8.2"
    /// Attestation properties, holding the App ID under `[1204]`.
    static let attestationPropertiesOID = "1.2.840.113635.100.8.5"
    /// Device properties, holding the OS version under `[1400]`.
    static let devicePropertiesOID = "1.2.840.113635.100.8.7"

    /// The 32-byte nonce from `SEQUENCE { [1] EXPLICIT OCTET STRING }` (<doc:VerifyingAttestations>: Apple's prose
    /// omits the `[1]` wrapper that the real encoding has). Anything else is nil.
    static func nonce(fromExtensionValue value: [UInt8]) -> [UInt8]? {
        guard let root = try? DER.parse(value), root.identifier == .sequence,
            case .constructed(let children) = root.content
        else { return nil }
        var iterator = children.makeIterator()
        guard let tagged = iterator.next(), iterator.next() == nil,
            tagged.identifier == ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific),
            case .constructed(let inner) = tagged.content
        else { return nil }
        var innerIterator = inner.makeIterator()
        guard let octets = innerIterator.next(), innerIterator.next() == nil,
            octets.identifier == .octetString, case .primitive(let bytes) = octets.content, bytes.count == 32
        else { return nil }
        return Array(bytes)
    }

    /// The UTF-8 text under context tag `[tag]` of a `SEQUENCE` of explicitly tagged OCTET STRINGs, as in
    /// extensions 8.5 and 8.7. Informational: nil when absent or shaped otherwise.
    static func taggedText(_ tag: UInt, inExtensionValue value: [UInt8]) -> String? {
        guard let root = try? DER.parse(value), root.identifier == .sequence,
            case .constructed(let children) = root.content
        else { return nil }
        let wanted = ASN1Identifier(tagWithNumber: tag, tagClass: .contextSpecific)
        for child in children where child.identifier == wanted {
            guard case .constructed(let inner) = child.content else { return nil }
            var iterator = inner.makeIterator()
            guard let octets = iterator.next(), iterator.next() == nil, octets.identifier == .octetString,
                case .primitive(let bytes) = octets.content, bytes.count <= 1024
            else { return nil }
            return String(validating: bytes, as: UTF8.self)
        }
        return nil
    }

    /// The OS version from extension 8.7 `[1400]`, e.g. "14.4" or "26.2".
    static let osVersionTag: UInt = 1400
    /// The App ID from extension 8.5 `[1204]`.
    static let appIDTag: UInt = 1204
}
