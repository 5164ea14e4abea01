#if HTTP
import Foundation
public import HTTPTypes

/// A response computed without any web framework: adapters copy status, header fields and body.
public struct AppAttestHTTPResponse: Sendable, Hashable {
    /// The status.
    public var status: HTTPResponse.Status
    /// The header fields, `Content-Type` included.
    public var headerFields: HTTPFields
    /// The body.
    public var body: [UInt8]
    /// The problem's code, for problem responses (metrics and logs read it here rather than from the body).
    public var problemCode: String?

    /// A response.
    public init(status: HTTPResponse.Status, headerFields: HTTPFields = [:], body: [UInt8]) {
        self.status = status
        self.headerFields = headerFields
        self.body = body
    }

    /// A JSON body.
    public static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> AppAttestHTTPResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        // Encoding our own response types cannot fail; a failure would be a programming error, reported as 500.
        guard let data = try? encoder.encode(value) else {
            return .problem(.init(status: .internalServerError, code: "internal", title: "Internal error"))
        }
        return AppAttestHTTPResponse(
            status: status, headerFields: [.contentType: "application/json"], body: Array(data))
    }

    /// An RFC 9457 problem (`application/problem+json`) with a stable `code`; never echoes client bytes.
    public static func problem(_ problem: AppAttestProblem) -> AppAttestHTTPResponse {
        var response = AppAttestHTTPResponse(
            status: problem.status, headerFields: problem.headerFields, body: problem.document)
        response.problemCode = problem.code
        return response
    }
}
#endif  // HTTP
