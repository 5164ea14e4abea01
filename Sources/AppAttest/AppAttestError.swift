/// Why the library refused an attestation, an assertion or a configuration.
///
/// One error type for the whole core, with stable codes. The codes of verification map one to
/// one onto the reasons of the test-vector format (TestVectors/README.md); ``Code/unsupportedKey``,
/// ``Code/internalCryptoFailure`` and ``Code/invalidConfiguration`` cover what the vectors do not reach, and
/// receipts add ``Code/clientHashMismatch``, ``Code/receiptTypeMismatch`` and ``Code/receiptTooOld``.
/// The ``reason`` may name sizes, offsets and hashes; it never echoes raw client bytes.
public struct AppAttestError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable, machine-readable error code. New codes may be added; switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible, CaseIterable {
        private enum Backing: String, CaseIterable, Sendable {
            case malformed, certificateChain, certificateValidity, nonceMismatch, keyIdMismatch
            case publicKeyMismatch, appIdMismatch, counterNotZero, environmentMismatch, credentialIdMismatch
            case signatureInvalid, counterNotIncreasing, unsupportedKey, internalCryptoFailure
            case invalidConfiguration, clientHashMismatch, receiptTypeMismatch, receiptTooOld, receiptFromTheFuture
        }
        private let backing: Backing
        private init(_ backing: Backing) { self.backing = backing }

        /// Not a well-formed object: CBOR, structure, `fmt`, lengths, sizes, trailing bytes.
        public static let malformed = Code(.malformed)
        /// `x5c` does not chain to the configured root (Apple's App Attestation root by default).
        public static let certificateChain = Code(.certificateChain)
        /// A certificate of the chain is not valid at the verification time.
        public static let certificateValidity = Code(.certificateValidity)
        /// The credCert nonce extension differs from SHA-256(authData ‖ clientDataHash) (<doc:VerifyingAttestations>
        /// steps 2–4).
        public static let nonceMismatch = Code(.nonceMismatch)
        /// SHA-256 of the credCert public key differs from the keyId (<doc:VerifyingAttestations> step 5).
        public static let keyIdMismatch = Code(.keyIdMismatch)
        /// The COSE key in authData differs from the credCert public key (<doc:VerifyingAttestations>).
        public static let publicKeyMismatch = Code(.publicKeyMismatch)
        /// rpIdHash is not SHA-256 of a configured App ID (<doc:VerifyingAttestations> step 6,
        /// <doc:VerifyingAssertions> step 4).
        public static let appIdMismatch = Code(.appIdMismatch)
        /// The attestation's counter is not 0 (<doc:VerifyingAttestations> step 7).
        public static let counterNotZero = Code(.counterNotZero)
        /// The AAGUID is not that of an environment allowed for the App ID (<doc:VerifyingAttestations> step 8).
        public static let environmentMismatch = Code(.environmentMismatch)
        /// credentialId differs from the keyId (<doc:VerifyingAttestations> step 9).
        public static let credentialIdMismatch = Code(.credentialIdMismatch)
        /// The assertion signature does not verify over the nonce with the stored key (<doc:VerifyingAssertions>).
        public static let signatureInvalid = Code(.signatureInvalid)
        /// The assertion counter is not greater than the stored counter (<doc:VerifyingAssertions>).
        public static let counterNotIncreasing = Code(.counterNotIncreasing)
        /// A key that is not an ECDSA P-256 point, or a COSE key of another type.
        public static let unsupportedKey = Code(.unsupportedKey)
        /// OpenSSL failed in a way that says nothing about the input (out of memory, missing algorithm).
        public static let internalCryptoFailure = Code(.internalCryptoFailure)
        /// The verifier's configuration is unusable (no App ID, a trust anchor that does not parse, …).
        public static let invalidConfiguration = Code(.invalidConfiguration)

        /// A receipt's client hash (field 4) differs from the attestation's clientDataHash
        /// (<doc:ReceiptsAndRiskMetric>).
        public static let clientHashMismatch = Code(.clientHashMismatch)
        /// A receipt of another type than expected (field 6: ATTEST or RECEIPT).
        public static let receiptTypeMismatch = Code(.receiptTypeMismatch)
        /// A freshly received receipt created more than five minutes before the verification time
        /// (<doc:ReceiptsAndRiskMetric>).
        public static let receiptTooOld = Code(.receiptTooOld)
        /// A receipt created after the verification time, beyond the clock skew leeway
        /// (<doc:ReceiptsAndRiskMetric>).
        public static let receiptFromTheFuture = Code(.receiptFromTheFuture)

        /// Every code, in declaration order.
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The code's name, identical to the test-vector reason where one exists (e.g. `nonceMismatch`).
        public var description: String { backing.rawValue }

        /// The code with this name, e.g. a reason read from a test-vector file.
        public init?(_ name: String) {
            guard let backing = Backing(rawValue: name) else { return nil }
            self.backing = backing
        }
    }

    /// What went wrong, as a stable code.
    public let code: Code
    /// A human-readable explanation.
    public let reason: String
    /// Where the error was raised, for diagnostics.
    public let file: String
    /// Where the error was raised, for diagnostics.
    public let line: Int

    /// An error with a code and a reason; `file` and `line` say where it was raised.
    public init(_ code: Code, _ reason: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.reason = reason
        self.file = file
        self.line = line
    }

    public var description: String { "\(code): \(reason)" }

    // Two errors are equal when their codes and reasons are; where they were raised does not matter.
    public static func == (lhs: AppAttestError, rhs: AppAttestError) -> Bool {
        lhs.code == rhs.code && lhs.reason == rhs.reason
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(reason)
    }
}
