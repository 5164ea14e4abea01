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
            return await refusal(refused, after: request)
        }
        if let limiter = server.rateLimiter, case .limited(let retryAfter) = limiter.acquire(caller.name) {
            server.metrics.refused("rateLimited")
            return await refusal(Response(.problem(.rateLimited(retryAfter: retryAfter))), after: request)
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

    /// `response`, once the request's body has been read and dropped (up to the body limit, within the request's
    /// deadline). An HTTP/1.1 client still sending its body when a refusal arrives may fail the request on its side
    /// instead of reading the answer (AsyncHTTPClient reports `bodyLengthMismatch`). On a connection kept open the
    /// server reads and drops the body after the answer anyway; a request that closes its connection (or one closed by
    /// a graceful shutdown) is now held until its body has come, which the request's deadline bounds. A client that
    /// asked to be told before it sends (`Expect: 100-continue`) sends nothing until then: answered at once.
    private func refusal(_ response: Response, after request: Request) async -> Response {
        if request.headers[.expect]?.lowercased() == "100-continue" { return response }
        var remaining = server.configuration.maximumBodyBytes
        do {
            for try await part in request.body {
                remaining -= part.readableBytes
                if remaining < 0 { break }
            }
        } catch {
            // The connection failed: the answer will not be read either.
        }
        return response
    }
}
#endif  // Service
