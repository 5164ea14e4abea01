#if Hummingbird
import AppAttest
public import AppAttestHTTP
public import AppAttestStore
public import AppAttestLifecycle
import Foundation
public import Hummingbird
import NIOCore

/// The routes an app needs before its first protected request: a challenge, and attestation registration (the JSON
/// of `AppAttestHTTPOperations`), as a route collection.
///
/// - `POST challenge` `{"purpose": "attestation"|"assertion", "keyId"?: base64}` →
///   `{"challenge": base64url, "expiresAt": ISO 8601}`
/// - `POST attestation` `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   `{"keyId", "environment", "appId"}`
///
/// These routes are open to app clients that are not authenticated yet, so they are bounded: bodies by
/// `AppAttestHTTPLimits.maximumJSONBodySize`, outstanding challenges by the service's
/// `ChallengeLimits`, and requests by a rate limiter per caller (by default the client's address when the context
/// knows it, else one shared bucket).
///
/// ```swift
/// router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
/// ```
public struct AppAttestRoutes<Context: RequestContext>: Sendable {
    /// The framework-neutral operations the routes run.
    public let operations: AppAttestHTTPOperations
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request, Context) -> String?
    /// Limits challenge and attestation requests per caller (429 with `Retry-After` beyond it); nil for none.
    public let rateLimiter: AppAttestRateLimiter?
    /// The caller a request is counted against.
    public let caller: @Sendable (Request, Context) -> String

    /// Routes on `service`.
    /// - Parameters:
    ///   - service: the service that issues challenges and registers keys.
    ///   - userID: names the user a new key is bound to (from your authentication).
    ///   - rateLimiter: per caller; 10 requests a second with bursts of 20 by default.
    ///   - caller: the caller a request counts against: by default the remote address when the context has one.
    public init(
        service: AppAttestService,
        userID: @escaping @Sendable (Request, Context) -> String? = { _, _ in nil },
        rateLimiter: AppAttestRateLimiter? = AppAttestRateLimiter(ratePerSecond: 10, burst: 20),
        caller: @escaping @Sendable (Request, Context) -> String = { _, context in Self.defaultCaller(context) }
    ) {
        self.operations = AppAttestHTTPOperations(service: service)
        self.userID = userID
        self.rateLimiter = rateLimiter
        self.caller = caller
    }

    /// The remote address when the context knows it, else one shared bucket for everyone.
    public static func defaultCaller(_ context: Context) -> String {
        if let remote = (context as? any RemoteAddressRequestContext)?.remoteAddress {
            return remote.ipAddress ?? "anonymous"
        }
        return "anonymous"
    }

    /// The routes, to add with `router.addRoutes(_:atPath:)`.
    public var collection: RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.post("challenge") { request, context in
            try await respond(request, context) { body, userID in
                // Each caller (by default the client's address) may hold only so many challenges.
                await operations.challenge(body: body, userID: userID, issuer: caller(request, context))
            }
        }
        routes.post("attestation") { request, context in
            try await respond(request, context) { body, userID in
                await operations.attestation(body: body, userID: userID)
            }
        }
        return routes
    }

    private func respond(
        _ request: Request, _ context: Context,
        _ operation: (ByteBufferView, String?) async -> AppAttestHTTPResponse
    ) async throws -> Response {
        if let rateLimiter, case .limited(let retryAfter) = rateLimiter.acquire(caller(request, context)) {
            throw AppAttestProblem.rateLimited(retryAfter: retryAfter)
        }
        guard let body = try? await request.body.collect(upTo: AppAttestHTTPLimits.maximumJSONBodySize) else {
            throw AppAttestProblem.bodyTooLarge
        }
        return Response(await operation(body.readableBytesView, userID(request, context)))
    }
}
#endif  // Hummingbird
