#if Hummingbird
public import AppAttest
public import AppAttestHTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
import HTTPTypes
public import Hummingbird
public import HummingbirdAuth
public import NIOCore

/// A request context for applications that need nothing else: hummingbird-auth's `AuthRequestContext`, whose
/// identity is the verified device (`context.identity`, `try context.requireIdentity()`), with the client's address
/// (Hummingbird's `RemoteAddressRequestContext`), which ``AppAttestRoutes`` counts the open routes' requests against.
///
/// A context of your own works the same once it conforms to `AuthRequestContext<AttestedDevice>` and, for the routes'
/// limits per client, to `RemoteAddressRequestContext` (or give ``AppAttestRoutes`` a `caller`).
public struct AppAttestRequestContext: AuthRequestContext, RemoteAddressRequestContext {
    /// Hummingbird's storage for the request.
    public var coreContext: CoreRequestContextStorage
    /// The verified device, once ``AppAttestMiddleware`` has verified the request.
    public var identity: AttestedDevice?
    /// The address of the connected client (a proxy's, behind one), nil on a Unix-domain socket.
    public let remoteAddress: SocketAddress?

    /// The context of a request that arrived on `source`'s channel.
    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
        self.remoteAddress = source.channel.remoteAddress
    }
}

/// Verifies the App Attest assertion of every request it guards (`AppAttestHTTPHeaders`; client data bound to
/// method, path, body and a one-time challenge) and makes the verified device the request's identity, as
/// hummingbird-auth's authenticators do. A refused request throws an `AppAttestProblem`, a Hummingbird
/// `HTTPResponseError`: rendered as `application/problem+json` (400 malformed, 401 failed verification, 409
/// replay, 413, 429, 503) unless the application's own error middleware catches it first.
///
/// ```swift
/// let router = Router(context: AppAttestRequestContext.self)
/// router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
/// router.group("api").add(middleware: AppAttestMiddleware(service: service))
///     .post("orders") { _, context in "device \(try context.requireIdentity().keyID)" }
/// ```
public struct AppAttestMiddleware<Context: AuthRequestContext<AttestedDevice>>: AuthenticatorMiddleware {
    /// The verified device.
    public typealias Identity = AttestedDevice

    /// The framework-neutral operations it runs.
    public let operations: AppAttestHTTPOperations
    /// The largest request body hashed into the client data.
    public let maximumBodySize: Int
    /// How the guarded requests prove they are fresh.
    public let freshness: AppAttestFreshness
    /// The App IDs whose apps call the guarded routes (nil: every App ID the service accepts): a request signed by a
    /// key of another App ID is refused (403 `appIdNotAllowed`), and refusals (that one too) are let through
    /// unverified, without an identity, only when every one of them is in report mode.
    public let appIDs: Set<AppID>?

    /// - Parameters:
    ///   - service: the service that verifies assertions and keeps counters.
    ///   - maximumBodySize: the largest request body accepted (413 beyond it); the body is hashed into the client data.
    ///   - rateLimiter: limits assertions per key (429 beyond it).
    ///   - freshness: a one-time challenge per request (the default), the next one in each response, or a timestamp.
    ///   - appIDs: the App IDs whose apps call the guarded routes: a key of another App ID is refused, and they
    ///     decide report-only enforcement (`AppAttestService.enforcement(guarding:)`); nil for every App ID the
    ///     service accepts.
    public init(
        service: AppAttestService, maximumBodySize: Int = AppAttestHTTPLimits.defaultMaximumProtectedBodySize,
        rateLimiter: AppAttestRateLimiter? = nil, freshness: AppAttestFreshness = .challengePerRequest,
        appIDs: Set<AppID>? = nil
    ) {
        self.operations = AppAttestHTTPOperations(service: service, rateLimiter: rateLimiter)
        self.maximumBodySize = maximumBodySize
        self.freshness = freshness
        self.appIDs = appIDs
    }

    /// Collects the body once (it is hashed into the client data and then handed on), verifies, and passes the
    /// request on with the device as its identity.
    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var request = request
        let body: ByteBuffer
        do { body = try await request.body.collect(upTo: maximumBodySize) } catch {
            throw AppAttestProblem.bodyTooLarge
        }
        request.body = .init(buffer: body)
        var context = context
        switch try await admit(request, body: body, context: context) {
        case .verified(let authentication):
            context.identity = authentication.device
            var response = try await next(request, context)
            for field in authentication.responseHeaderFields { response.headers[field.name] = field.value }
            return response
        case .reported(let report):
            // Report-only enforcement: the route runs without an identity, and can read why (AppAttestReport.current).
            return try await AppAttestReport.$current.withValue(report) { try await next(request, context) }
        }
    }

    /// Verifies a request whose body is already collected; throws the refusal (nil: a refusal that report-only
    /// enforcement lets through).
    public func authenticate(request: Request, context: Context) async throws -> AttestedDevice? {
        let request = request
        let body: ByteBuffer
        do { body = try await request.body.collect(upTo: maximumBodySize) } catch {
            throw AppAttestProblem.bodyTooLarge
        }
        guard case .verified(let authentication) = try await admit(request, body: body, context: context) else {
            return nil
        }
        return authentication.device
    }

    private func admit(_ request: Request, body: ByteBuffer, context: Context) async throws -> AppAttestAdmission {
        do {
            return try await operations.admit(
                request.head, body: body.readableBytesView, freshness: freshness, guarding: appIDs,
                logger: context.logger)
        } catch {
            context.logger.info("App Attest assertion refused", metadata: ["code": "\(error.code)"])
            throw error
        }
    }
}

extension AppAttestProblem: HTTPResponseError {
    /// The problem as an `application/problem+json` response.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        Response(
            status: status, headers: headerFields, body: .init(byteBuffer: ByteBuffer(bytes: document)))
    }
}

extension Response {
    /// A Hummingbird response for a framework-neutral one.
    package init(_ response: AppAttestHTTPResponse) {
        self.init(
            status: response.status, headers: response.headerFields,
            body: .init(byteBuffer: ByteBuffer(bytes: response.body)))
    }
}
#endif  // Hummingbird
