#if Vapor
import AppAttest
public import AppAttestStore
import Foundation
import NIOCore
import NIOHTTP1
public import Vapor

extension AttestedDevice: Authenticatable {}

extension Request {
    /// The device whose assertion ``AppAttestMiddleware`` verified for this request.
    public var attestedDevice: AttestedDevice? { auth.get(AttestedDevice.self) }
}

/// Verifies the App Attest assertion of every request it guards (headers of ``AppAttestRequestBinding``, client
/// data bound to method, path, body and a one-time challenge), logs the verified device in (`req.auth`, also
/// `req.attestedDevice`) and refuses everything else with a JSON problem (400 malformed, 401 failed verification,
/// 409 replay, 413, 429, 503).
///
/// ```swift
/// let protected = app.grouped(AppAttestMiddleware(service: service))
/// protected.post("orders") { req in "device \(try req.auth.require(AttestedDevice.self).keyID)" }
/// ```
public struct AppAttestMiddleware: AsyncMiddleware {
    /// The framework-neutral operations it runs.
    public let operations: AppAttestHTTPOperations
    /// The largest request body hashed into the client data.
    public let maximumBodySize: Int

    /// - Parameter rateLimiter: limits assertions per key (429 beyond it).
    public init(service: AppAttestService, maximumBodySize: Int = 1024 * 1024, rateLimiter: AppAttestRateLimiter? = nil)
    {
        self.operations = AppAttestHTTPOperations(service: service, rateLimiter: rateLimiter)
        self.maximumBodySize = maximumBodySize
    }

    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        let body: ByteBuffer
        do { body = try await request.body.collect(max: maximumBodySize).get() ?? ByteBuffer() } catch {
            return response(.problem(.bodyTooLarge))
        }
        // A body Vapor collected before this middleware comes back whatever its size: check it here.
        guard body.readableBytes <= maximumBodySize else { return response(.problem(.bodyTooLarge)) }
        let headers = request.headers
        let result = await operations.authenticate(
            method: request.method.rawValue, pathAndQuery: request.url.string, body: body.readableBytesView
        ) { name in headers.first(name: name) }
        switch result {
        case .failure(let problem):
            request.logger.info("App Attest assertion refused", metadata: ["code": "\(problem.code)"])
            return response(.problem(problem))
        case .success(let device):
            request.auth.login(device)
            return try await next.respond(to: request)
        }
    }
}

/// The routes an app needs before its first protected request (JSON of ``AppAttestHTTPOperations``):
/// `POST {path}/challenge` and `POST {path}/attestation`.
///
/// ```swift
/// try app.register(collection: AppAttestRouteCollection(service: service))
/// ```
public struct AppAttestRouteCollection: RouteCollection, Sendable {
    /// The framework-neutral operations the routes run.
    public let operations: AppAttestHTTPOperations
    /// Where the routes are mounted.
    public let path: String
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request) -> String?

    /// Routes on `service` under `path`; `userID` names the user a new key is bound to.
    public init(
        service: AppAttestService, path: String = "appattest",
        userID: @escaping @Sendable (Request) -> String? = { _ in nil }
    ) {
        self.operations = AppAttestHTTPOperations(service: service)
        self.path = path
        self.userID = userID
    }

    public func boot(routes: any RoutesBuilder) throws {
        let group = routes.grouped(PathComponent(stringLiteral: path))
        group.on(.POST, "challenge", body: .stream) { request async -> Response in
            guard let body = await Self.collect(request) else { return response(.problem(.bodyTooLarge)) }
            return response(await operations.challenge(body: body.readableBytesView, userID: userID(request)))
        }
        group.on(.POST, "attestation", body: .stream) { request async -> Response in
            guard let body = await Self.collect(request) else { return response(.problem(.bodyTooLarge)) }
            return response(await operations.attestation(body: body.readableBytesView, userID: userID(request)))
        }
    }

    /// The body, at most ``AppAttestHTTPOperations/maximumJSONBodySize`` bytes (nil beyond), so that an oversized
    /// body gets the same problem response as everything else rather than Vapor's own error.
    static func collect(_ request: Request) async -> ByteBuffer? {
        let limit = AppAttestHTTPOperations.maximumJSONBodySize
        let body: ByteBuffer
        do { body = try await request.body.collect(max: limit).get() ?? ByteBuffer() } catch { return nil }
        return body.readableBytes <= limit ? body : nil
    }
}

/// A Vapor response for a framework-neutral one.
package func response(_ response: AppAttestHTTPResponse) -> Response {
    var headers = HTTPHeaders()
    headers.replaceOrAdd(name: .contentType, value: response.contentType)
    for (name, value) in response.headers { headers.replaceOrAdd(name: name, value: value) }
    return Response(
        status: HTTPResponseStatus(statusCode: response.status), headers: headers,
        body: .init(buffer: ByteBuffer(bytes: response.body)))
}
#endif  // Vapor
