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
        let root: CBORValue
        do { root = try CBORDecoder(maximumInputSize: Self.maximumSize, maximumDepth: 4).decode(bytes) } catch {
            throw AppAttestError(.malformed, "assertion: \(error)")
        }
        guard case .map(let entries) = root, entries.count == 2 else {
            throw AppAttestError(.malformed, "an assertion is a map of signature and authenticatorData")
        }
        guard case .byteString(let signature) = root["signature"], !signature.isEmpty, signature.count <= 80 else {
            throw AppAttestError(.malformed, "missing or oversized signature")
        }
        guard case .byteString(let authData) = root["authenticatorData"] else {
            throw AppAttestError(.malformed, "missing authenticatorData")
        }
        self.signature = signature
        self.authenticatorData = try AuthenticatorData(assertionRepresentation: authData)
    }
}
