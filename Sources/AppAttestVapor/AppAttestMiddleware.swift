#if Vapor
public import AppAttest
public import AppAttestHTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
public import Vapor

/// Verifies the App Attest assertion of every request it guards (`AppAttestHTTPHeaders`; client
/// data bound to method, path, body and a one-time challenge), logs the verified device in (`req.auth`,
/// `req.appAttest.device`) and refuses everything else by throwing ``AppAttestAbort``, as Hummingbird's middleware
/// throws its problem: ``AppAttestProblemMiddleware`` (installed by `app.appAttest.use(_:)`) renders it as an
/// `application/problem+json` response (400 malformed, 401 failed verification, 409 replay, 413, 429, 503), or your
/// own error middleware does.
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
        /// The middleware throws ``AppAttestAbort`` (the default), and ``AppAttestProblemMiddleware`` or the
        /// application's error middleware renders it.
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
    /// The App IDs whose apps call the guarded routes (nil: every App ID the service accepts): a request signed by a
    /// key of another App ID is refused (403 `appIdNotAllowed`), and refusals (that one too) are let through
    /// unverified, without an identity, only when every one of them is in report mode.
    public let appIDs: Set<AppID>?

    /// - Parameters:
    ///   - rateLimiter: limits assertions per key (429 beyond it).
    ///   - refusals: errors thrown to the error middleware (the default), or problem documents answered here.
    ///   - freshness: a one-time challenge per request (the default), the next one in each response, or a timestamp.
    ///   - appIDs: the App IDs whose apps call the guarded routes: a key of another App ID is refused, and they
    ///     decide report-only enforcement (`AppAttestService.enforcement(guarding:)`); nil for every App ID the
    ///     service accepts.
    public init(
        service: AppAttestService, maximumBodySize: Int = AppAttestHTTPLimits.defaultMaximumProtectedBodySize,
        rateLimiter: AppAttestRateLimiter? = nil, refusals: Refusals = .thrown,
        freshness: AppAttestFreshness = .challengePerRequest, appIDs: Set<AppID>? = nil
    ) {
        self.operations = AppAttestHTTPOperations(service: service, rateLimiter: rateLimiter)
        self.maximumBodySize = maximumBodySize
        self.refusals = refusals
        self.freshness = freshness
        self.appIDs = appIDs
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
        let admission: AppAttestAdmission
        do {
            admission = try await operations.admit(
                head, body: body.readableBytesView, freshness: freshness, guarding: appIDs, logger: request.logger)
        } catch {
            request.logger.info("App Attest assertion refused", metadata: ["code": "\(error.code)"])
            return try refuse(error)
        }
        let authentication: AppAttestAuthentication
        switch admission {
        case .verified(let verified): authentication = verified
        case .reported(let report):
            // Report-only enforcement: the route runs with nobody logged in, and can read why
            // (`req.appAttest.report`, or AppAttestReport.current).
            request.storage[AppAttestReportKey.self] = report
            return try await AppAttestReport.$current.withValue(report) { try await next.respond(to: request) }
        }
        request.auth.login(authentication.device)
        let response = try await next.respond(to: request)
        for field in authentication.responseHeaderFields {
            response.headers.replaceOrAdd(name: field.name.rawName, value: field.value)
        }
        return response
    }

    private func refuse(_ problem: AppAttestProblem) throws -> Response {
        if refusals.thrown { throw AppAttestAbort(problem) }
        return Response(.problem(problem))
    }
}
/// Where the middleware keeps a request's report (report-only enforcement).
struct AppAttestReportKey: StorageKey {
    typealias Value = AppAttestReport
}
#endif  // Vapor
