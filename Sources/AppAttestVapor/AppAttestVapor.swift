#if Vapor
import AppAttest
public import AppAttestHTTP
public import AppAttestStore
public import AppAttestLifecycle
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
public import Vapor

extension AttestedDevice: Authenticatable {}

/// A refused App Attest request, as Vapor's `AbortError`: the status, the problem's title as reason, its code as
/// identifier, and `Retry-After` when there is a wait. ``AppAttestMiddleware`` throws it when configured to let the
/// application's error middleware render refusals (``AppAttestMiddleware/Refusals/thrown``).
public struct AppAttestAbort: AbortError, Sendable {
    /// The problem, with its stable code.
    public let problem: AppAttestProblem

    /// The error for a problem.
    public init(_ problem: AppAttestProblem) { self.problem = problem }

    /// The problem's status.
    public var status: HTTPResponseStatus { HTTPResponseStatus(statusCode: problem.status.code) }
    /// The problem's fixed title (never a client's bytes).
    public var reason: String { problem.title }
    /// The problem's stable code.
    public var identifier: String { problem.code }
    /// `Retry-After`, when there is a wait.
    public var headers: HTTPHeaders {
        var headers = HTTPHeaders()
        if let retryAfter = problem.retryAfter { headers.replaceOrAdd(name: .retryAfter, value: String(retryAfter)) }
        return headers
    }
}

/// Verifies the App Attest assertion of every request it guards (`AppAttestHTTPHeaders`; client
/// data bound to method, path, body and a one-time challenge), logs the verified device in (`req.auth`,
/// `req.appAttest.device`) and refuses everything else: with an `application/problem+json` response by default
/// (400 malformed, 401 failed verification, 409 replay, 413, 429, 503), or by throwing ``AppAttestAbort`` for the
/// application's own error middleware.
///
/// ```swift
/// app.appAttest.use(service)
/// let protected = app.grouped(app.appAttest.middleware())
/// protected.post("orders") { req in "device \(try req.appAttest.requireDevice().keyID)" }
/// ```
public struct AppAttestMiddleware: AsyncMiddleware {
    /// How refusals reach the client.
    public struct Refusals: Sendable, Hashable {
        let thrown: Bool
        /// The middleware answers with the problem document itself.
        public static let problemResponse = Refusals(thrown: false)
        /// The middleware throws ``AppAttestAbort``, and the application's error middleware renders it.
        public static let thrown = Refusals(thrown: true)
    }

    /// The framework-neutral operations it runs.
    public let operations: AppAttestHTTPOperations
    /// The largest request body hashed into the client data.
    public let maximumBodySize: Int
    /// How refusals reach the client.
    public let refusals: Refusals
    /// How the guarded requests prove they are fresh.
    public let freshness: AppAttestFreshness

    /// - Parameters:
    ///   - rateLimiter: limits assertions per key (429 beyond it).
    ///   - refusals: problem documents answered here (the default), or errors thrown to your error middleware.
    ///   - freshness: a one-time challenge per request (the default), the next one in each response, or a timestamp.
    public init(
        service: AppAttestService, maximumBodySize: Int = AppAttestHTTPLimits.defaultMaximumProtectedBodySize,
        rateLimiter: AppAttestRateLimiter? = nil, refusals: Refusals = .problemResponse,
        freshness: AppAttestFreshness = .challengePerRequest
    ) {
        self.operations = AppAttestHTTPOperations(service: service, rateLimiter: rateLimiter)
        self.maximumBodySize = maximumBodySize
        self.refusals = refusals
        self.freshness = freshness
    }

