public import AppAttest
public import AppAttestStore

/// A verified assertion whose counter is stored.
public struct AuthenticatedAssertion: Sendable, Hashable {
    /// The key's record, with the key's highest accepted counter after this assertion, and without its receipt
    /// (`receipt` is empty): an assertion never reads a receipt, a real one being most of a key's bytes
    /// (``AppAttestService/key(_:)`` reads the whole record).
    public let record: KeyRecord
    /// What the verifier returned for it. Its `key.counter` is the highest counter this process knew when it verified
    /// (0 for a key read without its counter, as SQLite's store reads a key the cache does not hold); ``record``'s is
    /// the stored one.
    public let assertion: VerifiedAssertion
    /// The next request's challenge, stored with this assertion's counter, when it was asked for (the HTTP layer
    /// returns it in a response header).
    public let nextChallenge: IssuedChallenge?

    init(record: KeyRecord, assertion: VerifiedAssertion, nextChallenge: IssuedChallenge? = nil) {
        self.record = record
        self.assertion = assertion
        self.nextChallenge = nextChallenge
    }
}
