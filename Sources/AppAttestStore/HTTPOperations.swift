public import AppAttest
import Foundation

/// The verified device behind a request, as adapters put it into the request context.
public struct AttestedDevice: Sendable, Hashable, Codable {
    /// The key that signed the request.
    public let keyID: KeyID
    /// The user the key is bound to, if any.
    public let userID: String?
    /// The counter of this request's assertion.
    public let counter: UInt32
    /// The risk metric of the key's latest receipt, if known.
    public let riskMetric: Int?

    /// A verified device.
    public init(keyID: KeyID, userID: String?, counter: UInt32, riskMetric: Int?) {
        self.keyID = keyID
        self.userID = userID
        self.counter = counter
        self.riskMetric = riskMetric
    }
}

/// A response computed without any web framework: adapters copy status, content type and body.
public struct AppAttestHTTPResponse: Sendable, Hashable {
    /// The HTTP status.
    public var status: Int
    /// The `Content-Type`.
    public var contentType: String
    /// The body.
    public var body: [UInt8]
    /// Extra headers (e.g. `Retry-After` on 429).
    public var headers: [String: String]
    /// The problem's code, for problem responses (metrics and logs read it here rather than from the body).
    public var problemCode: String?

    /// A response.
    public init(status: Int, contentType: String = "application/json", body: [UInt8], headers: [String: String] = [:]) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    /// A JSON body.
    public static func json(_ value: some Encodable, status: Int = 200) -> AppAttestHTTPResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        // Encoding our own response types cannot fail; a failure would be a programming error, reported as 500.
        guard let data = try? encoder.encode(value) else {
            return .problem(.init(status: 500, code: "internal", title: "Internal error"))
        }
        return AppAttestHTTPResponse(status: status, body: Array(data))
    }

    /// An RFC 9457 problem (`application/problem+json`) with a stable `code`; never echoes client bytes.
    public static func problem(_ problem: AppAttestProblem) -> AppAttestHTTPResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = (try? encoder.encode(ProblemDocument(problem))).map(Array.init) ?? Array("{}".utf8)
        var headers: [String: String] = [:]
        if let retryAfter = problem.retryAfter { headers["Retry-After"] = String(retryAfter) }
        var response = AppAttestHTTPResponse(
            status: problem.status, contentType: "application/problem+json", body: body, headers: headers)
        response.problemCode = problem.code
        return response
    }
}

/// The JSON shape of a problem response.
struct ProblemDocument: Encodable {
    var type: String
    var title: String
    var status: Int
    var code: String

    init(_ problem: AppAttestProblem) {
        type = "https://github.com/swift-app-attest/swift-app-attest/blob/main/README.md#errors"
        title = problem.title
        status = problem.status
        code = problem.code
    }
}

/// What the challenge, attestation and protected-request operations do over HTTP, shared by the Hummingbird and
/// Vapor adapters and `appattest serve`, so that every front end answers the same JSON and the same problems.
///
/// - challenge: `{"purpose": "attestation"|"assertion", "keyId"?: base64}` → `{"challenge": base64url,
///   "expiresAt": ISO 8601}`
/// - attestation: `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   `{"keyId", "appId", "environment"}`
/// - protected request: the headers of ``AppAttestRequestBinding``.
public struct AppAttestHTTPOperations: Sendable {
    /// The service the operations run on.
    public let service: AppAttestService
    /// Limits assertions per key (429 with `Retry-After` beyond it), charged by verified assertions only; nil for
    /// none.
    public let rateLimiter: AppAttestRateLimiter?

    /// Operations on `service`, with an optional per-key rate limiter.
    public init(service: AppAttestService, rateLimiter: AppAttestRateLimiter? = nil) {
        self.service = service
        self.rateLimiter = rateLimiter
    }

    /// The largest JSON body the challenge and attestation operations read (a Base64 attestation object fits).
    public static let maximumJSONBodySize = AttestationObject.maximumSize * 4 / 3 + 4096

    struct ChallengeRequest: Decodable {
        var purpose: String
        var keyId: String?
    }

    struct ChallengeResponse: Encodable {
        var challenge: String
        var expiresAt: Date
    }

    struct AttestationRequest: Decodable {
        var keyId: String
        var attestationObject: String
        var challenge: String
    }

    struct AttestationResponse: Encodable {
        var keyId: String
        var appId: String
        var environment: String
    }

    /// Issues a challenge (body `{"purpose", "keyId"?}`); `userID` comes from your authentication, never the body.
    public func challenge(body: some Collection<UInt8>, userID: String?) async -> AppAttestHTTPResponse {
        guard let request = Self.decode(ChallengeRequest.self, body) else {
            return .problem(.malformed("Expected {\"purpose\": \"attestation\"|\"assertion\"}"))
        }
        return await challenge(purpose: request.purpose, keyID: request.keyId, userID: userID)
    }

