#if HTTP
public import AppAttest

/// The verified device behind a request, as adapters put it into the request context.
public struct AttestedDevice: Sendable, Hashable, Codable {
    /// The key that signed the request.
    public let keyID: KeyID
    /// The user the key is bound to, if any.
    public let userID: String?
    /// The counter of this request's assertion.
    public let counter: UInt32
    /// The risk metric of the key's latest receipt, if known.
    public let riskMetric: Int?
    /// The App ID the key was attested for (nil only for a device made without one).
    public let appID: AppID?

    /// A verified device.
    public init(keyID: KeyID, userID: String?, counter: UInt32, riskMetric: Int?, appID: AppID? = nil) {
        self.keyID = keyID
        self.userID = userID
        self.counter = counter
        self.riskMetric = riskMetric
        self.appID = appID
    }
}
#endif  // HTTP
