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

    /// Why the request was not verified, when report-only enforcement let it through ``AppAttestMiddleware`` (nil:
    /// verified, or not protected).
    public var report: AppAttestReport? { request.storage[AppAttestReportKey.self] }

    /// The application's service (`app.appAttest.use(_:)`).
    public var service: AppAttestService { request.application.appAttest.service }
}
#endif  // Vapor
