#if HTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
public import HTTPTypes

/// A stable problem description for HTTP adapters: status, code, title and what the client should do, never the
/// client's bytes.
public struct AppAttestProblem: Error, Sendable, Hashable {
    /// What a client should do about a refusal: the machine-readable part of every problem document, so that an app
    /// repairs what can be repaired and leaves the rest alone (“Protecting your app's requests” lists it per code).
    ///
    /// A struct with static members rather than an enum, so that an action can be added without breaking a `switch`
    /// in code that handles the existing ones; a client treats an action it does not know as ``none``.
    public struct Action: Sendable, Hashable, CustomStringConvertible {
        /// The action's name in the problem document.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The same request may succeed later: wait for `Retry-After` seconds (the problem always carries it),
        /// then send it again.
        public static let retry = Action("retry")
        /// The proof of freshness was not accepted (a challenge unknown, expired or used, a counter already seen, a
        /// timestamp outside the window): sign the request again with a new one. A duplicate delivery of a request
        /// that was accepted gets the same answer, so a client resends only a request it may run twice.
        public static let refetchChallenge = Action("refetchChallenge")
        /// The server does not know the key: discard it, attest a new one, then sign the request again (within the
        /// app's attestation budget).
        public static let reattest = Action("reattest")
        /// Sending again cannot help: a malformed request, a wrong environment or App ID, a revoked key, a key bound
        /// to another user, a refused attestation, a caller not allowed.
        public static let none = Action("none")
    }

    /// The HTTP status.
    public var status: HTTPResponse.Status
    /// The stable code clients and metrics read.
    public var code: String
    /// A short, fixed title (never client bytes).
    public var title: String
    /// What the client should do about it.
    public var action: Action
    /// Seconds after which the client may try again (429 and 503, with ``Action/retry``).
    public var retryAfter: Int?

    /// A problem; `retryAfter` adds a `Retry-After` header. The action is ``Action/retry`` when there is a wait and
    /// ``Action/none`` otherwise, unless given.
    public init(
        status: HTTPResponse.Status, code: String, title: String, action: Action? = nil, retryAfter: Int? = nil
    ) {
        self.status = status
        self.code = code
        self.title = title
        self.action = action ?? (retryAfter == nil ? .none : .retry)
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

    /// 403 `appIdNotAllowed`: a request signed by a key of an App ID that the routes do not serve (the service
    /// accepts it, for other routes).
    public static let appIdNotAllowed = AppAttestProblem(
        status: .forbidden, code: "appIdNotAllowed", title: "The key's App ID is not one these routes serve")

    /// 401 `staleTimestamp`: a timestamped request outside the freshness window of the server's clock (sign again
    /// with the time of the answer's `Date`).
    public static let staleTimestamp = AppAttestProblem(
        status: .unauthorized, code: "staleTimestamp", title: "The request's timestamp is outside the window",
        action: .refetchChallenge)

    /// The header fields of the problem response: its content type, and `Retry-After` when there is a wait.
    public var headerFields: HTTPFields {
        var fields: HTTPFields = [.contentType: "application/problem+json"]
        if let retryAfter { fields[.retryAfter] = String(retryAfter) }
        return fields
    }

    /// The RFC 9457 document: type, title, status, code and action; never a client's bytes. Written directly, byte
    /// for byte what JSONEncoder writes for it with sorted keys and unescaped slashes (a refusal costs a tenth as
    /// much).
    public var document: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(180 + title.utf8.count)
        out.append(contentsOf: #"{"action":"#.utf8)
        JSONText.quote(action.rawValue, into: &out)
        out.append(contentsOf: #","code":"#.utf8)
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

    /// 400 malformed, 401 failed verification, 409 replay, 429 too many challenges, 503 store unavailable; with the
    /// action each calls for.
    public init(_ error: AppAttestServiceError) {
        switch error.code {
        case .verificationFailed:
            switch error.verification?.code {
            case .malformed?:
                self.init(status: .badRequest, code: "malformed", title: "The App Attest object is malformed")
            case .counterNotIncreasing?:
                self.init(
                    status: .conflict, code: "counterNotIncreasing", title: "The assertion was replayed",
                    action: .refetchChallenge)
            case let code?:
                self.init(status: .unauthorized, code: code.description, title: "App Attest verification failed")
            case nil:
                self.init(status: .unauthorized, code: "verificationFailed", title: "App Attest verification failed")
            }
        case .challengeUnknown, .counterReplayed:
            self.init(
                status: .conflict, code: error.code.name, title: "Replayed or already used", action: .refetchChallenge)
        case .keyAlreadyRegistered:
            self.init(status: .conflict, code: error.code.name, title: "Replayed or already used")
        case .challengeExpired, .challengeMismatch:
            self.init(
                status: .unauthorized, code: error.code.name, title: "App Attest verification failed",
                action: .refetchChallenge)
        case .unknownKey:
            self.init(
                status: .unauthorized, code: error.code.name, title: "App Attest verification failed",
                action: .reattest)
        case .keySuperseded:
            // A genuine device whose key a newer key of its user replaced (the per-user limit): it registers again.
            self.init(
                status: .unauthorized, code: error.code.name, title: "The key was replaced by a newer key of its user",
                action: .reattest)
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
            // Unused challenges expire or are used: worth a retry once this client's requests in flight are answered.
            self.init(
                status: .tooManyRequests, code: error.code.name, title: "Too many unused challenges are outstanding",
                retryAfter: 1)
        case .attestationBudgetExhausted:
            // An attestation challenge: asked for again once the budget has refilled, before the device asks Apple.
            self.init(
                status: .tooManyRequests, code: error.code.name, title: "The App ID's attestation budget is spent",
                retryAfter: Int(max(1, (error.retryAfter ?? 1).rounded(.up)).clamped(to: 1...3600)))
        case .appIDNotServed: self = .appIdNotAllowed
        default: self.init(status: .unauthorized, code: error.code.name, title: "App Attest verification failed")
        }
    }
}
extension Double {
    fileprivate func clamped(to range: ClosedRange<Double>) -> Double {
        Swift.min(Swift.max(self, range.lowerBound), range.upperBound)
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
