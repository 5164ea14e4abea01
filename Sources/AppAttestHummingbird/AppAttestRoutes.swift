#if Hummingbird
import AppAttest
public import AppAttestHTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
public import Hummingbird
import NIOCore
import Synchronization

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
    ///   - caller: the caller a request counts against: by default the client's address (``defaultCaller(_:)``).
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

    /// The client's address when the context knows it (``AppAttestRequestContext`` does), an IPv6 address as its /64
    /// (`AppAttestEnrollmentRoutes.caller(ipAddress:)`). A context without one puts every request in one bucket,
    /// `anonymous`, so that the routes stay bounded, and logs a warning the first time: then every client shares one
    /// rate limit and one challenge allowance. Behind a proxy the address is the proxy's: give ``caller`` the address
    /// the proxy forwards instead (from a proxy you trust, which replaces the header rather than appending to it).
    public static func defaultCaller(_ context: Context) -> String {
        if let address = (context as? any RemoteAddressRequestContext)?.remoteAddress?.ipAddress {
            return AppAttestEnrollmentRoutes.caller(ipAddress: address)
        }
        if !sharedCallerWarned.exchange(true, ordering: .relaxed) {
            context.logger.warning(
                """
                AppAttestRoutes: the request context has no client address and no caller was given: every client \
                shares one rate limit and one challenge allowance (use AppAttestRequestContext, or pass caller:)
                """)
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
/// Whether ``AppAttestRoutes/defaultCaller(_:)`` has warned of a context without a client address (once a process).
private let sharedCallerWarned = Atomic<Bool>(false)
#endif  // Hummingbird