    /// Issues a challenge for a purpose, optionally reserved for a key (Base64) and a user.
    public func challenge(purpose: String, keyID keyText: String?, userID: String?) async -> AppAttestHTTPResponse {
        guard [AppAttestService.Purpose.attestation, AppAttestService.Purpose.assertion].contains(purpose),
            userID.map({ $0.utf8.count <= 256 }) ?? true
        else { return .problem(.malformed("purpose must be attestation or assertion; userId at most 256 bytes")) }
        var keyID: KeyID?
        if let keyText {
            guard let parsed = try? KeyID(base64Encoded: keyText) else {
                return .problem(.malformed("keyId is not Base64 of 32 bytes"))
            }
            keyID = parsed
        }
        do {
            let issued = try await service.issueChallenge(purpose: purpose, keyID: keyID, userID: userID)
            return .json(
                ChallengeResponse(
                    challenge: AppAttestRequestBinding.base64URL(issued.challenge), expiresAt: issued.expiresAt))
        } catch {
            return .problem(AppAttestProblem(error))
        }
    }

    /// Registers an attestation (body `{"keyId", "attestationObject", "challenge"}`).
    public func attestation(body: some Collection<UInt8>, userID: String?) async -> AppAttestHTTPResponse {
        guard let request = Self.decode(AttestationRequest.self, body) else {
            return .problem(.malformed("Expected keyId, attestationObject and challenge"))
        }
        switch await registerAttestation(
            keyID: request.keyId, attestationObject: request.attestationObject, challenge: request.challenge,
            userID: userID)
        {
        case .success(let record):
            return .json(
                AttestationResponse(
                    keyId: record.keyID.base64EncodedString, appId: record.appID.rawValue,
                    environment: record.environment.rawValue))
        case .failure(let problem): return .problem(problem)
        }
    }

    /// Registers an attestation given as text (keyId Base64, object Base64, challenge Base64URL).
    public func registerAttestation(
        keyID keyText: String, attestationObject: String, challenge challengeText: String, userID: String?
    )
        async -> Result<KeyRecord, AppAttestProblem>
    {
        guard let keyID = try? KeyID(base64Encoded: keyText),
            let object = AppAttestRequestBinding.decodeBase64(attestationObject, limit: AttestationObject.maximumSize),
            let challenge = AppAttestRequestBinding.decodeBase64URL(challengeText, limit: 1024),
            userID.map({ $0.utf8.count <= 256 }) ?? true
        else {
            return .failure(.malformed("Expected keyId, attestationObject and challenge"))
        }
        do {
            return .success(
                try await service.registerAttestation(object, keyID: keyID, challenge: challenge, userID: userID))
        } catch {
            return .failure(AppAttestProblem(error))
        }
    }

    /// Verifies the assertion a protected request carries (headers of ``AppAttestRequestBinding``), bound to its
    /// method, path and query, body and the one-time challenge, and advances the key's counter.
    /// - Parameters:
    ///   - method: the request's method, as received.
    ///   - pathAndQuery: the request target, as received (percent-encoded, trailing slash kept).
    ///   - body: the request body, collected once.
    ///   - header: the first value of a request header, by name.
    public func authenticate(
        method: String, pathAndQuery: String, body: some Collection<UInt8>, header: (String) -> String?
    ) async -> Result<AttestedDevice, AppAttestProblem> {
        guard let keyText = header(AppAttestRequestBinding.keyIDHeader),
            let assertionText = header(AppAttestRequestBinding.assertionHeader),
            let challengeText = header(AppAttestRequestBinding.challengeHeader)
        else { return .failure(.init(status: 401, code: "missingAssertion", title: "App Attest headers are missing")) }
        guard let keyID = try? KeyID(base64Encoded: keyText),
            let assertion = AppAttestRequestBinding.decodeBase64(assertionText, limit: AssertionObject.maximumSize),
            let challenge = AppAttestRequestBinding.decodeBase64URL(challengeText, limit: 1024)
        else { return .failure(.malformed("App Attest headers are malformed")) }
        // The key's bucket is charged only by assertions that verify, so that someone who merely knows a keyId
        // cannot keep that key rate-limited; an empty bucket still refuses before any work.
        if let rateLimiter, case .limited(let retryAfter) = rateLimiter.check(keyID.base64EncodedString) {
            return .failure(.rateLimited(retryAfter: retryAfter))
        }
        do {
            let clientData = try AppAttestClientData.request(
                method: method, pathAndQuery: pathAndQuery, bodySHA256: AppAttestSHA256.hash(body), challenge: challenge
            )
            let authenticated = try await service.authenticateAssertion(assertion, clientData: clientData, keyID: keyID)
            _ = rateLimiter?.acquire(keyID.base64EncodedString)
            return .success(
                AttestedDevice(
                    keyID: keyID, userID: authenticated.key.userID, counter: authenticated.assertion.counter,
                    riskMetric: authenticated.key.riskMetric))
        } catch {
            return .failure(AppAttestProblem(error))
        }
    }

    /// Decodes a JSON body of at most ``maximumJSONBodySize`` bytes; nil for anything else.
    public static func decode<T: Decodable>(_ type: T.Type, _ body: some Collection<UInt8>) -> T? {
        guard body.count <= maximumJSONBodySize else { return nil }
        return try? JSONDecoder().decode(type, from: Data(body))
    }
}
