package import AppAttestCBOR

/// Authenticator data, parsed by structure and never by its flags (<doc:VerifyingAttestations>).
///
/// App Attest sets AT (0x40) in assertions although no credential data follows, and leaves ED clear when an
/// iOS 27 extensions map is present, so the flags cannot drive parsing. An attestation's data is
/// `rpIdHash(32) ‖ flags(1) ‖ counter(4) ‖ aaguid(16) ‖ L(2) ‖ credentialId(L) ‖ COSE key ‖ [extensions map]`;
/// an assertion's is `rpIdHash(32) ‖ flags(1) ‖ counter(4) ‖ [extensions map]`. Anything else is malformed.
public struct AuthenticatorData: Sendable, Hashable {
    /// The bytes as received; hashes are always computed over these, never over a re-encoding
    /// (<doc:VerifyingAssertions>).
    public let rawRepresentation: [UInt8]
    /// SHA-256 of the App ID.
    public let rpIDHash: [UInt8]
    /// The flags byte, for information only.
    public let flags: Flags
    /// The signature counter (big-endian, unsigned 32-bit; <doc:VerifyingAssertions>).
    public let counter: UInt32
    /// Present in attestations only.
    public let attestedCredentialData: AttestedCredentialData?
    /// The iOS 27 extensions map, when the device wrote one (<doc:VerifyingAttestations>).
    public let extensions: AuthenticatorExtensions?

    /// The WebAuthn flags byte (<doc:VerifyingAttestations>).
    public struct Flags: OptionSet, Sendable, Hashable {
        /// The flags byte.
        public let rawValue: UInt8
        /// Flags from their byte.
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// UP: the user was present.
        public static let userPresent = Flags(rawValue: 0x01)
        /// UV: the user was verified.
        public static let userVerified = Flags(rawValue: 0x04)
        /// BE: the credential may be backed up.
        public static let backupEligible = Flags(rawValue: 0x08)
        /// BS: the credential is backed up.
        public static let backupState = Flags(rawValue: 0x10)
        /// AT: attested credential data follows (Apple sets it in assertions too).
        public static let attestedCredentialData = Flags(rawValue: 0x40)
        /// ED: extension data follows (Apple leaves it clear when iOS 27 appends extensions).
        public static let extensionData = Flags(rawValue: 0x80)
    }

    /// The credential part of an attestation's authenticator data.
    public struct AttestedCredentialData: Sendable, Hashable {
        /// 16 bytes naming the environment (<doc:VerifyingAttestations>).
        public let aaguid: [UInt8]
        /// Equals the keyId in a genuine attestation.
        public let credentialID: [UInt8]
        /// The COSE_Key as decoded.
        package let credentialPublicKey: CBORValue
        /// `04 ‖ x ‖ y` of the COSE key, when it is an EC2 P-256 ES256 key with 32-byte coordinates.
        public let credentialPublicKeyPoint: [UInt8]?

        /// The environment the AAGUID names, if it names one.
        public var environment: AppAttestEnvironment? { AppAttestEnvironment(aaguid: aaguid) }
    }

    /// The largest authenticator data accepted. Real ones are 37–226 bytes (<doc:VerifyingAttestations>).
    public static let maximumSize = 16 * 1024

    /// Parses the authenticator data of an attestation object.
    /// - Throws: ``AppAttestError/Code/malformed``.
    public init(attestationRepresentation bytes: [UInt8]) throws(AppAttestError) {
        try self.init(bytes, attestation: true)
    }

    /// Parses the authenticator data of an assertion.
    /// - Throws: ``AppAttestError/Code/malformed``.
    public init(assertionRepresentation bytes: [UInt8]) throws(AppAttestError) {
        try self.init(bytes, attestation: false)
    }

