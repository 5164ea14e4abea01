#if Vapor
import AppAttest
import AppAttestHTTP
import AppAttestStore
import AppAttestLifecycle
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
public import Vapor

/// Renders the refusals of ``AppAttestMiddleware`` and ``AppAttestRouteCollection`` (``AppAttestAbort``) as
/// `application/problem+json` responses with their stable `code` and `Retry-After`, as Hummingbird renders a thrown
/// problem; every other error passes on to the application's error middleware. `app.appAttest.use(_:)` installs it.
public struct AppAttestProblemMiddleware: AsyncMiddleware {
    /// The middleware.
    public init() {}

    /// Passes the request on, and answers a thrown ``AppAttestAbort`` with its problem document.
    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        do { return try await next.respond(to: request) } catch let abort as AppAttestAbort {
            return Response(.problem(abort.problem))
        }
    }
}
#endif  // Vapor
