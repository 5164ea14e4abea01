public import AppAttest
public import Foundation

/// A one-time challenge as stored: random bytes bound to a purpose and, optionally, to a key or a user.
public struct ChallengeRecord: Sendable, Hashable {
    /// The random challenge bytes (at least 16, “Verifying assertions and counters”).
    public var challenge: [UInt8]
    /// What it may be used for, e.g. `attestation` or `assertion`.
    public var purpose: String
    /// The key it is reserved for, if any.
    public var keyID: KeyID?
    /// The user it is reserved for, if any.
    public var userID: String?
    /// When it stops being usable.
    public var expiresAt: Date
    /// Who asked for it (a caller's name, a client's address), so that what one issuer may hold is bounded
    /// (`AppAttestService.ChallengeLimits.perIssuer`); nil when not known. Stored, not returned by reads.
    public var issuer: String?

    /// A challenge record.
    public init(
        challenge: [UInt8], purpose: String, keyID: KeyID?, userID: String?, expiresAt: Date, issuer: String? = nil
    ) {
        self.challenge = challenge
        self.purpose = purpose
        self.keyID = keyID
        self.userID = userID
        self.expiresAt = expiresAt
        self.issuer = issuer
    }
}
