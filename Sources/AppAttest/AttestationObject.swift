internal import AppAttestCBOR

/// The CBOR attestation object that `DCAppAttestService.attestKey` returns, decoded but not verified
/// (<doc:VerifyingAttestations>): `{"fmt": "apple-appattest", "attStmt": {"x5c": [leaf, intermediate], "receipt":
/// bytes}, "authData": bytes}`.
public struct AttestationObject: Sendable, Hashable {
    /// Always `apple-appattest`.
    public let format: String
    /// DER certificates of `x5c`, leaf (credCert) first.
    public let certificateChain: [[UInt8]]
    /// The App Attest receipt (CMS SignedData, BER) as received.
    public let receipt: [UInt8]
    /// The authenticator data.
    public let authenticatorData: AuthenticatorData

    /// The largest attestation object accepted. Real ones are about 5–6 KB (<doc:VerifyingAttestations>,
    /// CONTRIBUTING.md, “OpenSSL and libcbor”).
    public static let maximumSize = 64 * 1024
    /// The most certificates `x5c` may hold before the object is refused as malformed.
    public static let maximumCertificates = 4

    /// Decodes an attestation object.
    /// - Throws: ``AppAttestError/Code/malformed`` for anything but a well-formed `apple-appattest` object.
    public init(cborEncoded bytes: [UInt8]) throws(AppAttestError) {
        guard bytes.count <= Self.maximumSize else {
            throw AppAttestError(.malformed, "attestation object of \(bytes.count) bytes exceeds \(Self.maximumSize)")
        }
        let root: CBORValue
        do { root = try CBORDecoder(maximumInputSize: Self.maximumSize, maximumDepth: 8).decode(bytes) } catch {
            throw AppAttestError(.malformed, "attestation object: \(error)")
        }
        guard case .map(let entries) = root else { throw AppAttestError(.malformed, "attestation object is not a map") }
        guard entries.count == 3 else {
            throw AppAttestError(.malformed, "attestation object has \(entries.count) entries, not 3")
        }
        guard case .textString(let format) = root["fmt"] else { throw AppAttestError(.malformed, "missing fmt") }
        guard format == "apple-appattest" else {
            throw AppAttestError(.malformed, "fmt is not apple-appattest")
        }
        guard case .map(let statementEntries) = root["attStmt"], let statement = root["attStmt"] else {
            throw AppAttestError(.malformed, "missing attStmt map")
        }
        guard statementEntries.count == 2 else {
            throw AppAttestError(.malformed, "attStmt has \(statementEntries.count) entries, not 2 (x5c, receipt)")
        }
        guard case .array(let chain) = statement["x5c"] else { throw AppAttestError(.malformed, "missing x5c array") }
        guard !chain.isEmpty, chain.count <= Self.maximumCertificates else {
            throw AppAttestError(.malformed, "x5c holds \(chain.count) certificates")
        }
        var certificates: [[UInt8]] = []
        for item in chain {
            guard case .byteString(let der) = item, !der.isEmpty else {
                throw AppAttestError(.malformed, "an x5c element is not a byte string")
            }
            certificates.append(der)
        }
        guard case .byteString(let receipt) = statement["receipt"] else {
            throw AppAttestError(.malformed, "missing receipt byte string")
        }
        guard case .byteString(let authData) = root["authData"] else {
            throw AppAttestError(.malformed, "missing authData byte string")
        }
        self.format = format
        self.certificateChain = certificates
        self.receipt = receipt
        self.authenticatorData = try AuthenticatorData(attestationRepresentation: authData)
    }
}

/// The CBOR assertion that `DCAppAttestService.generateAssertion` returns, decoded but not verified
/// (<doc:VerifyingAssertions>): `{"signature": DER ECDSA signature, "authenticatorData": bytes}`.
public struct AssertionObject: Sendable, Hashable {
    /// The DER-encoded ECDSA signature.
    public let signature: [UInt8]
    /// The authenticator data.
    public let authenticatorData: AuthenticatorData

