internal import AppAttestCrypto
internal import Crypto

/// An attested App Attest public key (ECDSA P-256), parsed once and reusable for any number of assertions.
///
/// The key is held in swift-crypto's representation (BoringSSL on Linux, CryptoKit on Apple platforms), whose P-256
/// verification is the fastest the package has (<doc:VerifyingAssertions>, “Performance”). Parsing checks that the
/// point lies on the curve; keep the value (or a cache of them keyed by ``keyID``) rather than rebuilding it from
/// stored bytes for every assertion.
public struct AttestedPublicKey: Sendable, Hashable {
    private let signingKey: P256.Signing.PublicKey
    private let point: [UInt8]
    /// The key identifier: SHA-256 of ``x963Representation`` (<doc:VerifyingAttestations>).
    public let keyID: KeyID

    /// Parses a 65-byte uncompressed X9.62 point, as stored after attestation.
    /// - Throws: ``AppAttestError/Code/unsupportedKey`` when the bytes are not an uncompressed point on P-256.
    public init(x963Representation point: some Collection<UInt8>) throws(AppAttestError) {
        let bytes = Array(point)
        try self.init(point: bytes, keyID: KeyID(unchecked: AppAttestCrypto.SHA256.hash(bytes)))
    }

    /// A point whose identifier the caller has already computed (an attestation checks it against the keyId).
    init(point: [UInt8], keyID: KeyID) throws(AppAttestError) {
        guard point.count == 65, point.first == 0x04 else {
            throw AppAttestError(.unsupportedKey, "a P-256 public point has 65 bytes starting with 04")
        }
        // swift-crypto decodes the point and refuses one that is not on the curve.
        do { signingKey = try P256.Signing.PublicKey(x963Representation: point) } catch {
            throw AppAttestError(.unsupportedKey, "not a point on P-256")
        }
        self.point = point
        self.keyID = keyID
    }

    /// `04 ‖ X ‖ Y`, 65 bytes: the form to store.
    public var x963Representation: [UInt8] { point }

    /// Whether `signature` (DER, strict: a non-minimal or trailing encoding is refused) is this key's ECDSA-SHA256
    /// signature of an assertion's nonce, SHA-256(authenticatorData ‖ clientDataHash) (<doc:VerifyingAssertions>):
    /// the digest signed is SHA-256 of the nonce. Both hashes are swift-crypto's, computed without an allocation.
    func isValidAssertionSignature(
        derEncoded signature: [UInt8], authenticatorData: [UInt8], clientDataHash: [UInt8]
    ) -> Bool {
        guard !signature.isEmpty, signature.count <= 80,
            let parsed = try? P256.Signing.ECDSASignature(derRepresentation: signature)
        else { return false }
        var nonce = Crypto.SHA256()
        nonce.update(data: authenticatorData)
        nonce.update(data: clientDataHash)
        let digest = nonce.finalize().withUnsafeBytes { Crypto.SHA256.hash(data: $0) }
        return signingKey.isValidSignature(parsed, for: digest)
    }

    /// SHA-256 of an assertion's client data, as ``isValidAssertionSignature(derEncoded:authenticatorData:clientDataHash:)``
    /// hashes (swift-crypto's).
    static func clientDataHash(_ clientData: some Collection<UInt8>) -> [UInt8] {
        let digest =
            clientData.withContiguousStorageIfAvailable { Crypto.SHA256.hash(data: UnsafeRawBufferPointer($0)) }
            ?? Crypto.SHA256.hash(data: Array(clientData))
        return Array(digest)
    }

    public static func == (lhs: AttestedPublicKey, rhs: AttestedPublicKey) -> Bool {
        lhs.point == rhs.point
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(point) }
}

/// SHA-256, as the library computes it (OpenSSL), for callers that hash challenges or client data themselves.
package enum AppAttestSHA256 {
    /// The 32-byte digest of `bytes`.
    package static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        AppAttestCrypto.SHA256.hash(Array(bytes))
    }
}
