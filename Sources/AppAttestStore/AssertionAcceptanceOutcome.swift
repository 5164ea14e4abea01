/// What the store did with an ``AssertionAcceptance``: on a refusal nothing changed, and the outcome says why.
///
/// An enum on purpose, and a closed one: every store returns these, and the service switches over them, so the set
/// is part of the store contract. A new outcome would change what every store must be able to answer, and comes with
/// a new major version; new store abilities come as new protocol requirements with default implementations instead.
public enum AssertionAcceptanceOutcome: Sendable, Hashable {
    /// The counter was recorded and the challenge, if any, consumed; the key's highest counter is now this.
    case accepted(highestCounter: UInt32)
    /// No such key.
    case unknownKey
    /// The key is revoked.
    case keyRevoked
    /// The challenge is unknown, used, expired, or not usable by this key: the stored record when there is one.
    case challengeRefused(ChallengeRecord?)
    /// The counter was already accepted, or is below the window.
    case counterRefused(highestCounter: UInt32)
}
