public import Foundation

extension AppAttestService {
    /// Bounds on unused, unexpired challenges, so that nobody can grow the store by asking for challenges and never
    /// using them. Expired ones stop counting at once and are deleted by the service's background work
    /// (``AppAttestService/run(challengePurgeInterval:logger:)``).
    public struct ChallengeLimits: Sendable, Hashable {
        /// Reserved for one key, whoever asked: a new one replaces the key's oldest beyond this. Bounded per key
        /// rather than per issuer, so that the challenges stored for keys stay within `perKey` times the registered
        /// keys however many addresses ask; the cost is that whoever knows a keyId can replace that device's
        /// challenges (it then asks again: a keyId is not public, and the routes' rate limit bounds one address).
        public var perKey: Int
        /// Reserved for one user and no key, by one issuer: a new one replaces the oldest that the same issuer asked
        /// for that user beyond this (those reserved for one of the user's keys count against the key, ``perKey``),
        /// so that a caller who may name any user, another tenant's backend say, never evicts the challenges others
        /// reserved for that user. What one issuer holds in all is bounded by ``perIssuer``.
        public var perUser: Int
        /// Held by one issuer (``issueChallenge(purpose:keyID:userID:issuer:appID:)``), so that one caller or address
        /// cannot take the whole ``total`` and lock everyone else out. Checked before a challenge is issued that is not
        /// reserved for a key, or is an attestation challenge (every challenge the issuer holds counted).
        public var perIssuer: Int
        /// In all, of those reserved for no key. Checked before a challenge is issued that is not reserved for a key, or
        /// is an attestation challenge: the others are bounded by ``perKey`` alone (a registered key that is not
        /// revoked) and are not counted here, so that a fleet whose devices each hold one (the next-challenge mode)
        /// never stops new registrations. (A store of your own that implements only `AppAttestStore` counts every
        /// challenge here.)
        public var total: Int

        /// - Parameters:
        ///   - perKey: reserved for one key (16 by default).
        ///   - perUser: reserved for one user (64 by default).
        ///   - perIssuer: held by one issuer (1,000 by default).
        ///   - total: in all (100,000 by default).
        public init(perKey: Int = 16, perUser: Int = 64, perIssuer: Int = 1_000, total: Int = 100_000) {
            self.perKey = perKey
            self.perUser = perUser
            self.perIssuer = perIssuer
            self.total = total
        }
    }

    /// How many attested keys the service keeps parsed in memory, and for how long
    /// (<doc:RunningTheVerificationService>, “The key cache”).
    ///
    /// A cached key saves the store's read and the key's parsing on the next assertion; the store stays the
    /// authority on counters and revocations, so the age bounds only how late this process sees a revocation or a
    /// receipt's risk metric made by another one (its own show at once). A full cache evicts its least recently used
    /// key, one per new key, in constant time. Each entry holds the key's record without its receipt and its parsed
    /// public key: about 1 KiB.
    public struct KeyCacheLimits: Sendable, Hashable {
        /// The most keys kept (0 turns the cache off).
        public var capacity: Int
        /// The most seconds a key is used as read, before the store is read again.
        public var maximumAge: TimeInterval

        /// - Parameters:
        ///   - capacity: the most keys kept (10,000 by default; 0 turns the cache off; negative values are 0).
        ///   - maximumAge: seconds a key is used as read (30 by default, at least 0).
        public init(capacity: Int = 10_000, maximumAge: TimeInterval = 30) {
            self.capacity = max(0, capacity)
            self.maximumAge = maximumAge.isFinite ? max(0, maximumAge) : 0
        }
    }
}
