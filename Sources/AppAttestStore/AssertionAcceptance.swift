public import AppAttest
public import Foundation

/// An assertion the service has verified, for the store to accept in one transaction: its counter, against the key's
/// stored counters, and the challenge its client data binds, if any, consumed at the same time. Either both happen or
/// neither does.
public struct AssertionAcceptance: Sendable, Hashable {
    /// The key that signed it.
    public var keyID: KeyID
    /// The assertion's counter.
    public var counter: UInt32
    /// Which counters may be accepted: the policy the verifier admitted the counter under, applied here exactly
    /// (`AppAttestVerifier.CounterPolicy.advance(highest:seen:counter:)`).
    public var counterPolicy: AppAttestVerifier.CounterPolicy
    /// The challenge to consume, when the client data binds one.
    public var challenge: ChallengeUse?
    /// A new challenge to store with the acceptance (the next request's, returned with this one's response), in the
    /// same transaction; nothing is stored on a refusal.
    public var nextChallenge: ChallengeRecord?

    /// A challenge to consume with the counter.
    public struct ChallengeUse: Sendable, Hashable {
        /// The challenge's bytes.
        public var challenge: [UInt8]
        /// The purpose it must have been issued for.
        public var purpose: String
        /// The user of the key (a challenge reserved for a user is usable by that user's keys).
        public var userID: String?
        /// Challenges that expire at or before this instant are refused.
        public var now: Date

        /// A challenge use.
        public init(challenge: [UInt8], purpose: String, userID: String?, now: Date) {
            self.challenge = challenge
            self.purpose = purpose
            self.userID = userID
            self.now = now
        }
    }

    /// An acceptance to attempt.
    public init(
        keyID: KeyID, counter: UInt32, counterPolicy: AppAttestVerifier.CounterPolicy, challenge: ChallengeUse?,
        nextChallenge: ChallengeRecord? = nil
    ) {
        self.keyID = keyID
        self.counter = counter
        self.counterPolicy = counterPolicy
        self.challenge = challenge
        self.nextChallenge = nextChallenge
    }

    /// The most acceptances the service hands a store in one ``AppAttestStore/acceptAssertions(_:)`` call (its group
    /// commit); the SQL stores prepare one statement per size up to it.
    package static let maximumBatchSize = 64
}
