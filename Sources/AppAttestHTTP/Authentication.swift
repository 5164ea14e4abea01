#if HTTP
public import HTTPTypes

/// A request that passed verification: its device, and the header fields to add to its response.
public struct AppAttestAuthentication: Sendable, Hashable {
    /// The verified device.
    public let device: AttestedDevice
    /// Header fields for the response (``AppAttestHTTPHeaders/nextChallenge``, with that freshness).
    public let responseHeaderFields: HTTPFields
}
#endif  // HTTP
