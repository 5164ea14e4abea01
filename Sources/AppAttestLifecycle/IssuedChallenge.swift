public import Foundation

/// A challenge handed to a client.
public struct IssuedChallenge: Sendable, Hashable {
    /// The challenge bytes to hand to the app.
    public let challenge: [UInt8]
    /// When it stops being accepted.
    public let expiresAt: Date
}
