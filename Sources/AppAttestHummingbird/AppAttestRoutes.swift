#if Hummingbird
import AppAttest
public import AppAttestHTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
public import Hummingbird
import NIOCore

/// The routes an app needs before its first protected request, a challenge and attestation registration
/// (`AppAttestEnrollmentRoutes`, shared with every front end), as a route collection.
///
/// ```swift
/// router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
/// ```
public struct AppAttestRoutes<Context: RequestContext>: Sendable {
    /// The routes' table and operations.
    public let enrollment: AppAttestEnrollmentRoutes
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request, Context) -> String?
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
        self.enrollment = AppAttestEnrollmentRoutes(service: service, rateLimiter: rateLimiter)
        self.userID = userID
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
        for route in AppAttestEnrollmentRoutes.Route.allCases {
            routes.on(RouterPath(route.path), method: route.method) { request, context in
                Response(
                    try await enrollment.respond(
                        to: route, caller: caller(request, context), userID: userID(request, context)
                    ) { limit in try? await request.body.collect(upTo: limit).readableBytesView })
            }
        }
        return routes
    }
}
#endif  // Hummingbird
