/// A store failure that is not a verdict: the backend could not answer.
///
/// A struct with static members rather than an enum, so that new kinds can be added without breaking code that
/// handles the existing ones.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        /// A stable name for logs and metrics.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// The backend is unreachable or failed (adapters answer 503).
        public static let unavailable = Kind("unavailable")
        /// The stored data does not decode (a corrupted row, a schema from the future).
        public static let corrupted = Kind("corrupted")

        public var description: String { rawValue }
    }

    /// What kind of failure this is.
    public let kind: Kind
    /// What the backend said, for logs (never shown to clients).
    public let message: String
    /// The operation was abandoned at its deadline (``StoreDeadline``): what it did may still be applied, so it is not
    /// to be retried as if it had rolled back.
    package var timedOut = false

    /// A store failure.
    /// - Parameters:
    ///   - kind: what kind of failure this is.
    ///   - message: what the backend said.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "store \(kind.rawValue): \(message)" }
}
