#if HTTP
public import HTTPTypes
internal import AppAttestWire

/// The header fields of a protected request and its answer (“Protecting routes”).
public enum AppAttestHTTPHeaders {
    /// The keyId, standard Base64 (as `generateKey` returns it).
    public static let keyID = HTTPField.Name(RequestBindingHeaders.keyID)!
    /// The CBOR assertion, standard Base64.
    public static let assertion = HTTPField.Name(RequestBindingHeaders.assertion)!
    /// The one-time challenge the client data binds, Base64URL without padding.
    public static let challenge = HTTPField.Name(RequestBindingHeaders.challenge)!
    /// In a response, with ``AppAttestFreshness/nextChallengeInResponse``: a challenge for the app's next request,
    /// Base64URL without padding.
    public static let nextChallenge = HTTPField.Name(RequestBindingHeaders.nextChallenge)!
    /// With ``AppAttestFreshness/timestamp(window:)``: the Unix time in milliseconds the client data binds, decimal.
    public static let timestamp = HTTPField.Name(RequestBindingHeaders.timestamp)!
}
#endif  // HTTP