    /// The largest assertion accepted. Real ones are about 140 bytes, more with iOS 27 extensions.
    public static let maximumSize = 16 * 1024

    /// Decodes an assertion.
    /// - Throws: ``AppAttestError/Code/malformed``.
    public init(cborEncoded bytes: [UInt8]) throws(AppAttestError) {
        guard bytes.count <= Self.maximumSize else {
            throw AppAttestError(.malformed, "assertion of \(bytes.count) bytes exceeds \(Self.maximumSize)")
        }
        let signature: [UInt8]
        let authData: [UInt8]
        if let fields = Self.canonicalFields(bytes) {
            (signature, authData) = fields
        } else {
            let root: CBORValue
            do { root = try CBORDecoder(maximumInputSize: Self.maximumSize, maximumDepth: 4).decode(bytes) } catch {
                throw AppAttestError(.malformed, "assertion: \(error)")
            }
            guard case .map(let entries) = root, entries.count == 2 else {
                throw AppAttestError(.malformed, "an assertion is a map of signature and authenticatorData")
            }
            guard case .byteString(let decodedSignature) = root["signature"] else {
                throw AppAttestError(.malformed, "missing or oversized signature")
            }
            guard case .byteString(let decodedAuthData) = root["authenticatorData"] else {
                throw AppAttestError(.malformed, "missing authenticatorData")
            }
            (signature, authData) = (decodedSignature, decodedAuthData)
        }
        guard !signature.isEmpty, signature.count <= 80 else {
            throw AppAttestError(.malformed, "missing or oversized signature")
        }
        self.signature = signature
        self.authenticatorData = try AuthenticatorData(assertionRepresentation: authData)
    }

    /// The encoded keys, each a text string's head and bytes.
    private static let signatureKey: [UInt8] = [0x69] + Array("signature".utf8)
    private static let authenticatorDataKey: [UInt8] = [0x71] + Array("authenticatorData".utf8)

    /// The layout every device produces, read without the general decoder (it is most of an assertion's cost beside
    /// the signature check): a map of exactly two entries, `"signature"` and `"authenticatorData"` in either order,
    /// each a byte string whose length is encoded in its shortest form, and nothing after. nil for anything else,
    /// which the general decoder then judges, so that this path accepts only what that one accepts, with the same
    /// values (the mutation tests hold both to it).
    package static func canonicalFields(_ bytes: [UInt8]) -> (signature: [UInt8], authenticatorData: [UInt8])? {
        let count = bytes.count
        guard count > 0, bytes[0] == 0xA2 else { return nil }
        var index = 1
        func key() -> Int? {
            for (number, encoded) in [Self.signatureKey, Self.authenticatorDataKey].enumerated()
            where encoded.count <= count - index && bytes[index..<(index + encoded.count)].elementsEqual(encoded) {
                index += encoded.count
                return number
            }
            return nil
        }
        func byteString() -> [UInt8]? {
            guard index < count, bytes[index] >> 5 == 2 else { return nil }
            let argument = Int(bytes[index] & 0x1F)
            index += 1
            let length: Int
            switch argument {
            case 0...23:
                length = argument
            case 24:
                guard index < count, bytes[index] >= 24 else { return nil }
                length = Int(bytes[index])
                index += 1
            case 25:
                guard count - index >= 2 else { return nil }
                length = Int(bytes[index]) << 8 | Int(bytes[index + 1])
                guard length >= 256 else { return nil }
                index += 2
            default:
                return nil
            }
            guard length <= count - index else { return nil }
            defer { index += length }
            return Array(bytes[index..<(index + length)])
        }
        var fields: [[UInt8]?] = [nil, nil]
        for _ in 0..<2 {
            guard let which = key(), fields[which] == nil, let value = byteString() else { return nil }
            fields[which] = value
        }
        guard index == count, let signature = fields[0], let authenticatorData = fields[1] else { return nil }
        return (signature, authenticatorData)
    }
}
