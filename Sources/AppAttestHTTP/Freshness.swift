#if HTTP
import HTTPTypes

/// How a protected request proves that it is fresh, chosen per route group (“Protecting routes”, Freshness).
///
/// - ``challengePerRequest``, the default: each request binds a one-time challenge the app fetched for it. A
///   captured request is useless (its challenge is consumed) and nothing can be prepared ahead of time.
/// - ``nextChallengeInResponse``: the same, but each accepted response carries the challenge for the next request
///   (``AppAttestHTTPHeaders/nextChallenge``), so steady traffic needs no extra round trip; the app fetches one only
///   to start, or after a lost response. Same guarantees: a challenge is issued for one key and used once.
/// - ``timestamp(window:)``: no challenge; the client data binds the request and the device's clock
///   (``AppAttestHTTPHeaders/timestamp``), accepted within the window of the server's clock. The counter still makes
///   every assertion single-use, but a compromised app can prepare requests ahead of time for the length of the
///   window, and a device with a wrong clock is refused.
public struct AppAttestFreshness: Sendable, Hashable {
    enum Mode: Hashable { case challenge, nextChallenge, timestamp }
    let mode: Mode
    /// For timestamps: how far the signed time may be from the server's, either way.
    public let window: Duration

    /// A one-time challenge per request (the default).
    public static let challengePerRequest = AppAttestFreshness(mode: .challenge, window: .zero)
    /// A one-time challenge per request, the next one returned with each accepted response.
    public static let nextChallengeInResponse = AppAttestFreshness(mode: .nextChallenge, window: .zero)
    /// A signed timestamp within `window` of the server's clock (1 second to 10 minutes; 60 seconds by default).
    public static func timestamp(window: Duration = .seconds(60)) -> AppAttestFreshness {
        AppAttestFreshness(mode: .timestamp, window: min(max(window, .seconds(1)), .seconds(600)))
    }
}
#endif  // HTTP
