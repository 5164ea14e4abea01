public import AppAttest
public import AppAttestStore
import Foundation
public import Hummingbird

/// The routes an app needs before its first protected request: a challenge, and attestation registration.
///
/// - `POST {path}/challenge` `{"purpose": "attestation"|"assertion", "keyId"?: base64}` →
///   `{"challenge": base64url, "expiresAt": ISO 8601}`
/// - `POST {path}/attestation` `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   `{"keyId", "environment", "appId"}`
public struct AppAttestRoutes<Context: RequestContext>: Sendable {
    public let service: AppAttestService
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request, Context) -> String?

    public init(service: AppAttestService, userID: @escaping @Sendable (Request, Context) -> String? = { _, _ in nil })
    {
        self.service = service
        self.userID = userID
    }

    /// Adds the routes under `path`.
    public func add(to router: Router<Context>, path: String = "appattest") {
        let group = router.group(RouterPath(path))
        group.post("challenge") { request, context in try await challenge(request, context) }
        group.post("attestation") { request, context in try await attestation(request, context) }
    }

    struct ChallengeRequest: Decodable {
        var purpose: String
        var keyId: String?
    }

    struct ChallengeResponse: ResponseEncodable {
        var challenge: String
        var expiresAt: Date
    }

    struct AttestationRequest: Decodable {
        var keyId: String
        var attestationObject: String
        var challenge: String
    }

    struct AttestationResponse: ResponseEncodable {
        var keyId: String
        var appId: String
        var environment: String
    }

    func challenge(_ request: Request, _ context: Context) async throws -> Response {
        guard let body = try? await request.decode(as: ChallengeRequest.self, context: context),
            [AppAttestService.Purpose.attestation, AppAttestService.Purpose.assertion].contains(body.purpose)
        else {
            return problem(
                .init(status: 400, code: "malformed", title: "Expected {\"purpose\": \"attestation\"|\"assertion\"}"))
        }
        var keyID: KeyID?
        if let text = body.keyId {
            guard let parsed = try? KeyID(base64Encoded: text) else {
                return problem(.init(status: 400, code: "malformed", title: "keyId is not Base64 of 32 bytes"))
            }
            keyID = parsed
        }
        do {
            let issued = try await service.issueChallenge(
                purpose: body.purpose, keyID: keyID, userID: userID(request, context))
            return try ChallengeResponse(
                challenge: AppAttestRequestBinding.base64URL(issued.challenge), expiresAt: issued.expiresAt
            ).response(from: request, context: context)
        } catch let error as AppAttestServiceError {
            return problem(AppAttestProblem(error))
        }
    }

    func attestation(_ request: Request, _ context: Context) async throws -> Response {
        guard let body = try? await request.decode(as: AttestationRequest.self, context: context),
            let keyID = try? KeyID(base64Encoded: body.keyId),
            let object = AppAttestRequestBinding.decodeBase64(
                body.attestationObject, limit: AttestationObject.maximumSize),
            let challenge = AppAttestRequestBinding.decodeBase64URL(body.challenge, limit: 1024)
        else {
            return problem(
                .init(status: 400, code: "malformed", title: "Expected keyId, attestationObject and challenge"))
        }
        do {
            let record = try await service.registerAttestation(
                object, keyID: keyID, challenge: challenge, userID: userID(request, context))
            return try AttestationResponse(
                keyId: record.keyID.base64EncodedString, appId: record.appID.rawValue,
                environment: record.environment.rawValue
            ).response(from: request, context: context)
        } catch let error as AppAttestServiceError {
            return problem(AppAttestProblem(error))
        }
    }
}
