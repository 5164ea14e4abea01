import AppAttest
import Foundation

/// The canonical client data of an HTTP request protected by App Attest: what the app hashes and passes to
/// `generateAssertion`, so that an assertion is bound to one method, path, body and one-time challenge and cannot be
/// replayed against another request (“Verifying assertions and counters”).
///
/// ```
/// clientData = "app-attest-request-v1" ‖ 0x00 ‖ METHOD ‖ 0x00 ‖ path-and-query ‖ 0x00 ‖ SHA-256(body) (32 bytes)
///              ‖ challenge (the raw bytes the server issued)
/// ```
///
/// On iOS, with `pathAndQuery` exactly as the server will see it (`URLComponents.percentEncodedPath`, `?` and
/// `percentEncodedQuery`: `URL.path` is percent-decoded and drops a trailing slash; the complete app-side code is in
/// the AppAttestHummingbird documentation, "Protecting routes"):
/// ```swift
/// var clientData = Data("app-attest-request-v1".utf8) + [0]
/// clientData += Data(request.httpMethod!.uppercased().utf8) + [0] + Data(pathAndQuery.utf8) + [0]
/// clientData += Data(SHA256.hash(data: body)) + challenge
/// let assertion = try await DCAppAttestService.shared.generateAssertion(
///     keyId, clientDataHash: Data(SHA256.hash(data: clientData)))
/// request.setValue(keyId, forHTTPHeaderField: "App-Attest-Key-Id")
/// request.setValue(assertion.base64EncodedString(), forHTTPHeaderField: "App-Attest-Assertion")
/// request.setValue(challenge.base64URLEncoded, forHTTPHeaderField: "App-Attest-Challenge")
/// ```
public enum AppAttestRequestBinding {
    /// The first field of the client data: names the binding and its version.
    public static let domain = "app-attest-request-v1"
    /// Header with the keyId, standard Base64 (as `generateKey` returns it).
    public static let keyIDHeader = "App-Attest-Key-Id"
    /// Header with the CBOR assertion, standard Base64.
    public static let assertionHeader = "App-Attest-Assertion"
    /// Header with the challenge, Base64URL without padding.
    public static let challengeHeader = "App-Attest-Challenge"

    /// The client data for a request.
    public static func clientData(
        method: String, pathAndQuery: String, body: some Collection<UInt8>, challenge: [UInt8]
    ) -> [UInt8] {
        clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: AppAttestSHA256.hash(body), challenge: challenge)
    }

    /// The client data for a request whose body the caller has already hashed (SHA-256, 32 bytes).
    public static func clientData(method: String, pathAndQuery: String, bodySHA256: [UInt8], challenge: [UInt8])
        -> [UInt8]
    {
        var data = Array(domain.utf8) + [0]
        data += Array(method.uppercased().utf8) + [0]
        data += Array(pathAndQuery.utf8) + [0]
        data += bodySHA256
        data += challenge
        return data
    }

    /// Base64URL without padding.
    package static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
            of: "/", with: "_"
        )
        .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes Base64URL (padding optional); nil for anything else or more than `limit` bytes.
    package static func decodeBase64URL(_ text: String, limit: Int = 4096) -> [UInt8]? {
        guard text.utf8.count <= limit * 2,
            text.utf8.allSatisfy({
                $0 == 0x2D || $0 == 0x5F || (0x30...0x39).contains($0)
                    || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x3D
            })
        else { return nil }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard.append("=") }
        return Data(base64Encoded: standard).map(Array.init)
    }

    /// Decodes standard Base64; nil for anything else or more than `limit` bytes.
    package static func decodeBase64(_ text: String, limit: Int = 64 * 1024) -> [UInt8]? {
        guard text.utf8.count <= limit * 2 else { return nil }
        return Data(base64Encoded: text).map(Array.init)
    }
}

/// A stable problem description for HTTP adapters: status, code and title, never the client's bytes.
public struct AppAttestProblem: Error, Sendable, Hashable, Codable {
    /// The HTTP status.
    public var status: Int
    /// The stable code clients and metrics read.
    public var code: String
    /// A short, fixed title (never client bytes).
    public var title: String
    /// Seconds after which a rate-limited client may try again (429).
    public var retryAfter: Int?

    /// A problem; `retryAfter` adds a `Retry-After` header (429).
    public init(status: Int, code: String, title: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.title = title
        self.retryAfter = retryAfter
    }

    /// 400 `malformed`.
    public static func malformed(_ title: String) -> AppAttestProblem {
        AppAttestProblem(status: 400, code: "malformed", title: title)
    }

    /// 413 `bodyTooLarge`.
    public static let bodyTooLarge = AppAttestProblem(
        status: 413, code: "bodyTooLarge", title: "The request body is too large")

    /// 429 `rateLimited`, with the seconds to wait.
    public static func rateLimited(retryAfter: Int) -> AppAttestProblem {
        AppAttestProblem(status: 429, code: "rateLimited", title: "Too many requests", retryAfter: retryAfter)
    }

    /// 400 malformed, 401 failed verification, 409 replay, 503 store unavailable.
    public init(_ error: AppAttestServiceError) {
        switch error.code {
        case .verificationFailed:
            switch error.verification?.code {
            case .malformed?: self.init(status: 400, code: "malformed", title: "The App Attest object is malformed")
            case .counterNotIncreasing?:
                self.init(status: 409, code: "counterNotIncreasing", title: "The assertion was replayed")
            case let code?: self.init(status: 401, code: code.description, title: "App Attest verification failed")
            case nil: self.init(status: 401, code: "verificationFailed", title: "App Attest verification failed")
            }
        case .challengeUnknown, .counterReplayed, .keyAlreadyRegistered:
            self.init(status: 409, code: error.code.name, title: "Replayed or already used")
        case .storeUnavailable: self.init(status: 503, code: error.code.name, title: "App Attest state is unavailable")
        case .tooManyChallenges:
            self.init(status: 429, code: error.code.name, title: "Too many unused challenges are outstanding")
        default: self.init(status: 401, code: error.code.name, title: "App Attest verification failed")
        }
    }
}
