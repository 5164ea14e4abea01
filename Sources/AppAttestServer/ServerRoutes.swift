#if Service
import AppAttest
import AppAttestWire
import AppAttestHummingbird
import AppAttestStore
import AppAttestLifecycle
import AppAttestHTTP
import AppleDeviceAPI
import Foundation
import HTTPTypes
public import Hummingbird
import Logging
import NIOCore
import Tracing

extension AppAttestServer {
    /// The routes of `openapi.yaml`.
    public func makeRouter() -> Router<ServerRequestContext> {
        let router = Router(context: ServerRequestContext.self)
        router.add(middleware: MetricsMiddleware())
        // A trivial route: the ceiling of the HTTP stack in load tests.
        router.get("ping") { _, _ in "pong" }
        // Liveness: the process answers, whatever the store does (a database outage must not restart pods).
        router.get("health/live") { _, _ in Response(.json(["status": "ok"])) }
        // Readiness: the store answers too. `/health` is the same, for existing probes.
        router.get("health/ready") { _, _ in await self.health() }
        router.get("health") { _, _ in await self.health() }
        router.get("metrics") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(
                status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: self.metrics.exposition())))
        }
        router.get("openapi.yaml") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "application/yaml"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: Self.openAPI)))
        }
        let v1 = router.group("v1")
        if !(InstrumentationSystem.tracer is NoOpTracer) {
            v1.add(middleware: TraceContextMiddleware(sampler: ServerTracing.rootSampler.withLock { $0 }))
        }
        v1.add(middleware: CallerMiddleware(server: self))
        v1.post("challenges") { request, context in
            try await self.json(request, context, operation: "challenge") {
                (body: AppAttestHTTPOperations.ChallengeRequest) in
                let needed: ServerConfiguration.Permission =
                    body.purpose == AppAttestService.Purpose.attestation ? .register : .verify
                if let refusal = Self.refusal(context, needed) { return refusal }
                return await self.challenge(body, caller: context.scope)
            }
        }
        v1.post("attestations") { request, context in
            try await self.json(request, context, operation: "attestation") {
                (body: AppAttestHTTPOperations.AttestationRequest) in
                if let refusal = Self.refusal(context, .register) { return refusal }
                return await self.attestation(body, caller: context.scope)
            }
        }
        v1.post("assertions/verify") { request, context in
            try await self.raw(request, context, operation: "assertion") { bytes in
                if let refusal = Self.refusal(context, .verify) { return refusal }
                guard let operations = self.operations else { return .problem(Self.notConfigured) }
                // The same operation as every front end's (AppAttestHTTPOperations); a caller limited to some App
                // IDs is refused keys of others before anything is verified.
                do throws(AppAttestProblem) {
                    // Report-only enforcement when every App ID this caller may see reports; its scope is always
                    // enforced.
                    let verdict = try await operations.verifyOrReport(
                        try AppAttestAssertionInput(json: bytes),
                        timestampWindow: .seconds(self.configuration.timestampWindowSeconds), now: self.now(),
                        guarding: context.scope?.appIDs, logger: context.logger,
                        authorize: { keyID in await self.outOfScope(keyID, context.scope) })
                    switch verdict {
                    case .verified(let authenticated):
                        var response = AppAttestKeyDocument(authenticated.record)
                        if let next = authenticated.nextChallenge {
                            response.nextChallenge = RequestBindingLayout.base64URL(next.challenge)
                            response.nextChallengeExpiresAt = next.expiresAt
                        }
                        // The hot path's answer, written directly (the same JSON as JSONEncoder's; KeyDocumentTests).
                        return AppAttestHTTPResponse(
                            status: .ok, headerFields: [.contentType: "application/json"], body: response.json)
                    case .reported(let report):
                        // Report-only enforcement: 200, and what would have refused it.
                        return .json(ReportedRefusal(report))
                    }
                } catch {
                    return .problem(error)
                }
            }
        }
        v1.get("keys/:keyId") { request, context in
            await self.keyOperation(context, operation: "key", needs: .read) { keyID in await self.key(keyID) }
        }
        v1.get("keys/:keyId/events") { request, context in
            let limit = request.uri.queryParameters.get("limit").flatMap { Int($0) } ?? 100
            return await self.keyOperation(context, operation: "events", needs: .read) { keyID in
                await self.events(keyID, limit: limit)
            }
        }
        v1.post("keys/:keyId/revoke") { request, context in
            // An optional body names the reason, kept in the key's events.
            let body = try await request.body.collect(upTo: 4096)
            let reason: String?
            if body.readableBytes == 0 {
                reason = nil
            } else if let decoded = AppAttestHTTPOperations.decode(RevokeRequest.self, body.readableBytesView) {
                reason = decoded.reason
            } else {
                return Response(.problem(.malformed("The body is {\"reason\": string} or empty")))
            }
            return await self.keyOperation(context, operation: "revoke", needs: .revoke) { keyID in
                await self.revoke(keyID, reason: reason)
            }
        }
        v1.post("keys/:keyId/receipt/refresh") { request, context in
            await self.keyOperation(context, operation: "receiptRefresh", needs: .refresh) { keyID in
                await self.refresh(keyID)
            }
        }
        return router
    }

    static let openAPI: [UInt8] = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml"),
            let data = try? Data(contentsOf: url)
        else { return Array("openapi.yaml is missing from the bundle\n".utf8) }
        return Array(data)
    }()

    // MARK: Operations

    func challenge(_ body: AppAttestHTTPOperations.ChallengeRequest, caller: Caller?) async -> AppAttestHTTPResponse {
        guard let operations else { return .problem(Self.notConfigured) }
        // A caller limited to some App IDs reserves challenges only for keys it can see (404 otherwise, as its GET
        // answers), so that it cannot fill another app's keys' challenges.
        if let keyText = body.keyId, let keyID = try? KeyID(base64Encoded: keyText),
            let refusal = await outOfScope(keyID, caller)
        {
            return .problem(refusal)
        }
        // The App ID whose attestation budget pays: named, else the caller's only one.
        var appID: AppID?
        if let text = body.appId {
            guard let named = try? AppID(text), operations.service.verifier.configuration.apps[named] != nil else {
                return .problem(.malformed("appId is not an App ID this server accepts"))
            }
            guard caller?.covers(named) ?? true else { return .problem(Self.forbidden) }
            appID = named
        } else if let allowed = caller?.appIDs {
            // A caller limited to several App IDs names the one that pays for an attestation challenge: charged to the
            // budget of unnamed App IDs, it could spend that shared bucket, and with it other tenants' registrations.
            guard allowed.count <= 1 || body.purpose != AppAttestService.Purpose.attestation else {
                return .problem(.malformed("appId is required: this caller may register keys of several App IDs"))
            }
            appID = allowed.count == 1 ? allowed.first : nil
        }
        return await operations.challenge(
            purpose: body.purpose, keyID: body.keyId, userID: body.userId, issuer: caller.map { "caller:\($0.name)" },
            appID: appID)
    }

    func attestation(_ body: AppAttestHTTPOperations.AttestationRequest, caller: Caller?) async -> AppAttestHTTPResponse
    {
        guard let operations else { return .problem(Self.notConfigured) }
        // A caller limited to some App IDs registers keys of those only: the rpIdHash in the object names the
        // App ID before anything is consumed or stored (verification then proves it).
        if let allowed = caller?.appIDs {
            guard
                let bytes = RequestBindingLayout.decodeBase64(
                    body.attestationObject, limit: AttestationObject.maximumSize),
                let object = try? AttestationObject(cborEncoded: bytes)
            else { return .problem(.malformed("attestationObject is not an attestation object")) }
            guard allowed.contains(where: { $0.rpIDHash == object.authenticatorData.rpIDHash }) else {
                return .problem(Self.forbidden)
            }
        }
        do {
            return .json(
                AppAttestKeyDocument(
                    try await operations.registerAttestation(
                        keyID: body.keyId, attestationObject: body.attestationObject, challenge: body.challenge,
                        userID: body.userId)))
        } catch {
            return .problem(error)
        }
    }
}
#endif  // Service
