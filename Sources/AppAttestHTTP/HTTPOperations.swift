#if HTTP
public import AppAttest
import AppAttestWire
public import AppAttestStore
public import AppAttestLifecycle
public import Foundation
public import HTTPTypes
internal import AppAttestWire

/// The header fields of a protected request and its answer (“Protecting routes”).
public enum AppAttestHTTPHeaders {
    /// The keyId, standard Base64 (as `generateKey` returns it).
    public static let keyID = HTTPField.Name(RequestBindingHeaders.keyID)!
    /// The CBOR assertion, standard Base64.
    public static let assertion = HTTPField.Name(RequestBindingHeaders.assertion)!
    /// The one-time challenge the client data binds, Base64URL without padding.
    public static let challenge = HTTPField.Name(RequestBindingHeaders.challenge)!
    /// In a response, with ``AppAttestFreshness/nextChallengeInResponse``: a challenge for the app's next request,
    /// Base64URL without padding.
    public static let nextChallenge = HTTPField.Name(RequestBindingHeaders.nextChallenge)!
    /// With ``AppAttestFreshness/timestamp(window:)``: the Unix time in milliseconds the client data binds, decimal.
    public static let timestamp = HTTPField.Name(RequestBindingHeaders.timestamp)!
}

/// How a protected request proves that it is fresh, chosen per route group (“Protecting routes”, Freshness).
///
/// - ``challengePerRequest``, the default: each request binds a one-time challenge the app fetched for it. A
///   captured request is useless (its challenge is consumed) and nothing can be prepared ahead of time.
/// - ``nextChallengeInResponse``: the same, but each accepted response carries the challenge for the next request
///   (``AppAttestHTTPHeaders/nextChallenge``), so steady traffic needs no extra round trip; the app fetches one only
///   to start, or after a lost response. Same guarantees: a challenge is issued for one key and used once.
/// - ``timestamp(window:)``: no challenge; the client data binds the request and the device's clock
///   (``AppAttestHTTPHeaders/timestamp``), accepted within the window of the server's clock. The counter still makes
///   every assertion single-use, but a compromised app can prepare requests ahead of time for the length of the
///   window, and a device with a wrong clock is refused.
public struct AppAttestFreshness: Sendable, Hashable {
    enum Mode: Hashable { case challenge, nextChallenge, timestamp }
    let mode: Mode
    /// For timestamps: how far the signed time may be from the server's, either way.
    public let window: Duration

    /// A one-time challenge per request (the default).
    public static let challengePerRequest = AppAttestFreshness(mode: .challenge, window: .zero)
    /// A one-time challenge per request, the next one returned with each accepted response.
    public static let nextChallengeInResponse = AppAttestFreshness(mode: .nextChallenge, window: .zero)
    /// A signed timestamp within `window` of the server's clock (1 second to 10 minutes; 60 seconds by default).
    public static func timestamp(window: Duration = .seconds(60)) -> AppAttestFreshness {
        AppAttestFreshness(mode: .timestamp, window: min(max(window, .seconds(1)), .seconds(600)))
    }
}

/// A request that passed verification: its device, and the header fields to add to its response.
public struct AppAttestAuthentication: Sendable, Hashable {
    /// The verified device.
    public let device: AttestedDevice
    /// Header fields for the response (``AppAttestHTTPHeaders/nextChallenge``, with that freshness).
    public let responseHeaderFields: HTTPFields
}

/// Every limit of the HTTP layer, defined once: the middleware, the routes and `appattest serve` read them here.
public enum AppAttestHTTPLimits {
    /// The largest JSON body of the challenge, attestation and verification operations: a Base64 attestation
    /// object, or the largest client data and assertion in Base64, with room for the rest.
    public static let maximumJSONBodySize =
        max(AttestationObject.maximumSize, AppAttestClientData.maximumOpaqueLength + AssertionObject.maximumSize) * 4
        / 3 + 4096
    /// The default largest body of a protected request (it is hashed into the client data).
    public static let defaultMaximumProtectedBodySize = 1024 * 1024
    /// The longest user identifier bound to a key or challenge, in bytes.
    public static let maximumUserIDLength = AppAttestService.maximumUserIDLength
    /// The largest challenge in a request, in bytes (the service issues 32).
    public static let maximumChallengeLength = AppAttestClientData.maximumChallengeLength
    /// The largest opaque client data, in bytes.
    public static let maximumClientDataLength = AppAttestClientData.maximumOpaqueLength
}

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

