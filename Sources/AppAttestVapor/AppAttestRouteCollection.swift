#if Vapor
import AppAttest
public import AppAttestHTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
public import Vapor

/// The routes an app needs before its first protected request (JSON of `AppAttestHTTPOperations`):
/// `POST {path}/challenge` and `POST {path}/attestation`. They are open to app clients not authenticated yet, so
/// they are bounded: bodies by `AppAttestHTTPLimits.maximumJSONBodySize`, outstanding challenges by the
/// service's `ChallengeLimits`, and requests by a rate limiter per client address.
///
/// ```swift
/// try app.register(collection: app.appAttest.routes())
/// ```
public struct AppAttestRouteCollection: RouteCollection, Sendable {
    /// The routes' table and operations (`AppAttestEnrollmentRoutes`, shared with every front end).
    public let enrollment: AppAttestEnrollmentRoutes
    /// Where the routes are mounted.
    public let path: String
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request) -> String?
    /// The caller a request counts against, for the rate limiter and the challenges' issuer.
    public let caller: @Sendable (Request) -> String

    /// Routes on `service` under `path`; `userID` names the user a new key is bound to; `rateLimiter` limits each
    /// caller (10 requests a second with bursts of 20 by default); `caller` names who a request counts against, by
    /// default its client's address (``defaultCaller(_:)``).
    public init(
        service: AppAttestService, path: String = "appattest",
        userID: @escaping @Sendable (Request) -> String? = { _ in nil },
        rateLimiter: AppAttestRateLimiter? = AppAttestRateLimiter(ratePerSecond: 10, burst: 20),
        caller: @escaping @Sendable (Request) -> String = { AppAttestRouteCollection.defaultCaller($0) }
    ) {
        self.enrollment = AppAttestEnrollmentRoutes(service: service, rateLimiter: rateLimiter)
        self.path = path
        self.userID = userID
        self.caller = caller
    }

    /// The address of the connected client (`Request.remoteAddress`, never the forwarded headers that
    /// `peerAddress` trusts), an IPv6 address as its /64 (`AppAttestEnrollmentRoutes.caller(ipAddress:)`); `anonymous`
    /// without one (a Unix-domain socket), one bucket for all such requests. Behind a proxy the address is the
    /// proxy's: give ``caller`` the address the proxy forwards instead (from a proxy you trust, which replaces the
    /// header rather than appending to it).
    public static func defaultCaller(_ request: Request) -> String {
        request.remoteAddress?.ipAddress.map { AppAttestEnrollmentRoutes.caller(ipAddress: $0) } ?? "anonymous"
    }

    /// Mounts `POST {path}/challenge` and `POST {path}/attestation`.
    public func boot(routes: any RoutesBuilder) throws {
        let group = routes.grouped(PathComponent(stringLiteral: path))
        for route in AppAttestEnrollmentRoutes.Route.allCases {
            group.on(
                HTTPMethod(rawValue: route.method.rawValue), PathComponent(stringLiteral: route.path), body: .stream
            ) { request async throws -> Response in
                do throws(AppAttestProblem) {
                    return Response(
                        try await enrollment.respond(
                            to: route, caller: caller(request),
                            userID: userID(request)
                        ) { _ in await Self.collect(request)?.readableBytesView })
                } catch {
                    throw AppAttestAbort(error)
                }
            }
        }
    }

    /// The body, at most `AppAttestHTTPLimits.maximumJSONBodySize` bytes (nil beyond), so that an
    /// oversized body gets the same problem response as everything else rather than Vapor's own error.
    static func collect(_ request: Request) async -> ByteBuffer? {
        let limit = AppAttestHTTPLimits.maximumJSONBodySize
        let body: ByteBuffer
        do { body = try await request.body.collect(max: limit).get() ?? ByteBuffer() } catch { return nil }
        return body.readableBytes <= limit ? body : nil
    }
}
#endif  // Vapor
