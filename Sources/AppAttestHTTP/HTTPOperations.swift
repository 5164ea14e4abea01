#if HTTP
public import AppAttest
import AppAttestWire
public import AppAttestStore
public import AppAttestLifecycle
public import Foundation
public import HTTPTypes
public import Logging
internal import AppAttestWire

/// What the challenge, attestation and protected-request operations do over HTTP, shared by the Hummingbird and
/// Vapor adapters and `appattest serve`, so that every front end answers the same JSON and the same problems.
///
/// - challenge: `{"purpose": "attestation"|"assertion", "keyId"?: base64}` → `{"challenge": base64url,
///   "expiresAt": ISO 8601}`
/// - attestation: `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   the key's document (`keyId`, `appId`, `environment`, `counter`, `createdAt`, `receiptUpdatedAt`, and `userId`,
///   `riskMetric` when set), as `appattest serve` answers
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
        /// serve only: the App ID whose attestation budget pays for an attestation challenge.
        package var appId: String?
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
    /// ``challenge(body:userID:issuer:)``; `appID`, for an attestation challenge, the App ID whose attestation budget
    /// pays for it (`AppAttestService.issueChallenge(purpose:keyID:userID:issuer:appID:)`).
    public func challenge(
        purpose: String, keyID keyText: String?, userID: String?, issuer: String? = nil, appID: AppID? = nil
    ) async -> AppAttestHTTPResponse {
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
                purpose: purpose, keyID: keyID, userID: userID, issuer: issuer, appID: appID)
            return .json(
                ChallengeResponse(
                    challenge: RequestBindingLayout.base64URL(issued.challenge), expiresAt: issued.expiresAt))
        } catch {
            return .problem(AppAttestProblem(error))
        }
    }

    /// Registers an attestation (body `{"keyId", "attestationObject", "challenge"}`); the same attestation posted again
    /// (its answer lost) gets the same answer (`AppAttestService.registerAttestation(_:keyID:challenge:userID:)`).
    public func attestation(body: some Collection<UInt8>, userID: String?) async -> AppAttestHTTPResponse {
        guard let request = Self.decode(AttestationRequest.self, body) else {
            return .problem(.malformed("Expected keyId, attestationObject and challenge"))
        }
        do {
            let record = try await registerAttestation(
                keyID: request.keyId, attestationObject: request.attestationObject, challenge: request.challenge,
                userID: userID)
            return .json(AppAttestKeyDocument(record))
        } catch {
            return .problem(error)
        }
    }

    /// Registers an attestation given as text (keyId Base64, object Base64, challenge Base64URL).
    /// - Throws: the refusal as a problem.
    public func registerAttestation(
        keyID keyText: String, attestationObject: String, challenge challengeText: String, userID: String?
    ) async throws(AppAttestProblem) -> KeyRecord {
        guard let keyID = try? KeyID(base64Encoded: keyText),
            let object = RequestBindingLayout.decodeBase64(attestationObject, limit: AttestationObject.maximumSize),
            let challenge = RequestBindingLayout.decodeBase64URL(challengeText, limit: 1024),
            userID.map({ $0.utf8.count <= AppAttestHTTPLimits.maximumUserIDLength }) ?? true
        else {
            throw .malformed("Expected keyId, attestationObject and challenge")
        }
        do {
            return try await service.registerAttestation(object, keyID: keyID, challenge: challenge, userID: userID)
        } catch { throw AppAttestProblem(error) }
    }

    /// Verifies an assertion, from either door (``AppAttestAssertionInput``): the key's rate limit, then `authorize`
    /// (a caller's scope, before any verification), then the client data rebuilt and its freshness checked, then the
    /// service, which verifies it and advances the key's counter in one store transaction.
    /// - Parameters:
    ///   - input: the assertion as it arrived.
    ///   - timestampWindow: how far a signed timestamp may be from `now`, either way.
    ///   - now: the server's clock.
    ///   - authorize: sees the keyId before any verification and may refuse it.
    /// - Throws: the refusal as a problem.
    public func verify(
        _ input: AppAttestAssertionInput, timestampWindow: Duration = .seconds(60), now: Date = Date(),
        authorize: (KeyID) async -> AppAttestProblem? = { _ in nil }
    ) async throws(AppAttestProblem) -> AuthenticatedAssertion {
        try await verify(
            input, timestampWindow: timestampWindow, now: now, servingAppIDs: nil, authorize: authorize)
    }

    /// As ``verify(_:timestampWindow:now:authorize:)``; a verified assertion by a key of an App ID not in
    /// `servingAppIDs` (when given) is refused ``AppAttestProblem/appIdNotAllowed`` before its challenge or its
    /// counter is used.
    func verify(
        _ input: AppAttestAssertionInput, timestampWindow: Duration, now: Date, servingAppIDs: Set<AppID>?,
        authorize: (KeyID) async -> AppAttestProblem? = { _ in nil }
    ) async throws(AppAttestProblem) -> AuthenticatedAssertion {
        // The key's token is taken before any work, atomically, so that concurrent requests cannot pass beyond the
        // bucket, and given back when the assertion does not verify, so that someone who merely knows a keyId cannot
        // keep that key rate-limited.
        let bucket = input.keyID.base64EncodedString
        if let rateLimiter, case .limited(let retryAfter) = rateLimiter.acquire(bucket) {
            throw .rateLimited(retryAfter: retryAfter)
        }
        var charged = false
        defer { if !charged { rateLimiter?.release(bucket) } }
        if let refusal = await authorize(input.keyID) { throw refusal }
        let clientData = try input.clientData(timestampWindow: timestampWindow, now: now)
        do {
            let authenticated = try await service.authenticateAssertion(
                input.assertion, clientData: clientData, keyID: input.keyID,
                issuingNextChallenge: input.issuesNextChallenge, servingAppIDs: servingAppIDs)
            charged = true
            return authenticated
        } catch {
            // Verified, though refused for its App ID: charged as any verified assertion.
            if error.code == .appIDNotServed { charged = true }
            throw AppAttestProblem(error)
        }
    }

    /// Verifies the assertion a protected request carries in its header fields (``AppAttestHTTPHeaders``), bound to
    /// its method, path and query, body and freshness (`AppAttestClientData`).
    /// - Parameters:
    ///   - request: the request head as received (its path is the percent-encoded target, trailing slash kept).
    ///   - body: the request body, collected once.
    ///   - freshness: how the request proves it is fresh (a one-time challenge by default).
    ///   - now: the server's clock, for timestamps.
    /// - Throws: the refusal as a problem.
    public func authenticate(
        _ request: HTTPRequest, body: some Collection<UInt8>, freshness: AppAttestFreshness = .challengePerRequest,
        now: Date = Date()
    ) async throws(AppAttestProblem) -> AppAttestAuthentication {
        try await authenticate(request, body: body, freshness: freshness, now: now, servingAppIDs: nil)
    }

    /// As ``authenticate(_:body:freshness:now:)``, refusing a key of an App ID not in `servingAppIDs` (when given)
    /// before its challenge or its counter is used.
    private func authenticate(
        _ request: HTTPRequest, body: some Collection<UInt8>, freshness: AppAttestFreshness, now: Date,
        servingAppIDs: Set<AppID>?
    ) async throws(AppAttestProblem) -> AppAttestAuthentication {
        let input = try AppAttestAssertionInput(
            request: request, bodySHA256: AppAttestSHA256.hash(body), freshness: freshness)
        let authenticated = try await verify(
            input, timestampWindow: freshness.window, now: now, servingAppIDs: servingAppIDs)
        var response = HTTPFields()
        if let next = authenticated.nextChallenge {
            response[AppAttestHTTPHeaders.nextChallenge] = RequestBindingLayout.base64URL(next.challenge)
        }
        return AppAttestAuthentication(
            device: AttestedDevice(
                keyID: input.keyID, userID: authenticated.record.userID, counter: authenticated.assertion.counter,
                riskMetric: authenticated.record.riskMetric, appID: authenticated.record.key.appID),
            responseHeaderFields: response)
    }

    /// Verifies an assertion as ``verify(_:timestampWindow:now:authorize:)`` does, under the enforcement of the App IDs
    /// it may come from (`AppAttestService.enforcement(guarding:)`): when every one of them reports, a refusal is
    /// recorded (metric, log line) and returned as ``AppAttestVerdict/reported(_:)`` instead of thrown. A refusal of
    /// `authorize` (a caller's scope) is always thrown.
    /// - Parameters:
    ///   - input: the assertion as it arrived.
    ///   - timestampWindow: how far a signed timestamp may be from `now`, either way.
    ///   - now: the server's clock.
    ///   - appIDs: the App IDs whose requests this operation judges (a caller's scope); nil for every App ID the
    ///     service accepts.
    ///   - logger: where a reported refusal is logged.
    ///   - authorize: sees the keyId before any verification and may refuse it (always enforced).
    /// - Throws: the refusal as a problem, when enforced.
    public func verifyOrReport(
        _ input: AppAttestAssertionInput, timestampWindow: Duration = .seconds(60), now: Date = Date(),
        guarding appIDs: Set<AppID>? = nil, logger: Logger = AppAttestHTTPOperations.silent,
        authorize: (KeyID) async -> AppAttestProblem? = { _ in nil }
    ) async throws(AppAttestProblem) -> AppAttestVerdict {
        if let refusal = await authorize(input.keyID) { throw refusal }
        do {
            return .verified(try await verify(input, timestampWindow: timestampWindow, now: now))
        } catch {
            return .reported(try report(error, keyID: input.keyID, guarding: appIDs, logger: logger))
        }
    }

    /// Verifies the assertion of a protected request as ``authenticate(_:body:freshness:now:)`` does, under the
    /// enforcement of the App IDs whose apps send it (as ``verifyOrReport(_:timestampWindow:now:guarding:logger:authorize:)``);
    /// a request without App Attest header fields (an app version from before App Attest) is judged the same way.
    /// - Parameters:
    ///   - request: the request head as received.
    ///   - body: the request body, collected once.
    ///   - freshness: how the request proves it is fresh.
    ///   - now: the server's clock, for timestamps.
    ///   - appIDs: the App IDs whose apps call the guarded routes: a request signed by a key of another App ID is
    ///     refused (``AppAttestProblem/appIdNotAllowed``) once its signature is verified, before its challenge is
    ///     checked or used and before its counter is stored; nil for every App ID the service accepts.
    ///   - logger: where a reported refusal is logged.
    /// - Throws: the refusal as a problem, when enforced.
    public func admit(
        _ request: HTTPRequest, body: some Collection<UInt8>, freshness: AppAttestFreshness = .challengePerRequest,
        now: Date = Date(), guarding appIDs: Set<AppID>? = nil, logger: Logger = AppAttestHTTPOperations.silent
    ) async throws(AppAttestProblem) -> AppAttestAdmission {
        do throws(AppAttestProblem) {
            // A key of an App ID the routes do not serve (the service accepts several) is not theirs to admit: refused
            // once its signature is verified, before its challenge or counter is used.
            return .verified(
                try await authenticate(request, body: body, freshness: freshness, now: now, servingAppIDs: appIDs))
        } catch {
            let keyID = request.headerFields[AppAttestHTTPHeaders.keyID].flatMap { try? KeyID(base64Encoded: $0) }
            return .reported(try report(error, keyID: keyID, guarding: appIDs, logger: logger))
        }
    }

    /// The report of a refusal when every guarded App ID reports; the refusal again otherwise. What the request
    /// names (its keyId) never chooses the policy.
    private func report(_ problem: AppAttestProblem, keyID: KeyID?, guarding appIDs: Set<AppID>?, logger: Logger)
        throws(AppAttestProblem) -> AppAttestReport
    {
        guard service.enforcement(guarding: appIDs) == .report else { throw problem }
        service.recordReportedRefusal(code: problem.code, keyID: keyID, logger: logger)
        return AppAttestReport(problem: problem, keyID: keyID)
    }

    /// A logger that discards everything: the default of every operation that logs.
    public static let silent = Logger(label: "appattest", factory: { _ in SwiftLogNoOpLogHandler() })

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
