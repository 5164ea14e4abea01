public import AppAttest
public import AppAttestStore
import Foundation
import HTTPTypes
public import Hummingbird
import NIOCore

/// The verified device behind a request.
public struct AttestedDevice: Sendable, Hashable {
    public let keyID: KeyID
    public let userID: String?
    /// The counter of this request's assertion.
    public let counter: UInt32
    /// The risk metric of the key's latest receipt, if known.
    public let riskMetric: Int?
}

/// A request context that can carry the verified device.
public protocol AppAttestRequestContext: RequestContext {
    var attestedDevice: AttestedDevice? { get set }
}

/// A ready context for applications that need nothing else.
public struct AppAttestBasicRequestContext: AppAttestRequestContext {
    public var coreContext: CoreRequestContextStorage
    public var attestedDevice: AttestedDevice?

    public init(source: Source) {
        coreContext = .init(source: source)
    }
}

/// Verifies the App Attest assertion of every request it guards (headers of ``AppAttestRequestBinding``, client
/// data bound to method, path, body and a one-time challenge) and passes the verified device on in the context.
/// Failures become JSON problem responses (400 malformed, 401 failed verification, 409 replay, 413, 503).
public struct AppAttestMiddleware<Context: AppAttestRequestContext>: RouterMiddleware {
    public let service: AppAttestService
    /// The largest request body hashed into the client data.
    public let maximumBodySize: Int

    public init(service: AppAttestService, maximumBodySize: Int = 1024 * 1024) {
        self.service = service
        self.maximumBodySize = maximumBodySize
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        guard let keyText = request.headers[values: HTTPField.Name(AppAttestRequestBinding.keyIDHeader)!].first,
            let assertionText = request.headers[values: HTTPField.Name(AppAttestRequestBinding.assertionHeader)!].first,
            let challengeText = request.headers[values: HTTPField.Name(AppAttestRequestBinding.challengeHeader)!].first
        else { return problem(.init(status: 401, code: "missingAssertion", title: "App Attest headers are missing")) }
        guard let keyID = try? KeyID(base64Encoded: keyText),
            let assertion = AppAttestRequestBinding.decodeBase64(assertionText, limit: 16 * 1024),
            let challenge = AppAttestRequestBinding.decodeBase64URL(challengeText, limit: 1024)
        else { return problem(.init(status: 400, code: "malformed", title: "App Attest headers are malformed")) }
        var request = request
        let body: ByteBuffer
        do { body = try await request.body.collect(upTo: maximumBodySize) } catch {
            return problem(.init(status: 413, code: "bodyTooLarge", title: "The request body is too large"))
        }
        request.body = .init(buffer: body)
        let clientData = AppAttestRequestBinding.clientData(
            method: request.method.rawValue, pathAndQuery: request.uri.description, body: body.readableBytesView,
            challenge: challenge)
        switch await authenticate(assertion, clientData: clientData, keyID: keyID, challenge: challenge) {
        case .failure(let error):
            context.logger.info("App Attest assertion refused", metadata: ["code": "\(error.code)"])
            return problem(AppAttestProblem(error))
        case .success(let authenticated):
            var updated = context
            updated.attestedDevice = AttestedDevice(
                keyID: keyID, userID: authenticated.key.userID, counter: authenticated.assertion.counter,
                riskMetric: authenticated.key.riskMetric)
            return try await next(request, updated)
        }
    }

    private func authenticate(
        _ assertion: [UInt8], clientData: [UInt8], keyID: KeyID, challenge: [UInt8]
    ) async -> Result<AuthenticatedAssertion, AppAttestServiceError> {
        do {
            return .success(
                try await service.authenticateAssertion(
                    assertion, clientData: clientData, keyID: keyID, challenge: challenge))
        } catch {
            return .failure(error)
        }
    }
}

/// A JSON problem response (RFC 9457 shape) with a stable code.
func problem(_ problem: AppAttestProblem) -> Response {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    let body = (try? encoder.encode(ProblemBody(problem))) ?? Data("{}".utf8)
    var headers = HTTPFields()
    headers[.contentType] = "application/problem+json"
    return Response(
        status: .init(code: problem.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
}

struct ProblemBody: Encodable {
    var type: String
    var title: String
    var status: Int
    var code: String

    init(_ problem: AppAttestProblem) {
        type = "https://github.com/swift-app-attest/errors#\(problem.code)"
        title = problem.title
        status = problem.status
        code = problem.code
    }
}
