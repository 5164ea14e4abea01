public import AppAttest
import AppAttestCBOR
public import Crypto
public import Foundation
import Synchronization

/// A stand-in for an iPhone's App Attest service, for integration tests on Linux (App Attest does not run in
/// the iOS Simulator, and recorded attestations expire within days).
///
/// It holds a P-256 key (keyId = SHA-256 of its point), produces attestation objects for an App ID and
/// environment through a ``TestCertificateAuthority``, and assertions with a counter it keeps. Every option
/// defaults to what a genuine device does; set one to produce a specific wrong object.
///
/// ```swift
/// let authority = try TestCertificateAuthority()
/// let device = try SimulatedDevice(authority: authority, appID: AppID("ABCDE12345.com.example.app"))
/// let verifier = try AppAttestVerifier(configuration: .init(
///     appID: device.appID, environment: .production, trustAnchor: authority.trustAnchor))
/// let attested = try verifier.verifyAttestation(
///     try device.attest(challenge: challenge), keyID: device.keyID, challenge: challenge)
/// let assertion = try device.assert(clientData: clientData)   // counter 1, then 2, …
/// ```
public final class SimulatedDevice: Sendable {
    /// The authority that certifies this device's key.
    public let authority: TestCertificateAuthority
    /// The App ID it attests for.
    public let appID: AppID
    /// The environment it attests in.
    public let environment: AppAttestEnvironment
    /// The device's P-256 key, as the Secure Enclave would hold it.
    public let privateKey: P256.Signing.PrivateKey
    /// Signs the receipts of attestations, when given.
    public let receiptAuthority: TestReceiptAuthority?
    /// SHA-256 of the public point.
    public let keyID: KeyID
    private let state: Mutex<UInt32>

    /// - Parameters:
    ///   - counter: the counter of the last assertion (0 after attestation).
    public init(
        authority: TestCertificateAuthority, appID: AppID, environment: AppAttestEnvironment = .production,
        privateKey: P256.Signing.PrivateKey = .init(), counter: UInt32 = 0,
        receiptAuthority: TestReceiptAuthority? = nil
    ) throws {
        self.receiptAuthority = receiptAuthority
        self.authority = authority
        self.appID = appID
        self.environment = environment
        self.privateKey = privateKey
        self.keyID = try KeyID(rawValue: AppAttestSHA256.hash(privateKey.publicKey.x963Representation))
        self.state = Mutex(counter)
    }

    /// The receipt of an attestation when the device has no receipt authority (and the options give none).
    package static let placeholderReceipt = Array("swift-app-attest placeholder receipt".utf8)

    /// The 65-byte uncompressed public point, as a server stores it.
    public var publicKey: [UInt8] { Array(privateKey.publicKey.x963Representation) }

    /// The counter of the last assertion produced.
    public var counter: UInt32 { state.withLock { $0 } }

    // MARK: Attestation

    /// How an attestation object departs from a genuine one. The defaults produce a genuine object.
    public struct AttestationOptions: Sendable {
        /// The App ID whose hash goes into authData (the device's by default).
        public var appID: AppID?
        /// The environment whose AAGUID goes into authData (the device's by default).
        public var environment: AppAttestEnvironment?
        /// Raw AAGUID bytes instead of an environment's.
        public var aaguid: [UInt8]?
        /// The authData counter (0 in a genuine attestation).
        public var counter: UInt32 = 0
        /// The credentialId (the keyId by default).
        public var credentialID: [UInt8]?
        /// A different key in the COSE structure of authData.
        public var coseKey: P256.Signing.PublicKey?
        /// A different key in the credCert.
        public var certificateKey: P256.Signing.PublicKey?
        /// The nonce in the credCert.
        public var nonce: NonceChoice = .correct
        /// Which certificates `x5c` holds.
        public var chain: ChainShape = .leafAndIntermediate
        /// When the attestation happens: the leaf is valid from a day before to two days after (“Verifying
        /// attestations”).
        public var issuedAt: Date = Date()
        /// Overrides of the leaf validity.
        public var leafNotValidBefore: Date?
        /// The end of the leaf's validity, when not the default.
        public var leafNotValidAfter: Date?
        /// The OS version in the credCert.
        public var osVersion: String? = "17.4"
        /// The extended key usage of 2026 leaves.
        public var appAttestExtendedKeyUsage = false
        /// The iOS 27 extensions map appended to authData.
        public var extensions: AuthenticatorExtensions?
        /// Bytes appended to authData after the COSE key and extensions (the nonce still covers them).
        public var authenticatorDataSuffix: [UInt8] = []
        /// The receipt bytes. nil: an ATTEST receipt signed by the device's receipt authority, or a placeholder
        /// (not a CMS structure) when the device has none.
        public var receipt: [UInt8]?
        /// The `fmt` text.
        public var format = "apple-appattest"
        /// Bytes appended after the CBOR object.
        public var trailingBytes: [UInt8] = []
        /// Cut the encoded object to this many bytes.
        public var truncatedTo: Int?

