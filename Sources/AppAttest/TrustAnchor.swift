/// The root certificate that attestation chains must end at.
///
/// Apple's App Attestation root is the default and the only anchor production code needs (<doc:VerifyingAttestations>).
/// Any
/// other root takes an explicit call whose name says what it is for.
public struct TrustAnchor: Sendable, Hashable {
    /// The DER bytes of the root certificate.
    public let derRepresentation: [UInt8]

    private init(derRepresentation: [UInt8]) { self.derRepresentation = derRepresentation }

    /// Apple App Attestation Root CA (P-384, valid 2020-03-18 to 2045-03-15), embedded in the library.
    /// Its SHA-256 is `1cb9823b…c932`, pinned by a test.
    public static let appleAppAttestationRoot = TrustAnchor(derRepresentation: AppleRoots.appAttestationRootDER)

    /// Apple Root CA - G3 (P-384, valid 2014-04-30 to 2039-04-30), the root of App Attest receipts' signing
    /// chain (<doc:ReceiptsAndRiskMetric>). Its SHA-256 is `63343abf…9179`, pinned by a test.
    public static let appleRootCAG3 = TrustAnchor(derRepresentation: AppleRoots.rootCAG3DER)

    /// A root of your own, for test authorities (such as the one in `AppAttestTesting`) only.
    ///
    /// - Warning: A verifier with this anchor accepts whatever that root's holder signs. Never configure one
    ///   in production: genuine devices chain to ``appleAppAttestationRoot``.
    /// - Parameter derRepresentation: the root certificate, DER.
    public static func customRootForTesting(derRepresentation: [UInt8]) -> TrustAnchor {
        TrustAnchor(derRepresentation: derRepresentation)
    }

    /// Whether this is Apple's App Attestation root.
    public var isAppleAppAttestationRoot: Bool { derRepresentation == AppleRoots.appAttestationRootDER }
}
