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

    /// The longest method accepted in a binding, in bytes.
    public static let maximumMethodLength = 20
    /// The longest path and query accepted in a binding, in bytes.
    public static let maximumPathAndQueryLength = 8192

    /// True when `method` is an HTTP method token (RFC 9110 `tchar`s) of at most ``maximumMethodLength`` bytes.
    public static func isValidMethod(_ method: String) -> Bool {
        let bytes = method.utf8
        guard !bytes.isEmpty, bytes.count <= maximumMethodLength else { return false }
        return bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// True when `pathAndQuery` is an origin-form request target as it travels: it starts with `/`, holds only
    /// visible ASCII (no space, NUL or other control byte: anything else is percent-encoded) and has at most
    /// ``maximumPathAndQueryLength`` bytes.
    public static func isValidPathAndQuery(_ pathAndQuery: String) -> Bool {
        let bytes = pathAndQuery.utf8
        guard bytes.first == 0x2F, bytes.count <= maximumPathAndQueryLength else { return false }
        return bytes.allSatisfy { (0x21...0x7E).contains($0) }
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

/// The client data an assertion signs, in a layout that places the challenge, if any, where the service can check
/// it without searching (“Verifying assertions and counters”).
///
/// - ``request(method:pathAndQuery:bodySHA256:challenge:)``: the canonical binding of ``AppAttestRequestBinding``; the
///   challenge is its last bytes.
/// - ``opaque(_:challenge:)``: the app's own bytes; a bound challenge must be their first bytes (`challenge ‖ payload`).
///
/// The service compares the challenge's bytes at that place, in time proportional to the challenge, and consumes it
/// once. A layout with the challenge somewhere inside arbitrary bytes is not accepted: finding it would cost time
/// proportional to the product of the two lengths, which a caller holding one valid assertion could spend again and
/// again.
public struct AppAttestClientData: Sendable, Hashable {
    /// The bytes the app hashed into the `clientDataHash` of `generateAssertion`.
    public let bytes: [UInt8]
    /// The challenge the client data binds, when it binds one.
    public let challenge: [UInt8]?
    /// Where ``challenge`` sits in ``bytes``.
    let challengeOffset: Int

    /// The largest challenge a binding may carry, in bytes; the service issues 32.
    public static let maximumChallengeLength = 64
    /// The largest opaque client data accepted, in bytes.
    public static let maximumOpaqueLength = 64 * 1024

    private init(bytes: [UInt8], challenge: [UInt8]?, challengeOffset: Int) {
        self.bytes = bytes
        self.challenge = challenge
        self.challengeOffset = challengeOffset
    }

    /// The canonical binding of an HTTP request (``AppAttestRequestBinding``), with its one-time challenge.
    /// - Throws: ``AppAttestServiceError/Code/malformedBinding`` when the method is not a token, the path and query
    ///   is not a visible-ASCII origin-form target, the body hash is not 32 bytes or the challenge is empty or longer
    ///   than ``maximumChallengeLength``.
    public static func request(method: String, pathAndQuery: String, bodySHA256: [UInt8], challenge: [UInt8])
        throws(AppAttestServiceError) -> AppAttestClientData
    {
        guard AppAttestRequestBinding.isValidMethod(method) else {
            throw AppAttestServiceError(.malformedBinding, "the method is not an HTTP token of at most 20 bytes")
        }
        guard AppAttestRequestBinding.isValidPathAndQuery(pathAndQuery) else {
            throw AppAttestServiceError(
                .malformedBinding, "the path and query is not a visible-ASCII target of at most 8192 bytes")
        }
        guard bodySHA256.count == 32 else {
            throw AppAttestServiceError(.malformedBinding, "the body hash has \(bodySHA256.count) bytes, not 32")
        }
        try checkChallenge(challenge)
        let bytes = AppAttestRequestBinding.clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256, challenge: challenge)
        return AppAttestClientData(bytes: bytes, challenge: challenge, challengeOffset: bytes.count - challenge.count)
    }

    /// The app's own client data; a bound `challenge` must be its first bytes.
    /// - Throws: ``AppAttestServiceError/Code/malformedBinding`` when the data is longer than
    ///   ``maximumOpaqueLength`` or the challenge is empty or longer than ``maximumChallengeLength``.
    public static func opaque(_ bytes: [UInt8], challenge: [UInt8]? = nil) throws(AppAttestServiceError)
        -> AppAttestClientData
    {
        guard bytes.count <= maximumOpaqueLength else {
            throw AppAttestServiceError(.malformedBinding, "client data of \(bytes.count) bytes exceeds 65536")
        }
        if let challenge { try checkChallenge(challenge) }
        return AppAttestClientData(bytes: bytes, challenge: challenge, challengeOffset: 0)
    }

    private static func checkChallenge(_ challenge: [UInt8]) throws(AppAttestServiceError) {
        guard !challenge.isEmpty, challenge.count <= maximumChallengeLength else {
            throw AppAttestServiceError(
                .malformedBinding, "a challenge of \(challenge.count) bytes (1 to \(maximumChallengeLength))")
        }
    }

    /// True when the bound challenge's bytes are at their place; constant time in the challenge's length.
    var challengeIsInPlace: Bool {
        guard let challenge else { return true }
        guard challengeOffset >= 0, challengeOffset + challenge.count <= bytes.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<challenge.count { difference |= bytes[challengeOffset + index] ^ challenge[index] }
        return difference == 0
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
        case .malformedBinding: self.init(status: 400, code: error.code.name, title: "The request cannot be bound")
        case .storeUnavailable: self.init(status: 503, code: error.code.name, title: "App Attest state is unavailable")
        case .tooManyChallenges:
            self.init(status: 429, code: error.code.name, title: "Too many unused challenges are outstanding")
        default: self.init(status: 401, code: error.code.name, title: "App Attest verification failed")
        }
    }
}