    private init(_ bytes: [UInt8], attestation: Bool) throws(AppAttestError) {
        guard bytes.count <= Self.maximumSize else {
            throw AppAttestError(.malformed, "authenticator data of \(bytes.count) bytes exceeds \(Self.maximumSize)")
        }
        let fixed = attestation ? 55 : 37
        guard bytes.count >= fixed else {
            throw AppAttestError(.malformed, "authenticator data of \(bytes.count) bytes is shorter than \(fixed)")
        }
        rawRepresentation = bytes
        rpIDHash = Array(bytes[0..<32])
        flags = Flags(rawValue: bytes[32])
        counter = UInt32(bytes[33]) << 24 | UInt32(bytes[34]) << 16 | UInt32(bytes[35]) << 8 | UInt32(bytes[36])
        let decoder = CBORDecoder(maximumInputSize: Self.maximumSize, maximumDepth: 8)
        var offset = 37
        if attestation {
            let length = Int(bytes[53]) << 8 | Int(bytes[54])
            guard bytes.count - 55 > length else {
                throw AppAttestError(
                    .malformed, "credentialIdLength \(length) leaves no room for the credential public key")
            }
            let credentialID = Array(bytes[55..<(55 + length)])
            offset = 55 + length
            let key: CBORValue
            do { (key, offset) = try decoder.decodePrefix(bytes, from: offset) } catch {
                throw AppAttestError(.malformed, "credential public key: \(error)")
            }
            attestedCredentialData = AttestedCredentialData(
                aaguid: Array(bytes[37..<53]), credentialID: credentialID, credentialPublicKey: key,
                credentialPublicKeyPoint: Self.p256Point(fromCOSEKey: key))
        } else {
            attestedCredentialData = nil
        }
        if offset < bytes.count {
            let item: CBORValue
            do { (item, offset) = try decoder.decodePrefix(bytes, from: offset) } catch {
                throw AppAttestError(.malformed, "extensions: \(error)")
            }
            guard case .map(let entries) = item else {
                throw AppAttestError(.malformed, "the item after the fixed fields is not an extensions map")
            }
            guard offset == bytes.count else {
                throw AppAttestError(.malformed, "\(bytes.count - offset) bytes follow the extensions map")
            }
            extensions = AuthenticatorExtensions(entries: entries)
        } else {
            extensions = nil
        }
    }

    /// `04 ‖ x ‖ y` from a COSE_Key `{1: 2, 3: -7, -1: 1, -2: x, -3: y}` (<doc:VerifyingAttestations>), else nil.
    static func p256Point(fromCOSEKey key: CBORValue) -> [UInt8]? {
        guard case .map(let entries) = key, entries.count == 5,
            key[integerKey: 1] == .unsignedInteger(2),  // kty EC2
            key[integerKey: 3] == .negativeInteger(6),  // alg ES256 (-7)
            key[integerKey: -1] == .unsignedInteger(1),  // crv P-256
            case .byteString(let x) = key[integerKey: -2], x.count == 32,
            case .byteString(let y) = key[integerKey: -3], y.count == 32
        else { return nil }
        return [0x04] + x + y
    }
}

/// The extensions map that iOS 27 and later append to authenticator data (<doc:VerifyingAttestations>).
///
/// Known keys are exposed as properties; every key, known or not, is listed in ``keys``. A known key with a
/// value of an unexpected type leaves its property nil: the map is a risk signal, never a reason to fail.
public struct AuthenticatorExtensions: Sendable, Hashable {
    /// Every entry in encoded order.
    package let entries: [CBORMapEntry]

    /// The key of the app's bundle version.
    public static let bundleVersionKey = "apple_bundle_version_01"
    /// The key of the launch validation category.
    public static let validationCategoryKey = "apple_validation_category_01"

    package init(entries: [CBORMapEntry]) { self.entries = entries }

    /// Extensions with the known keys, as a simulated device writes them.
    /// - Parameters:
    ///   - bundleVersion: the app's bundle version, e.g. "1".
    ///   - validationCategoryBytes: the four bytes of the launch validation category.
    public init(bundleVersion: String? = nil, validationCategoryBytes: [UInt8]? = nil) {
        var entries: [CBORMapEntry] = []
        if let bundleVersion {
            entries.append(CBORMapEntry(key: .textString(Self.bundleVersionKey), value: .textString(bundleVersion)))
        }
        if let validationCategoryBytes {
            entries.append(
                CBORMapEntry(key: .textString(Self.validationCategoryKey), value: .byteString(validationCategoryBytes)))
        }
        self.entries = entries
    }

    /// The text keys of every entry, known or not, in encoded order.
    public var keys: [String] {
        entries.compactMap { entry in
            guard case .textString(let key) = entry.key else { return nil }
            return key
        }
    }

    /// The app's bundle version (`apple_bundle_version_01`), e.g. "1".
    public var bundleVersion: String? {
        guard case .textString(let text) = value(for: Self.bundleVersionKey) else { return nil }
        return text
    }

    /// The raw 4 bytes of `apple_validation_category_01`.
    public var validationCategoryBytes: [UInt8]? {
        guard case .byteString(let bytes) = value(for: Self.validationCategoryKey) else { return nil }
        return bytes
    }

    /// The launch validation category read as a little-endian unsigned 32-bit integer (h'01000000' → 1).
    /// - Warning: Apple has not documented the byte order or the meaning of the values
    ///   (<doc:VerifyingAttestations>); use it as a signal to monitor, not as a policy input, and prefer ``validationCategoryBytes`` when storing.
    public var validationCategory: UInt32? {
        guard let bytes = validationCategoryBytes, bytes.count == 4 else { return nil }
        return bytes.reversed().reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// The value under a text key.
    package func value(for key: String) -> CBORValue? {
        entries.first { $0.key == .textString(key) }?.value
    }
}
