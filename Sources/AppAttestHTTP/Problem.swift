#if HTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
public import HTTPTypes

/// A stable problem description for HTTP adapters: status, code and title, never the client's bytes.
public struct AppAttestProblem: Error, Sendable, Hashable {
    /// The HTTP status.
    public var status: HTTPResponse.Status
    /// The stable code clients and metrics read.
    public var code: String
    /// A short, fixed title (never client bytes).
    public var title: String
    /// Seconds after which a rate-limited client may try again (429).
    public var retryAfter: Int?

    /// A problem; `retryAfter` adds a `Retry-After` header (429).
    public init(status: HTTPResponse.Status, code: String, title: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.title = title
        self.retryAfter = retryAfter
    }

    /// 400 `malformed`.
    public static func malformed(_ title: String) -> AppAttestProblem {
        AppAttestProblem(status: .badRequest, code: "malformed", title: title)
    }

    /// 413 `bodyTooLarge`.
    public static let bodyTooLarge = AppAttestProblem(
        status: .contentTooLarge, code: "bodyTooLarge", title: "The request body is too large")

    /// 401 `missingAssertion`: a protected request without the App Attest header fields.
    public static let missingAssertion = AppAttestProblem(
        status: .unauthorized, code: "missingAssertion", title: "App Attest headers are missing")

    /// 401 `staleTimestamp`: a timestamped request outside the freshness window of the server's clock.
    public static let staleTimestamp = AppAttestProblem(
        status: .unauthorized, code: "staleTimestamp", title: "The request's timestamp is outside the window")

    /// The header fields of the problem response: its content type, and `Retry-After` when there is a wait.
    public var headerFields: HTTPFields {
        var fields: HTTPFields = [.contentType: "application/problem+json"]
        if let retryAfter { fields[.retryAfter] = String(retryAfter) }
        return fields
    }

    /// The RFC 9457 document: type, title, status and code; never a client's bytes. Written directly, byte for byte
    /// what JSONEncoder writes for it with sorted keys and unescaped slashes (a refusal costs a tenth as much).
    public var document: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + title.utf8.count)
        out.append(contentsOf: #"{"code":"#.utf8)
        JSONText.quote(code, into: &out)
        out.append(contentsOf: #","status":"#.utf8)
        out.append(contentsOf: String(status.code).utf8)
        out.append(contentsOf: #","title":"#.utf8)
        JSONText.quote(title, into: &out)
        out.append(contentsOf: #","type":"#.utf8)
        JSONText.quote(Self.documentType, into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The `type` of every problem document: where the codes are explained.
    static let documentType = "https://github.com/swift-app-attest/swift-app-attest/blob/main/README.md#errors"

    /// 429 `rateLimited`, with the seconds to wait.
    public static func rateLimited(retryAfter: Int) -> AppAttestProblem {
        AppAttestProblem(
            status: .tooManyRequests, code: "rateLimited", title: "Too many requests", retryAfter: retryAfter)
    }

    /// 400 malformed, 401 failed verification, 409 replay, 503 store unavailable.
    public init(_ error: AppAttestServiceError) {
        switch error.code {
        case .verificationFailed:
            switch error.verification?.code {
            case .malformed?:
                self.init(status: .badRequest, code: "malformed", title: "The App Attest object is malformed")
            case .counterNotIncreasing?:
                self.init(status: .conflict, code: "counterNotIncreasing", title: "The assertion was replayed")
            case let code?:
                self.init(status: .unauthorized, code: code.description, title: "App Attest verification failed")
            case nil:
                self.init(status: .unauthorized, code: "verificationFailed", title: "App Attest verification failed")
            }
        case .challengeUnknown, .counterReplayed, .keyAlreadyRegistered:
            self.init(status: .conflict, code: error.code.name, title: "Replayed or already used")
        case .malformedBinding:
            self.init(status: .badRequest, code: error.code.name, title: "The request cannot be bound")
        case .invalidUserID:
            self.init(status: .badRequest, code: error.code.name, title: "The user identifier is not acceptable")
        case .storeUnavailable:
            // The store did not answer (in time): worth a retry soon, on this instance or another.
            self.init(
                status: .serviceUnavailable, code: error.code.name, title: "App Attest state is unavailable",
                retryAfter: 1)
        case .tooManyChallenges:
            self.init(
                status: .tooManyRequests, code: error.code.name, title: "Too many unused challenges are outstanding")
        default: self.init(status: .unauthorized, code: error.code.name, title: "App Attest verification failed")
        }
    }
}
/// JSON text written without an encoder, for the answers of the hot paths.
package enum JSONText {
    /// A JSON string literal: quotes, backslashes and control characters escaped as JSONEncoder escapes them (UTF-8
    /// otherwise copied as it is, slashes unescaped).
    package static func quote(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case UInt8(ascii: "\n"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case UInt8(ascii: "\r"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case UInt8(ascii: "\t"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: Array("\\u00".utf8))
                out.append(contentsOf: [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
#endif  // HTTP
