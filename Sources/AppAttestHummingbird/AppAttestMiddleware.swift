#if Hummingbird
import AppAttest
public import AppAttestStore
import Foundation
import HTTPTypes
public import Hummingbird
import NIOCore

/// A request context that can carry the verified device.
public protocol AppAttestRequestContext: RequestContext {
    var attestedDevice: AttestedDevice? { get set }
}

/// A ready context for applications that need nothing else.
public struct AppAttestBasicRequestContext: AppAttestRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The verified device, once the middleware has accepted the request.
    public var attestedDevice: AttestedDevice?

    public init(source: Source) {
        coreContext = .init(source: source)
    }
}

/// Verifies the App Attest assertion of every request it guards (headers of `AppAttestRequestBinding`, client
/// data bound to method, path, body and a one-time challenge) and passes the verified device on in the context.
/// Failures become JSON problem responses (400 malformed, 401 failed verification, 409 replay, 413, 429, 503).
public struct AppAttestMiddleware<Context: AppAttestRequestContext>: RouterMiddleware {
    /// The framework-neutral operations it runs.
    public let operations: AppAttestHTTPOperations
    /// The largest request body hashed into the client data.
    public let maximumBodySize: Int

    /// - Parameters:
    ///   - service: the service that verifies assertions and keeps counters.
    ///   - maximumBodySize: the largest request body accepted (413 beyond it); the body is hashed into the client data.
    ///   - rateLimiter: limits assertions per key (429 beyond it).
    public init(service: AppAttestService, maximumBodySize: Int = 1024 * 1024, rateLimiter: AppAttestRateLimiter? = nil)
    {
        self.operations = AppAttestHTTPOperations(service: service, rateLimiter: rateLimiter)
        self.maximumBodySize = maximumBodySize
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var request = request
        let body: ByteBuffer
        do { body = try await request.body.collect(upTo: maximumBodySize) } catch {
            return response(.problem(.bodyTooLarge))
        }
        request.body = .init(buffer: body)
        let headers = request.headers
        let result = await operations.authenticate(
            method: request.method.rawValue, pathAndQuery: request.uri.description, body: body.readableBytesView
        ) { name in HTTPField.Name(name).flatMap { headers[values: $0].first } }
        switch result {
        case .failure(let problem):
            context.logger.info("App Attest assertion refused", metadata: ["code": "\(problem.code)"])
            return response(.problem(problem))
        case .success(let device):
            var updated = context
            updated.attestedDevice = device
            return try await next(request, updated)
        }
    }
}

/// A Hummingbird response for a framework-neutral one.
package func response(_ response: AppAttestHTTPResponse) -> Response {
    var headers = HTTPFields()
    headers[.contentType] = response.contentType
    for (name, value) in response.headers {
        if let name = HTTPField.Name(name) { headers[name] = value }
    }
    return Response(
        status: .init(code: response.status), headers: headers,
        body: .init(byteBuffer: ByteBuffer(bytes: response.body)))
}
#endif  // Hummingbird