/// What the challenge, attestation and protected-request operations do over HTTP, shared by the Hummingbird and
/// Vapor adapters and `appattest serve`, so that every front end answers the same JSON and the same problems.
///
/// - challenge: `{"purpose": "attestation"|"assertion", "keyId"?: base64}` → `{"challenge": base64url,
///   "expiresAt": ISO 8601}`
/// - attestation: `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   `{"keyId", "appId", "environment"}`
/// - protected request: the headers of the canonical request binding (`AppAttestClientData`).
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

    /// The body of the challenge operation. `userId` is read only by `appattest serve`, whose callers are backends
    /// trusted to name the user; the adapters take the user from the app's authentication and ignore it.
    package struct ChallengeRequest: Decodable, Sendable {
        package var purpose: String
        package var keyId: String?
        package var userId: String?
    }

    struct ChallengeResponse: Encodable {
        var challenge: String
        var expiresAt: Date
    }

    /// The body of the attestation operation; `userId` as in ``ChallengeRequest``.
    package struct AttestationRequest: Decodable, Sendable {
        package var keyId: String
        package var attestationObject: String
        package var challenge: String
        package var userId: String?
    }

    struct AttestationResponse: Encodable {
        var keyId: String
        var appId: String
        var environment: String
    }

    /// Issues a challenge (body `{"purpose", "keyId"?}`); `userID` comes from your authentication, never the body.
    /// - Parameters:
    ///   - body: the request's JSON.
    ///   - userID: the user to reserve it for, from your authentication.
    ///   - issuer: who asks (a client's address, a caller's name), to bound what one issuer may hold
    ///     (`AppAttestService.ChallengeLimits.perIssuer`); nil for no such bound.
    public func challenge(body: some Collection<UInt8>, userID: String?, issuer: String? = nil) async
        -> AppAttestHTTPResponse
    {
        guard let request = Self.decode(ChallengeRequest.self, body) else {
            return .problem(.malformed("Expected {\"purpose\": \"attestation\"|\"assertion\"}"))
        }
        return await challenge(purpose: request.purpose, keyID: request.keyId, userID: userID, issuer: issuer)
    }

    /// Issues a challenge for a purpose, optionally reserved for a key (Base64) and a user; `issuer` as in
    /// ``challenge(body:userID:issuer:)``.
    public func challenge(purpose: String, keyID keyText: String?, userID: String?, issuer: String? = nil) async
        -> AppAttestHTTPResponse
    {
        guard [AppAttestService.Purpose.attestation, AppAttestService.Purpose.assertion].contains(purpose),
            userID.map({ $0.utf8.count <= AppAttestHTTPLimits.maximumUserIDLength }) ?? true
        else { return .problem(.malformed("purpose must be attestation or assertion; userId at most 256 bytes")) }
        var keyID: KeyID?
        if let keyText {
            guard let parsed = try? KeyID(base64Encoded: keyText) else {
                return .problem(.malformed("keyId is not Base64 of 32 bytes"))
            }
            keyID = parsed
        }
        do {
            let issued = try await service.issueChallenge(
                purpose: purpose, keyID: keyID, userID: userID, issuer: issuer)
            return .json(
                ChallengeResponse(
                    challenge: RequestBindingLayout.base64URL(issued.challenge), expiresAt: issued.expiresAt))
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
                    keyId: record.keyID.base64EncodedString, appId: record.key.appID.rawValue,
                    environment: record.key.environment.rawValue))
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
            let object = RequestBindingLayout.decodeBase64(attestationObject, limit: AttestationObject.maximumSize),
            let challenge = RequestBindingLayout.decodeBase64URL(challengeText, limit: 1024),
            userID.map({ $0.utf8.count <= AppAttestHTTPLimits.maximumUserIDLength }) ?? true
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

    /// Verifies the assertion a protected request carries (``AppAttestHTTPHeaders``), bound to its method, path and
    /// query, body and freshness (`AppAttestClientData`), and advances the key's counter in one store
    /// transaction.
    /// - Parameters:
    ///   - request: the request head as received (its path is the percent-encoded target, trailing slash kept).
    ///   - body: the request body, collected once.
    ///   - freshness: how the request proves it is fresh (a one-time challenge by default).
    ///   - now: the server's clock, for timestamps.
    public func authenticate(
        _ request: HTTPRequest, body: some Collection<UInt8>, freshness: AppAttestFreshness = .challengePerRequest,
        now: Date = Date()
    ) async -> Result<AppAttestAuthentication, AppAttestProblem> {
        let fields = request.headerFields
        guard let keyText = fields[AppAttestHTTPHeaders.keyID],
            let assertionText = fields[AppAttestHTTPHeaders.assertion]
        else { return .failure(.missingAssertion) }
        guard let keyID = try? KeyID(base64Encoded: keyText),
            let assertion = RequestBindingLayout.decodeBase64(assertionText, limit: AssertionObject.maximumSize)
        else { return .failure(.malformed("App Attest headers are malformed")) }
        // The key's token is taken before any work, atomically, so that concurrent requests cannot pass beyond the
        // bucket, and given back when the assertion does not verify, so that someone who merely knows a keyId cannot
        // keep that key rate-limited.
        let bucket = keyID.base64EncodedString
        if let rateLimiter, case .limited(let retryAfter) = rateLimiter.acquire(bucket) {
            return .failure(.rateLimited(retryAfter: retryAfter))
        }
        var charged = false
        defer { if !charged { rateLimiter?.release(bucket) } }
        let method = request.method.rawValue, path = request.path ?? "", bodyHash = AppAttestSHA256.hash(body)
        do {
            let clientData: AppAttestClientData
            switch freshness.mode {
            case .challenge, .nextChallenge:
                guard let text = fields[AppAttestHTTPHeaders.challenge] else { return .failure(.missingAssertion) }
                guard
                    let challenge = RequestBindingLayout.decodeBase64URL(
                        text, limit: AppAttestHTTPLimits.maximumChallengeLength)
                else { return .failure(.malformed("App Attest headers are malformed")) }
                clientData = try Self.bind { () throws(AppAttestError) in
                    try AppAttestClientData.request(
                        method: method, pathAndQuery: path, bodySHA256: bodyHash, challenge: challenge)
                }
            case .timestamp:
                guard let text = fields[AppAttestHTTPHeaders.timestamp] else { return .failure(.missingAssertion) }
                guard text.utf8.count <= 16, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                    let milliseconds = Int64(text)
                else { return .failure(.malformed("App-Attest-Timestamp is not milliseconds")) }
                // The timestamp is bound by the signature: checked here, before any work, it cannot be altered.
                let skew = abs(Double(milliseconds) / 1000 - now.timeIntervalSince1970)
                let window = Double(freshness.window.components.seconds)
                guard skew <= window else { return .failure(.staleTimestamp) }
                clientData = try Self.bind { () throws(AppAttestError) in
                    try AppAttestClientData.request(
                        method: method, pathAndQuery: path, bodySHA256: bodyHash, timestampMilliseconds: milliseconds)
                }
            }
            let authenticated = try await service.authenticateAssertion(
                assertion, clientData: clientData, keyID: keyID,
                issuingNextChallenge: freshness.mode == .nextChallenge)
            charged = true
            var response = HTTPFields()
            if let next = authenticated.nextChallenge {
                response[AppAttestHTTPHeaders.nextChallenge] = RequestBindingLayout.base64URL(next.challenge)
            }
            return .success(
                AppAttestAuthentication(
                    device: AttestedDevice(
                        keyID: keyID, userID: authenticated.record.userID, counter: authenticated.assertion.counter,
                        riskMetric: authenticated.record.riskMetric),
                    responseHeaderFields: response))
        } catch {
            return .failure(AppAttestProblem(error))
        }
    }

    /// The JSON of the verification operation (`POST /v1/assertions/verify` of `appattest serve`): the keyId and
    /// assertion, and either the opaque client data (with the challenge it begins with, if any) or the parts of a
    /// request to bind canonically.
    public struct AssertionVerification: Decodable, Sendable {
        /// The keyId, Base64.
        public var keyId: String
        /// The assertion, Base64.
        public var assertion: String
        /// Opaque client data, Base64.
        public var clientData: String?
        /// With `clientData`, the challenge it begins with, Base64URL.
        public var challenge: String?
        /// The request to bind canonically.
        public var request: BoundRequest?
        /// Also issue the key's next challenge, stored with the counter (``AppAttestFreshness/nextChallengeInResponse``).
        public var issueNextChallenge: Bool?

        /// A request's parts, to build its canonical client data from: with a challenge, or with a timestamp.
        public struct BoundRequest: Decodable, Sendable {
            /// The method.
            public var method: String
            /// The percent-encoded path and query.
            public var pathAndQuery: String
            /// SHA-256 of the body, Base64.
            public var bodySha256: String
            /// The challenge, Base64URL.
            public var challenge: String?
            /// Instead of a challenge: the signed Unix time in milliseconds.
            public var timestamp: Int64?
        }
    }

    /// Verifies an assertion described by the JSON of ``AssertionVerification``; `authorize` sees the keyId before
    /// any verification and may refuse it (a caller's scope). A timestamped request must be within `timestampWindow`
    /// of `now`.
    public func verifyAssertion(
        body: some Collection<UInt8>, authorize: (KeyID) async -> AppAttestProblem? = { _ in nil },
        timestampWindow: Duration = .seconds(60), now: Date = Date()
    ) async -> Result<AuthenticatedAssertion, AppAttestProblem> {
        guard let request = Self.decode(AssertionVerification.self, body) else {
            return .failure(.malformed("Expected keyId, assertion, and clientData or request"))
        }
        guard let keyID = try? KeyID(base64Encoded: request.keyId),
            let assertion = RequestBindingLayout.decodeBase64(request.assertion, limit: AssertionObject.maximumSize)
        else { return .failure(.malformed("Expected keyId and assertion")) }
        if let refusal = await authorize(keyID) { return .failure(refusal) }
        let clientData: AppAttestClientData
        do {
            switch (request.clientData, request.request) {
            case (let text?, nil):
                guard
                    let data = RequestBindingLayout.decodeBase64(
                        text, limit: AppAttestHTTPLimits.maximumClientDataLength)
                else { return .failure(.malformed("clientData is not Base64 (at most 64 KiB)")) }
                var challenge: [UInt8]?
                if let text = request.challenge {
                    guard
                        let bytes = RequestBindingLayout.decodeBase64URL(
                            text, limit: AppAttestHTTPLimits.maximumChallengeLength)
                    else { return .failure(.malformed("challenge is not Base64URL")) }
                    challenge = bytes
                }
                clientData = try Self.bind { () throws(AppAttestError) in
                    try AppAttestClientData.opaque(data, challenge: challenge)
                }
            case (nil, let bound?):
                guard request.challenge == nil,
                    let hash = RequestBindingLayout.decodeBase64(bound.bodySha256, limit: 64)
                else { return .failure(.malformed("request needs method, pathAndQuery and bodySha256")) }
                switch (bound.challenge, bound.timestamp) {
                case (let text?, nil):
                    guard
                        let bytes = RequestBindingLayout.decodeBase64URL(
                            text, limit: AppAttestHTTPLimits.maximumChallengeLength)
                    else { return .failure(.malformed("request.challenge is not Base64URL")) }
                    clientData = try Self.bind { () throws(AppAttestError) in
                        try AppAttestClientData.request(
                            method: bound.method, pathAndQuery: bound.pathAndQuery, bodySHA256: hash, challenge: bytes)
                    }
                case (nil, let milliseconds?):
                    let skew = abs(Double(milliseconds) / 1000 - now.timeIntervalSince1970)
                    guard skew <= Double(timestampWindow.components.seconds) else { return .failure(.staleTimestamp) }
                    clientData = try Self.bind { () throws(AppAttestError) in
                        try AppAttestClientData.request(
                            method: bound.method, pathAndQuery: bound.pathAndQuery, bodySHA256: hash,
                            timestampMilliseconds: milliseconds)
                    }
                default:
                    return .failure(.malformed("request needs exactly one of challenge and timestamp"))
                }
            default:
                return .failure(.malformed("Give exactly one of clientData and request"))
            }
            return .success(
                try await service.authenticateAssertion(
                    assertion, clientData: clientData, keyID: keyID,
                    issuingNextChallenge: request.issueNextChallenge == true))
        } catch {
            return .failure(AppAttestProblem(error))
        }
    }

    /// Client data built by `make`, its refusal as the service's (`malformedBinding`).
    private static func bind(_ make: () throws(AppAttestError) -> AppAttestClientData) throws(AppAttestServiceError)
        -> AppAttestClientData
    {
        do { return try make() } catch { throw AppAttestServiceError(binding: error) }
    }

    /// Decodes a JSON body of at most ``AppAttestHTTPLimits/maximumJSONBodySize`` bytes; nil for anything else.
    public static func decode<T: Decodable>(_ type: T.Type, _ body: some Collection<UInt8>) -> T? {
        guard body.count <= AppAttestHTTPLimits.maximumJSONBodySize else { return nil }
        return try? decoder.decode(type, from: Data(body))
    }

    /// One decoder for every request body of every front end (its options never change; decoding with it is
    /// thread-safe).
    private static let decoder = JSONDecoder()
}
#endif  // HTTP