        /// Options that make a genuine attestation.
        public init() {}
    }

    /// The credCert nonce.
    public enum NonceChoice: Sendable {
        /// SHA-256(authData ‖ clientDataHash), as a genuine device.
        case correct
        /// Another value.
        case wrong
        /// No nonce extension.
        case missing
        /// The nonce without its `[1]` wrapper: `SEQUENCE { OCTET STRING }` (Apple's prose, not its encoding).
        case withoutContextTag
    }

    /// The certificates in `x5c`.
    public enum ChainShape: Sendable {
        case leafAndIntermediate
        case leafOnly
        case intermediateFirst
        case withRoot
        /// The intermediate of another test authority (the leaf is still issued by this one).
        case foreignIntermediate
        /// Leaf and intermediate from another authority that the verifier does not trust.
        case issuedByOtherAuthority
    }

    /// An attestation object for a server challenge: clientDataHash = SHA-256(challenge).
    public func attest(challenge: some Collection<UInt8>, _ options: AttestationOptions = .init()) throws -> [UInt8] {
        try attest(clientDataHash: AppAttestSHA256.hash(challenge), options)
    }

    /// An attestation object for the exact clientDataHash, as `attestKey(_:clientDataHash:)` produces it.
    public func attest(clientDataHash: some Collection<UInt8>, _ options: AttestationOptions = .init()) throws
        -> [UInt8]
    {
        let authData = authenticatorData(options)
        let nonce = AppAttestSHA256.hash(authData + Array(clientDataHash))
        var contents = TestCertificateAuthority.LeafContents(
            publicKey: options.certificateKey ?? privateKey.publicKey, nonce: nonce, appID: appID.rawValue,
            osVersion: options.osVersion, appAttestExtendedKeyUsage: options.appAttestExtendedKeyUsage,
            notValidBefore: options.leafNotValidBefore ?? options.issuedAt.addingTimeInterval(-86_400),
            notValidAfter: options.leafNotValidAfter ?? options.issuedAt.addingTimeInterval(2 * 86_400))
        switch options.nonce {
        case .correct: break
        case .wrong: contents.nonce = AppAttestSHA256.hash(nonce)
        case .missing: contents.nonce = nil
        case .withoutContextTag:
            contents.rawNonceExtension = TestCertificateAuthority.tlv(
                [0x30], TestCertificateAuthority.tlv([0x04], nonce))
        }
        let issuer: TestCertificateAuthority
        switch options.chain {
        case .issuedByOtherAuthority: issuer = try TestCertificateAuthority(name: "Other")
        default: issuer = authority
        }
        let leaf = try issuer.issueLeaf(contents)
        let chain: [[UInt8]]
        switch options.chain {
        case .leafAndIntermediate, .issuedByOtherAuthority: chain = [leaf, issuer.intermediateCertificate]
        case .leafOnly: chain = [leaf]
        case .intermediateFirst: chain = [issuer.intermediateCertificate, leaf]
        case .withRoot: chain = [leaf, issuer.intermediateCertificate, issuer.rootCertificate]
        case .foreignIntermediate: chain = [leaf, try TestCertificateAuthority(name: "Other").intermediateCertificate]
        }
        let object: CBORValue = .map([
            CBORMapEntry(key: .textString("fmt"), value: .textString(options.format)),
            CBORMapEntry(
                key: .textString("attStmt"),
                value: .map([
                    CBORMapEntry(key: .textString("x5c"), value: .array(chain.map(CBORValue.byteString))),
                    CBORMapEntry(
                        key: .textString("receipt"),
                        value: .byteString(try receipt(options, leaf: leaf, clientDataHash: Array(clientDataHash)))),
                ])),
            CBORMapEntry(key: .textString("authData"), value: .byteString(authData)),
        ])
        return Self.finish(
            CBOREncoder.encode(object), trailing: options.trailingBytes, truncatedTo: options.truncatedTo)
    }

    private func receipt(_ options: AttestationOptions, leaf: [UInt8], clientDataHash: [UInt8]) throws -> [UInt8] {
        if let receipt = options.receipt { return receipt }
        guard let receiptAuthority else { return Self.placeholderReceipt }
        return try receiptAuthority.sign(
            .attest(
                appID: appID, attestedCertificate: leaf, clientHash: clientDataHash,
                environment: options.environment ?? environment, creationTime: options.issuedAt))
    }

