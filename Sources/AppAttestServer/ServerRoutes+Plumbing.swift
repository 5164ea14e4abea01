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

extension AppAttestServer {
    // MARK: Plumbing

    /// Runs an operation on the raw body, records its outcome and duration.
    func raw(
        _ request: Request, _ context: ServerRequestContext, operation: String,
        _ body: (ByteBufferView) async -> AppAttestHTTPResponse
    ) async throws -> Response {
        let start = ContinuousClock.now
        let bytes = try await request.body.collect(upTo: configuration.maximumBodyBytes)
        return finish(await body(bytes.readableBytesView), context, operation: operation, start: start)
    }

    /// Decodes a JSON body, runs the operation, records its outcome and duration.
    func json<Body: Decodable>(
        _ request: Request, _ context: ServerRequestContext, operation: String,
        _ body: (Body) async -> AppAttestHTTPResponse
    ) async throws -> Response {
        let start = ContinuousClock.now
        let result: AppAttestHTTPResponse
        let bytes = try await request.body.collect(upTo: configuration.maximumBodyBytes)
        if let decoded = AppAttestHTTPOperations.decode(Body.self, bytes.readableBytesView) {
            result = await body(decoded)
        } else {
            result = .problem(.malformed("The body is not the JSON this operation expects"))
        }
        return finish(result, context, operation: operation, start: start)
    }

    func keyOperation(
        _ context: ServerRequestContext, operation: String, needs permission: ServerConfiguration.Permission,
        _ body: (KeyID) async -> AppAttestHTTPResponse
    ) async -> Response {
        let start = ContinuousClock.now
        let result: AppAttestHTTPResponse
        if let refusal = Self.refusal(context, permission) {
            result = refusal
        } else if let text = context.parameters.get("keyId"), text.utf8.count <= 64,
            let keyID = try? KeyID(base64Encoded: text.removingPercentEncoding ?? text)
        {
            if let refusal = await outOfScope(keyID, context.scope) {
                result = .problem(refusal)
            } else {
                result = await body(keyID)
            }
        } else {
            result = .problem(.malformed("keyId in the path is 32 bytes of Base64URL or Base64 (percent-encoded)"))
        }
        return finish(result, context, operation: operation, start: start)
    }

    private func finish(
        _ result: AppAttestHTTPResponse, _ context: ServerRequestContext, operation: String,
        start: ContinuousClock.Instant
    ) -> Response {
        let duration = ContinuousClock.now - start
        let code = result.status.code < 300 ? nil : result.problemCode ?? "status\(result.status.code)"
        metrics.record(operation: operation, code: code, duration: duration)
        context.logger.debug(
            "\(operation)",
            metadata: [
                "caller": "\(context.caller ?? "-")", "status": "\(result.status)", "code": "\(code ?? "ok")",
                "ms": "\(Double(duration.components.attoseconds) / 1e15 + Double(duration.components.seconds) * 1000)",
            ])
        return Response(result)
    }
}
#endif  // Service
