#if HTTP
import AppAttest
import AppAttestLifecycle

/// Every limit of the HTTP layer, defined once: the middleware, the routes and `appattest serve` read them here.
public enum AppAttestHTTPLimits {
    /// The largest JSON body of the challenge, attestation and verification operations: a Base64 attestation
    /// object, or the largest client data and assertion in Base64, with room for the rest.
    public static let maximumJSONBodySize =
        max(AttestationObject.maximumSize, AppAttestClientData.maximumOpaqueLength + AssertionObject.maximumSize) * 4
        / 3 + 4096
    /// The default largest body of a protected request (it is hashed into the client data).
    public static let defaultMaximumProtectedBodySize = 1024 * 1024
    /// The longest user identifier bound to a key or challenge, in bytes.
    public static let maximumUserIDLength = AppAttestService.maximumUserIDLength
    /// The largest challenge in a request, in bytes (the service issues 32).
    public static let maximumChallengeLength = AppAttestClientData.maximumChallengeLength
    /// The largest opaque client data, in bytes.
    public static let maximumClientDataLength = AppAttestClientData.maximumOpaqueLength
}
#endif  // HTTP