    /// rpIdHash ‖ flags ‖ counter ‖ aaguid ‖ L ‖ credentialId ‖ COSE key [‖ extensions] (“Verifying attestations”).
    private func authenticatorData(_ options: AttestationOptions) -> [UInt8] {
        let credentialID = options.credentialID ?? keyID.rawValue
        let aaguid = options.aaguid ?? (options.environment ?? environment).aaguid
        var data = (options.appID ?? appID).rpIDHash
        data.append(0x40)  // AT, as genuine attestations carry (“Verifying attestations”)
        data += Self.bigEndian(options.counter)
        data += aaguid
        data += [UInt8(credentialID.count >> 8), UInt8(credentialID.count & 0xFF)]
        data += credentialID
        data += CBOREncoder.encode(Self.coseKey(options.coseKey ?? privateKey.publicKey))
        if let extensions = options.extensions { data += CBOREncoder.encode(.map(extensions.entries)) }
        return data + options.authenticatorDataSuffix
    }

    /// `{1: 2, 3: -7, -1: 1, -2: x, -3: y}` (“Verifying attestations”).
    static func coseKey(_ key: P256.Signing.PublicKey) -> CBORValue {
        let point = [UInt8](key.x963Representation)
        return .map([
            CBORMapEntry(key: .unsignedInteger(1), value: .unsignedInteger(2)),
            CBORMapEntry(key: .unsignedInteger(3), value: .negativeInteger(6)),
            CBORMapEntry(key: .negativeInteger(0), value: .unsignedInteger(1)),
            CBORMapEntry(key: .negativeInteger(1), value: .byteString(Array(point[1..<33]))),
            CBORMapEntry(key: .negativeInteger(2), value: .byteString(Array(point[33..<65]))),
        ])
    }

    // MARK: Assertion

    /// How an assertion departs from a genuine one. The defaults produce a genuine assertion.
    public struct AssertionOptions: Sendable {
        /// Use this counter instead of the next one (the device's counter is left as it is).
        public var counter: UInt32?
        /// The App ID whose hash goes into authenticatorData.
        public var appID: AppID?
        /// Sign with another key.
        public var signingKey: P256.Signing.PrivateKey?
        /// Sign the nonce as if it were already a digest (the classic bug, “Verifying assertions and counters”).
        public var signNonceAsDigest = false
        /// Flip a bit of the signature.
        public var corruptSignature = false
        /// The iOS 27 extensions map appended to authenticatorData.
        public var extensions: AuthenticatorExtensions?
        /// Bytes appended after the CBOR object.
        public var trailingBytes: [UInt8] = []
        /// Cut the encoded object to this many bytes.
        public var truncatedTo: Int?

        /// Options that make a genuine assertion.
        public init() {}
    }

    /// An assertion over `clientData`, with the next counter unless the options say otherwise.
    public func assert(clientData: some Collection<UInt8>, _ options: AssertionOptions = .init()) throws -> [UInt8] {
        try assert(clientDataHash: AppAttestSHA256.hash(clientData), options)
    }

    /// An assertion over the exact clientDataHash, as `generateAssertion(_:clientDataHash:)` produces it.
    public func assert(clientDataHash: some Collection<UInt8>, _ options: AssertionOptions = .init()) throws
        -> [UInt8]
    {
        let counter: UInt32
        if let fixed = options.counter {
            counter = fixed
        } else {
            counter = state.withLock { value in
                value &+= 1
                return value
            }
        }
        var authData = (options.appID ?? appID).rpIDHash
        authData.append(0x40)  // Apple sets AT in assertions too (“Verifying attestations”)
        authData += Self.bigEndian(counter)
        if let extensions = options.extensions { authData += CBOREncoder.encode(.map(extensions.entries)) }
        let nonce = AppAttestSHA256.hash(authData + Array(clientDataHash))
        let key = options.signingKey ?? privateKey
        var signature: [UInt8]
        if options.signNonceAsDigest {
            signature = Array(try key.signature(for: PrecomputedSHA256(bytes: nonce)).derRepresentation)
        } else {
            // ECDSA hashes the nonce (“Verifying assertions and counters”).
            signature = Array(try key.signature(for: nonce).derRepresentation)
        }
        if options.corruptSignature { signature[signature.count - 1] ^= 0x01 }
        let object: CBORValue = .map([
            CBORMapEntry(key: .textString("signature"), value: .byteString(signature)),
            CBORMapEntry(key: .textString("authenticatorData"), value: .byteString(authData)),
        ])
        return Self.finish(
            CBOREncoder.encode(object), trailing: options.trailingBytes, truncatedTo: options.truncatedTo)
    }

    // MARK: Helpers

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    static func finish(_ bytes: [UInt8], trailing: [UInt8], truncatedTo: Int?) -> [UInt8] {
        let whole = bytes + trailing
        guard let truncatedTo else { return whole }
        return Array(whole.prefix(max(0, truncatedTo)))
    }
}

/// A 32-byte value handed to ECDSA as if it were a SHA-256 digest.
struct PrecomputedSHA256: Digest {
    static let byteCount = 32
    let bytes: [UInt8]

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }

    func makeIterator() -> Array<UInt8>.Iterator { bytes.makeIterator() }
    var description: String { "PrecomputedSHA256" }
}
