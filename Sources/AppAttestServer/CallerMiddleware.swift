#if Service
import AppAttest
import AppAttestWire
import AppAttestHummingbird
import AppAttestStore
import AppAttestLifecycle
import AppAttestHTTP
import AppleDeviceAPI
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Authenticates the caller (bearer token), applies its rate limit and the body size limit.
struct CallerMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext
    let server: AppAttestServer

    func handle(
        _ request: Request, context: ServerRequestContext,
        next: (Request, ServerRequestContext) async throws -> Response
    ) async throws -> Response {
        guard let caller = server.tokens.caller(authorization: request.headers[.authorization]) else {
            server.metrics.refused("unauthorized")
            var refused = Response(
                .problem(.init(status: .unauthorized, code: "unauthorized", title: "A valid bearer token is required")))
            refused.headers[.wwwAuthenticate] = "Bearer"
            return refused
        }
        if let limiter = server.rateLimiter, case .limited(let retryAfter) = limiter.acquire(caller.name) {
            server.metrics.refused("rateLimited")
            return Response(.problem(.rateLimited(retryAfter: retryAfter)))
        }
        var request = request
        let limit = server.configuration.maximumBodyBytes
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            server.metrics.refused("bodyTooLarge")
            return Response(.problem(.bodyTooLarge))
        }
        do { request.body = .init(buffer: try await request.body.collect(upTo: limit)) } catch {
            server.metrics.refused("bodyTooLarge")
            return Response(.problem(.bodyTooLarge))
        }
        var context = context
        context.scope = caller
        // Metadata costs on every request (the stream handler re-renders it): only when info logs are written.
        if context.logger.logLevel <= .info { context.logger[metadataKey: "caller"] = "\(caller.name)" }
        return try await next(request, context)
    }
}
#endif  // Service
