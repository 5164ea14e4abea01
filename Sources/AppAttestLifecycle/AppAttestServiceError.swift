public import AppAttest
public import Foundation

/// Why the service refused a request. Verification failures keep the verifier's own error.
public struct AppAttestServiceError: Error, Sendable, CustomStringConvertible {
    /// A stable code for a refusal.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name, as problem responses and metrics show it.
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The challenge was never issued, or was already used.
        public static let challengeUnknown = Code("challengeUnknown")
        /// The challenge expired.
        public static let challengeExpired = Code("challengeExpired")
        /// The challenge is for another purpose, key or user, or is not in the client data.
        public static let challengeMismatch = Code("challengeMismatch")
        /// The key is already registered (a replayed attestation).
        public static let keyAlreadyRegistered = Code("keyAlreadyRegistered")
        /// The key is registered to another user (“Verifying attestations”, after step 9).
        public static let keyBoundToAnotherUser = Code("keyBoundToAnotherUser")
        /// No such key.
        public static let unknownKey = Code("unknownKey")
        /// The key was revoked: by its owner's decision (``AppAttestService/revokeKey(_:reason:)``), or as
        /// ``keySuperseded`` when a newer key of its user replaced it.
        public static let keyRevoked = Code("keyRevoked")
        /// The key was revoked because its user registered more keys than
        /// ``AppAttestService/AppPolicy/maximumKeysPerUser`` allows and it was the oldest: the device is genuine,
        /// and registering a new key is the answer (problem action `reattest`), where a ``keyRevoked`` key stays
        /// refused. Told apart by the key's events (`KeyEvent.Kind.superseded`), which the retention purge keeps;
        /// a superseded key its owner then revokes is ``keyRevoked``.
        public static let keySuperseded = Code("keySuperseded")
        /// Another request with this counter (or a higher one) was accepted first.
        public static let counterReplayed = Code("counterReplayed")
        /// The attestation or assertion failed verification: see ``AppAttestServiceError/verification``.
        public static let verificationFailed = Code("verificationFailed")
        /// The store could not answer.
        public static let storeUnavailable = Code("storeUnavailable")
        /// The key's environment is no longer allowed for its App ID (the configuration changed since it was
        /// attested): its assertions are refused.
        public static let environmentNotAllowed = Code("environmentNotAllowed")
        /// Too many unused challenges are outstanding for this issuer, or in all (``AppAttestService/ChallengeLimits``).
        public static let tooManyChallenges = Code("tooManyChallenges")
        /// The client data's binding is malformed: a method or path that cannot be bound, a challenge of a size the
        /// service never issues, client data too large (`AppAttestClientData`).
        public static let malformedBinding = Code("malformedBinding")
        /// The user identifier is empty, longer than ``AppAttestService/maximumUserIDLength`` bytes, or holds a
        /// control character (U+0000–U+001F, U+007F–U+009F): stores would disagree on such an identifier (SQLite ends
        /// a text at NUL).
        public static let invalidUserID = Code("invalidUserID")
        /// A receipt refresh failed at Apple or on the way (``AppAttestServiceError/underlying`` holds the refresher's
        /// error).
        public static let receiptRefreshFailed = Code("receiptRefreshFailed")
        /// An attestation challenge beyond the App ID's attestation budget
        /// (``AppAttestService/AppPolicy/attestationsPerSecond``): ``AppAttestServiceError/retryAfter`` says when to
        /// ask again.
        public static let attestationBudgetExhausted = Code("attestationBudgetExhausted")
        /// A verified assertion by a key of an App ID that the routes which received it do not serve: refused before
        /// its challenge or counter is used (the HTTP layer's `appIdNotAllowed`).
        package static let appIDNotServed = Code("appIdNotAllowed")
    }

    /// The reason.
    public let code: Code
    /// What went wrong, for logs (never echoes client bytes).
    public let message: String
    /// The verifier's error, for ``Code/verificationFailed``.
    public let verification: AppAttestError?
    /// The error of what the service called, for ``Code/receiptRefreshFailed`` (e.g. `AppleAPIError`).
    public let underlying: (any Error)?
    /// Seconds after which the same request may succeed, for ``Code/attestationBudgetExhausted``.
    public let retryAfter: TimeInterval?

    /// An error with a code, a message and, for ``Code/verificationFailed``, the verifier's error.
    public init(
        _ code: Code, _ message: String, verification: AppAttestError? = nil, underlying: (any Error)? = nil,
        retryAfter: TimeInterval? = nil
    ) {
        self.code = code
        self.message = message
        self.verification = verification
        self.underlying = underlying
        self.retryAfter = retryAfter
    }

    public var description: String {
        verification.map { "\(code) (\($0.code)): \(message)" } ?? "\(code): \(message)"
    }
}

extension AppAttestServiceError {
    /// The refusal of client data that `AppAttestClientData` would not build.
    package init(binding error: AppAttestError) {
        self.init(.malformedBinding, error.reason)
    }
}
