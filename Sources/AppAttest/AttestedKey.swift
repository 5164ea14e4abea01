/// An attested key: what a verified attestation establishes, and what every later assertion is verified against.
///
/// ``AppAttestVerifier/verifyAttestation(_:keyID:challenge:)`` returns one with counter 0. Store its
/// ``publicKey``'s ``AttestedPublicKey/x963Representation``, ``appID`` and ``environment``; read back, rebuild it
/// once (``AttestedPublicKey/init(x963Representation:)``) and pass it, with the key's highest accepted ``counter``,
/// to ``AppAttestVerifier/verifyAssertion(_:clientData:key:counterPolicy:)``.
public struct AttestedKey: Sendable, Hashable {
    /// The key, parsed once into the representation assertions are verified with.
    public let publicKey: AttestedPublicKey
    /// The App ID the key was attested for.
    public let appID: AppID
    /// The environment its AAGUID named.
    public let environment: AppAttestEnvironment
    /// The highest assertion counter accepted so far (0 right after attestation).
    public var counter: UInt32

    /// The key identifier: SHA-256 of the public key.
    public var keyID: KeyID { publicKey.keyID }

    /// A key as stored after its attestation.
    public init(publicKey: AttestedPublicKey, appID: AppID, environment: AppAttestEnvironment, counter: UInt32) {
        self.publicKey = publicKey
        self.appID = appID
        self.environment = environment
        self.counter = counter
    }
}
