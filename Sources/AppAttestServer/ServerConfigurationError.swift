#if Service
/// A configuration that cannot be used.
public struct ServerConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
#endif  // Service
