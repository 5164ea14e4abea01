#if Vapor
import AppAttest
public import AppAttestHTTP
import AppAttestStore
import AppAttestLifecycle
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
#endif  // Vapor