    /// Collects the body once, verifies, logs the device in and passes the request on; refuses everything else.
    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        let body: ByteBuffer
        do { body = try await request.body.collect(max: maximumBodySize).get() ?? ByteBuffer() } catch {
            return try refuse(.bodyTooLarge)
        }
        // A body Vapor collected before this middleware comes back whatever its size: check it here.
        guard body.readableBytes <= maximumBodySize else { return try refuse(.bodyTooLarge) }
        guard let head = HTTPRequest(request) else { return try refuse(.malformed("The method cannot be bound")) }
        switch await operations.authenticate(head, body: body.readableBytesView, freshness: freshness) {
        case .failure(let problem):
            request.logger.info("App Attest assertion refused", metadata: ["code": "\(problem.code)"])
            return try refuse(problem)
        case .success(let authentication):
            request.auth.login(authentication.device)
            let response = try await next.respond(to: request)
            for field in authentication.responseHeaderFields {
                response.headers.replaceOrAdd(name: field.name.rawName, value: field.value)
            }
            return response
        }
    }

    private func refuse(_ problem: AppAttestProblem) throws -> Response {
        if refusals.thrown { throw AppAttestAbort(problem) }
        return Response(.problem(problem))
    }
}

/// The routes an app needs before its first protected request (JSON of `AppAttestHTTPOperations`):
/// `POST {path}/challenge` and `POST {path}/attestation`. They are open to app clients not authenticated yet, so
/// they are bounded: bodies by `AppAttestHTTPLimits.maximumJSONBodySize`, outstanding challenges by the
/// service's `ChallengeLimits`, and requests by a rate limiter per client address.
///
/// ```swift
/// try app.register(collection: app.appAttest.routes())
/// ```
public struct AppAttestRouteCollection: RouteCollection, Sendable {
    /// The framework-neutral operations the routes run.
    public let operations: AppAttestHTTPOperations
    /// Where the routes are mounted.
    public let path: String
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request) -> String?
    /// Limits requests per client address (429 with `Retry-After` beyond it); nil for none.
    public let rateLimiter: AppAttestRateLimiter?

    /// Routes on `service` under `path`; `userID` names the user a new key is bound to; `rateLimiter` limits each
    /// client address (10 requests a second with bursts of 20 by default).
    public init(
        service: AppAttestService, path: String = "appattest",
        userID: @escaping @Sendable (Request) -> String? = { _ in nil },
        rateLimiter: AppAttestRateLimiter? = AppAttestRateLimiter(ratePerSecond: 10, burst: 20)
    ) {
        self.operations = AppAttestHTTPOperations(service: service)
        self.path = path
        self.userID = userID
        self.rateLimiter = rateLimiter
    }

    /// Mounts `POST {path}/challenge` and `POST {path}/attestation`.
    public func boot(routes: any RoutesBuilder) throws {
        let group = routes.grouped(PathComponent(stringLiteral: path))
        group.on(.POST, "challenge", body: .stream) { request async -> Response in
            await respond(request) { body in
                // Each client address may hold only so many challenges (ChallengeLimits.perIssuer).
                await operations.challenge(
                    body: body, userID: userID(request), issuer: request.remoteAddress?.ipAddress ?? "anonymous")
            }
        }
        group.on(.POST, "attestation", body: .stream) { request async -> Response in
            await respond(request) { body in await operations.attestation(body: body, userID: userID(request)) }
        }
    }

    private func respond(_ request: Request, _ operation: (ByteBufferView) async -> AppAttestHTTPResponse) async
        -> Response
    {
        let caller = request.remoteAddress?.ipAddress ?? "anonymous"
        if let rateLimiter, case .limited(let retryAfter) = rateLimiter.acquire(caller) {
            return Response(.problem(.rateLimited(retryAfter: retryAfter)))
        }
        guard let body = await Self.collect(request) else { return Response(.problem(.bodyTooLarge)) }
        return Response(await operation(body.readableBytesView))
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

// MARK: app.appAttest and req.appAttest

extension Application {
    /// App Attest for this application: the service, its middleware and routes, and the store closed at shutdown.
    public var appAttest: AppAttestApplication { AppAttestApplication(application: self) }
}

/// `app.appAttest`: where the application keeps its ``AppAttestStore/AppAttestService``.
///
/// ```swift
/// app.appAttest.use(service)                       // the store is closed when the application shuts down
/// try app.register(collection: app.appAttest.routes())
/// let protected = app.grouped(app.appAttest.middleware())
/// ```
public struct AppAttestApplication: Sendable {
    /// The application.
    public let application: Application

    struct Key: StorageKey, LockKey {
        typealias Value = AppAttestService
    }

    /// The service `use(_:)` installed; nil before.
    public var serviceIfConfigured: AppAttestService? { application.storage[Key.self] }

    /// The service `use(_:)` installed.
    /// - Precondition: `use(_:)` was called (a configuration error, found at start-up).
    public var service: AppAttestService {
        guard let service = serviceIfConfigured else {
            fatalError("App Attest is not configured: call app.appAttest.use(service) in configure(_:)")
        }
        return service
    }

    /// Installs the service; its store is closed when the application shuts down, and expired challenges are purged
    /// every `purgeInterval` while it runs (nil: never).
    public func use(_ service: AppAttestService, purgeInterval: Duration? = .seconds(60)) {
        application.storage[Key.self] = service
        application.lifecycle.use(StoreCloser(store: service.store))
        if let purgeInterval {
            application.lifecycle.use(AppAttestPurgeLifecycle(service: service, interval: purgeInterval))
        }
    }

    /// The middleware that protects routes, on the installed service.
    public func middleware(
        maximumBodySize: Int = AppAttestHTTPLimits.defaultMaximumProtectedBodySize,
        rateLimiter: AppAttestRateLimiter? = nil, refusals: AppAttestMiddleware.Refusals = .problemResponse,
        freshness: AppAttestFreshness = .challengePerRequest
    ) -> AppAttestMiddleware {
        AppAttestMiddleware(
            service: service, maximumBodySize: maximumBodySize, rateLimiter: rateLimiter, refusals: refusals,
            freshness: freshness)
    }

    /// The challenge and attestation routes, on the installed service.
    public func routes(path: String = "appattest", userID: @escaping @Sendable (Request) -> String? = { _ in nil })
        -> AppAttestRouteCollection
    {
        AppAttestRouteCollection(service: service, path: path, userID: userID)
    }

    /// Closes the store at shutdown.
    struct StoreCloser: LifecycleHandler {
        let store: any AppAttestStore
        func shutdownAsync(_ application: Application) async { await store.close() }
    }
}

extension Request {
    /// App Attest for this request: the verified device, and the application's service.
    public var appAttest: AppAttestRequest { AppAttestRequest(request: self) }
}

/// `req.appAttest`.
public struct AppAttestRequest: Sendable {
    /// The request.
    public let request: Request

    /// The device whose assertion ``AppAttestMiddleware`` verified for this request; nil on unprotected routes.
    public var device: AttestedDevice? { request.auth.get(AttestedDevice.self) }

    /// The verified device; throws 401 when the route is not protected by ``AppAttestMiddleware``.
    public func requireDevice() throws -> AttestedDevice { try request.auth.require(AttestedDevice.self) }

    /// The application's service (`app.appAttest.use(_:)`).
    public var service: AppAttestService { request.application.appAttest.service }
}

extension HTTPRequest {
    /// The swift-http-types head of a Vapor request: method, the target as received, header fields; nil for a
    /// method that is not an HTTP token.
    init?(_ request: Request) {
        guard let method = HTTPRequest.Method(request.method.rawValue) else { return nil }
        var fields = HTTPFields()
        for (name, value) in request.headers {
            if let name = HTTPField.Name(name) { fields.append(HTTPField(name: name, value: value)) }
        }
        self.init(
            method: method, scheme: nil, authority: nil,
            path: request.url.string, headerFields: fields)
    }
}

extension Response {
    /// A Vapor response for a framework-neutral one.
    package convenience init(_ response: AppAttestHTTPResponse) {
        var headers = HTTPHeaders()
        for field in response.headerFields { headers.add(name: field.name.rawName, value: field.value) }
        self.init(
            status: HTTPResponseStatus(statusCode: response.status.code), headers: headers,
            body: .init(buffer: ByteBuffer(bytes: response.body)))
    }
}
#endif  // Vapor
