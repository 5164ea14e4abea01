internal import AppAttestCrypto

/// An attested App Attest public key (ECDSA P-256), parsed once and reusable for any number of assertions.
///
/// Parsing costs about 25 µs; keep the value (or a cache of them keyed by ``keyID``) rather than rebuilding
/// it from stored bytes for every assertion.
public struct AttestedPublicKey: Sendable, Hashable {
    let key: P256PublicKey
    /// The key identifier: SHA-256 of ``x963Representation`` (<doc:VerifyingAttestations>).
    public let keyID: KeyID

    /// Parses a 65-byte uncompressed X9.62 point, as stored after attestation.
    /// - Throws: ``AppAttestError/Code/unsupportedKey`` when the bytes are not a point on P-256.
    public init(x963Representation point: some Collection<UInt8>) throws(AppAttestError) {
        guard point.count == 65 else {
            throw AppAttestError(.unsupportedKey, "a P-256 public point has 65 bytes, not \(point.count)")
        }
        let bytes = Array(point)
        do { key = try P256PublicKey(x963Representation: bytes) } catch {
            throw AppAttestError(.unsupportedKey, "not a point on P-256")
        }
        keyID = KeyID(unchecked: SHA256.hash(bytes))
    }

    /// A key already parsed and checked, with its identifier.
    init(key: P256PublicKey, keyID: KeyID) {
        self.key = key
        self.keyID = keyID
    }

    /// `04 ‖ X ‖ Y`, 65 bytes: the form to store.
    public var x963Representation: [UInt8] { key.x963Representation }

    public static func == (lhs: AttestedPublicKey, rhs: AttestedPublicKey) -> Bool {
        lhs.x963Representation == rhs.x963Representation
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(x963Representation) }
}

/// SHA-256, as the library computes it (OpenSSL), for callers that hash challenges or client data themselves.
package enum AppAttestSHA256 {
    /// The 32-byte digest of `bytes`.
    package static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        SHA256.hash(Array(bytes))
    }
}
