#if HTTP
import AppAttest
public import AppAttestLifecycle
public import HTTPTypes

/// The routes an app calls before its first protected request, as every front end registers them: one table, and
/// one "rate-limit → collect with a limit → operation" path, so that the Hummingbird and Vapor adapters only register
/// and convert.
///
/// - `POST challenge` `{"purpose": "attestation"|"assertion", "keyId"?: base64}` →
///   `{"challenge": base64url, "expiresAt": ISO 8601}`
/// - `POST attestation` `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   the key's document, as `appattest serve` answers (`AppAttestHTTPOperations`)
///
/// These routes are open to app clients that are not authenticated yet, so they are bounded: bodies by
/// ``AppAttestHTTPLimits/maximumJSONBodySize``, outstanding challenges by the service's `ChallengeLimits` (each caller
/// an issuer), and requests by a rate limiter per caller. An assertion challenge reserved for a registered key counts
/// against that key's own bucket at the caller instead (the caller's token is taken, then given back): devices behind
/// one address (a carrier's NAT, a campus) each fetch one per request, and must not hold each other at 429, while a
/// stranger elsewhere who knows a keyId cannot spend that device's bucket. Its refusal (an unknown or revoked key)
/// counts against the caller.
public struct AppAttestEnrollmentRoutes: Sendable {
    /// One route of the table.
    public enum Route: String, CaseIterable, Sendable {
        /// `POST challenge`: a one-time challenge.
        case challenge
        /// `POST attestation`: registers an attested key.
        case attestation

        /// The route's method.
        public var method: HTTPRequest.Method { .post }
        /// The route's path, below where the routes are mounted.
        public var path: String { rawValue }
    }

    /// The operations the routes run.
    public let operations: AppAttestHTTPOperations
    /// Limits requests per caller (429 with `Retry-After` beyond it); nil for none.
    public let rateLimiter: AppAttestRateLimiter?

    /// Routes on `service`, with a rate limiter per caller (10 requests a second with bursts of 20 by default).
    public init(
        service: AppAttestService,
        rateLimiter: AppAttestRateLimiter? = AppAttestRateLimiter(ratePerSecond: 10, burst: 20)
    ) {
        self.operations = AppAttestHTTPOperations(service: service)
        self.rateLimiter = rateLimiter
    }

    /// Answers one request: the caller's rate limit first, then its body, collected by the framework up to the limit
    /// it is given (nil beyond it), then the operation.
    /// - Parameters:
    ///   - route: the route the request arrived on.
    ///   - caller: who the request counts against (a client's address); also the challenge's issuer.
    ///   - userID: the user to bind to, from your own authentication; nil for none.
    ///   - collect: collects the body up to the limit it is given; nil when the body is larger.
    /// - Throws: `rateLimited` or `bodyTooLarge`; an operation's refusal is its response's problem.
    public func respond<Body: Collection<UInt8>>(
        to route: Route, caller: String, userID: String?, body collect: (_ limit: Int) async -> Body?
    ) async throws(AppAttestProblem) -> AppAttestHTTPResponse {
        // Charged first, atomically, so that requests at once never pass beyond the caller's bucket.
        if let rateLimiter, case .limited(let retryAfter) = rateLimiter.acquire(caller) {
            throw .rateLimited(retryAfter: retryAfter)
        }
        guard let body = await collect(AppAttestHTTPLimits.maximumJSONBodySize) else { throw .bodyTooLarge }
        guard route == .challenge else { return await operations.attestation(body: body, userID: userID) }
        // Not a request (answered `malformed`, as the operation answers it).
        guard let request = AppAttestHTTPOperations.decode(AppAttestHTTPOperations.ChallengeRequest.self, body) else {
            return await operations.challenge(body: body, userID: userID, issuer: caller)
        }
        guard let rateLimiter, request.purpose == AppAttestService.Purpose.assertion, let keyText = request.keyId,
            let keyID = try? KeyID(base64Encoded: keyText)
        else {
            return await operations.challenge(
                purpose: request.purpose, keyID: request.keyId, userID: userID, issuer: caller)
        }
        // A registered key's challenge is paid by the key's own bucket at this address, and the caller's token given
        // back: devices behind one address do not spend each other's, and a stranger elsewhere who knows the keyId
        // (it travels in every request) cannot spend the device's.
        let keyBucket = "key:" + keyID.base64EncodedString + "@" + caller
        if case .limited(let retryAfter) = rateLimiter.acquire(keyBucket) { throw .rateLimited(retryAfter: retryAfter) }
        let response = await operations.challenge(
            purpose: request.purpose, keyID: keyText, userID: userID, issuer: caller)
        // Refused (a key unknown or revoked, a limit): the caller's doing, and its token kept.
        if response.status == .ok { rateLimiter.release(caller) } else { rateLimiter.release(keyBucket) }
        return response
    }
}
#endif  // HTTP
