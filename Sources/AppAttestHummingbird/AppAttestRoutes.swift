#if Hummingbird
import AppAttest
public import AppAttestStore
import Foundation
public import Hummingbird
import NIOCore

/// The routes an app needs before its first protected request: a challenge, and attestation registration
/// (JSON of `AppAttestHTTPOperations`).
///
/// - `POST {path}/challenge` `{"purpose": "attestation"|"assertion", "keyId"?: base64}` →
///   `{"challenge": base64url, "expiresAt": ISO 8601}`
/// - `POST {path}/attestation` `{"keyId": base64, "attestationObject": base64, "challenge": base64url}` →
///   `{"keyId", "environment", "appId"}`
public struct AppAttestRoutes<Context: RequestContext>: Sendable {
    /// The framework-neutral operations the routes run.
    public let operations: AppAttestHTTPOperations
    /// The user to bind a new key to, from your own authentication; nil for none.
    public let userID: @Sendable (Request, Context) -> String?

    /// Routes on `service`; `userID` names the user a new key is bound to (from your authentication).
    public init(service: AppAttestService, userID: @escaping @Sendable (Request, Context) -> String? = { _, _ in nil })
    {
        self.operations = AppAttestHTTPOperations(service: service)
        self.userID = userID
    }

    /// Adds the routes under `path`.
    public func add(to router: Router<Context>, path: String = "appattest") {
        let group = router.group(RouterPath(path))
        group.post("challenge") { request, context in
            guard let body = try? await request.body.collect(upTo: AppAttestHTTPOperations.maximumJSONBodySize) else {
                return response(.problem(.bodyTooLarge))
            }
            return response(
                await operations.challenge(body: body.readableBytesView, userID: userID(request, context)))
        }
        group.post("attestation") { request, context in
            guard let body = try? await request.body.collect(upTo: AppAttestHTTPOperations.maximumJSONBodySize) else {
                return response(.problem(.bodyTooLarge))
            }
            return response(
                await operations.attestation(body: body.readableBytesView, userID: userID(request, context)))
        }
    }
}
#endif  // Hummingbird
