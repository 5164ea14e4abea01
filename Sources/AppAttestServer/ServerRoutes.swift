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
        let v1 = router.group("v1").add(middleware: CallerMiddleware(server: self))
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
                switch await operations.verifyAssertion(
                    body: bytes, authorize: { keyID in await self.outOfScope(keyID, context.scope) },
                    timestampWindow: .seconds(self.configuration.timestampWindowSeconds), now: self.now())
                {
                case .success(let authenticated):
                    var response = KeyResponse(authenticated.record)
                    if let next = authenticated.nextChallenge {
                        response.nextChallenge = RequestBindingLayout.base64URL(next.challenge)
                        response.nextChallengeExpiresAt = next.expiresAt
                    }
                    // The hot path's answer, written directly (the same JSON as JSONEncoder's, a tenth of the cost).
                    return AppAttestHTTPResponse(
                        status: .ok, headerFields: [.contentType: "application/json"], body: response.json)
                case .failure(let problem): return .problem(problem)
                }
            }
        }
        v1.get("keys/:keyId") { request, context in
            await self.keyOperation(context, operation: "key", needs: .read) { keyID in await self.key(keyID) }
        }
        v1.post("keys/:keyId/revoke") { request, context in
            await self.keyOperation(context, operation: "revoke", needs: .revoke) { keyID in await self.revoke(keyID) }
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

    // MARK: Request and response bodies (openapi.yaml)

    struct KeyResponse: Encodable {
        var keyId: String
        var userId: String?
        var appId: String
        var environment: String
        var counter: UInt32
        var riskMetric: Int?
        var createdAt: Date
        var receiptUpdatedAt: Date
        var revokedAt: Date?
        /// After a verification that asked for it: the key's next challenge.
        var nextChallenge: String?
        var nextChallengeExpiresAt: Date?

        /// The JSON JSONEncoder writes for this value (sorted keys, ISO 8601 dates, no escaped slashes), written
        /// directly; `KeyResponseTests` compares the two.
        var json: [UInt8] {
            var out: [UInt8] = []
            out.reserveCapacity(320)
            out.append(UInt8(ascii: "{"))
            func name(_ name: StaticString) {
                if out.count > 1 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
                out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
            }
            name("appId")
            JSONText.quote(appId, into: &out)
            name("counter")
            out.append(contentsOf: String(counter).utf8)
            name("createdAt")
            Self.iso8601(createdAt, into: &out)
            name("environment")
            JSONText.quote(environment, into: &out)
            name("keyId")
            JSONText.quote(keyId, into: &out)
            if let nextChallenge {
                name("nextChallenge")
                JSONText.quote(nextChallenge, into: &out)
            }
            if let nextChallengeExpiresAt {
                name("nextChallengeExpiresAt")
                Self.iso8601(nextChallengeExpiresAt, into: &out)
            }
            name("receiptUpdatedAt")
            Self.iso8601(receiptUpdatedAt, into: &out)
            if let revokedAt {
                name("revokedAt")
                Self.iso8601(revokedAt, into: &out)
            }
            if let riskMetric {
                name("riskMetric")
                out.append(contentsOf: String(riskMetric).utf8)
            }
            if let userId {
                name("userId")
                JSONText.quote(userId, into: &out)
            }
            out.append(UInt8(ascii: "}"))
            return out
        }

        /// `"yyyy-MM-ddTHH:mm:ssZ"` in UTC, quoted, as JSONEncoder's `.iso8601` writes (whole seconds, rounded down).
        static func iso8601(_ date: Date, into out: inout [UInt8]) {
            var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
            var parts = tm()
            gmtime_r(&seconds, &parts)
            func digits(_ value: Int32, _ count: Int) {
                var divisor: Int32 = 1
                for _ in 1..<count { divisor *= 10 }
                while divisor > 0 {
                    out.append(UInt8(ascii: "0") + UInt8((value / divisor) % 10))
                    divisor /= 10
                }
            }
            out.append(UInt8(ascii: "\""))
            digits(parts.tm_year + 1900, 4)
            out.append(UInt8(ascii: "-"))
            digits(parts.tm_mon + 1, 2)
            out.append(UInt8(ascii: "-"))
            digits(parts.tm_mday, 2)
            out.append(UInt8(ascii: "T"))
            digits(parts.tm_hour, 2)
            out.append(UInt8(ascii: ":"))
            digits(parts.tm_min, 2)
            out.append(UInt8(ascii: ":"))
            digits(parts.tm_sec, 2)
            out.append(contentsOf: [UInt8(ascii: "Z"), UInt8(ascii: "\"")])
        }

        init(_ record: KeyRecord) {
            keyId = record.keyID.base64EncodedString
            userId = record.userID
            appId = record.key.appID.rawValue
            environment = record.key.environment.rawValue
            counter = record.key.counter
            riskMetric = record.riskMetric
            createdAt = record.createdAt
            receiptUpdatedAt = record.receiptUpdatedAt
            revokedAt = record.revokedAt
        }
    }

    struct RevokeResponse: Encodable {
        var keyId: String
        var revoked: Bool
    }

    struct RefreshResponse: Encodable {
        var keyId: String
        /// refreshed, notModified or noData.
        var outcome: String
        var riskMetric: Int?
        var receiptCreatedAt: Date?
    }

    static let notConfigured = AppAttestProblem(
        status: .serviceUnavailable, code: "notConfigured", title: "No App ID is configured on this server")

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
        return await operations.challenge(
            purpose: body.purpose, keyID: body.keyId, userID: body.userId, issuer: caller.map { "caller:\($0.name)" })
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
        switch await operations.registerAttestation(
            keyID: body.keyId, attestationObject: body.attestationObject, challenge: body.challenge,
            userID: body.userId)
        {
        case .success(let record): return .json(KeyResponse(record))
        case .failure(let problem): return .problem(problem)
        }
    }

    func key(_ keyID: KeyID) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        do { return .json(KeyResponse(try await service.key(keyID))) } catch {
            return .problem(Self.problem(error))
        }
    }

    func revoke(_ keyID: KeyID) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        do {
            let changed = try await service.revokeKey(keyID)
            logger.info("key revoked", metadata: ["keyId": "\(keyID)", "changed": "\(changed)"])
            return .json(RevokeResponse(keyId: keyID.base64EncodedString, revoked: true))
        } catch {
            return .problem(Self.problem(error))
        }
    }

    func refresh(_ keyID: KeyID) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        guard let refresher else {
            return .problem(
                .init(
                    status: .serviceUnavailable, code: "receiptRefreshNotConfigured",
                    title: "No Apple provider key is configured"))
        }
        do {
            switch try await service.refreshReceipt(keyID, using: refresher) {
            case .refreshed(let receipt):
                return .json(
                    RefreshResponse(
                        keyId: keyID.base64EncodedString, outcome: "refreshed", riskMetric: receipt.riskMetric,
                        receiptCreatedAt: receipt.creationTime))
            case .notModified:
                return .json(RefreshResponse(keyId: keyID.base64EncodedString, outcome: "notModified"))
            case .noData:
                return .json(RefreshResponse(keyId: keyID.base64EncodedString, outcome: "noData"))
            }
        } catch {
            if error.code == .receiptRefreshFailed {
                let code = (error.underlying as? AppleAPIError).map { "apple.\($0.code)" } ?? "apple.failed"
                logger.warning("receipt refresh failed", metadata: ["keyId": "\(keyID)", "error": "\(code)"])
                return .problem(.init(status: .badGateway, code: code, title: "Apple's receipt service refused"))
            }
            return .problem(Self.problem(error))
        }
    }

    /// The problem for a service refusal on the key routes: an unknown key is 404, a revoked one 409.
    static func problem(_ error: AppAttestServiceError) -> AppAttestProblem {
        switch error.code {
        case .unknownKey: return unknownKey
        case .keyRevoked: return .init(status: .conflict, code: "keyRevoked", title: "The key was revoked")
        default: return AppAttestProblem(error)
        }
    }

    func health() async -> Response {
        // A shorter deadline than requests get: a load balancer's probe must learn quickly that this instance
        // cannot serve, and not hold a connection while the store's own deadline runs out. A server without an App
        // ID cannot serve either.
        let deadline = Duration.nanoseconds(Int64(configuration.readinessTimeoutSeconds * 1e9))
        do {
            guard let service else { throw AppAttestServiceError(.storeUnavailable, "no App ID is configured") }
            try await service.checkStore(within: deadline)
            return Response(.json(["status": "ok", "store": "ok"]))
        } catch {
            return Response(.json(["status": "unavailable", "store": "unavailable"], status: .serviceUnavailable))
        }
    }

    static let unknownKey = AppAttestProblem(status: .notFound, code: "unknownKey", title: "No such key")
    static let forbidden = AppAttestProblem(
        status: .forbidden, code: "forbidden", title: "This caller's token does not allow this operation")

    /// 403 when the caller's token lacks `permission`.
    static func refusal(_ context: ServerRequestContext, _ permission: ServerConfiguration.Permission)
        -> AppAttestHTTPResponse?
    {
        context.scope?.permissions.contains(permission) == true ? nil : .problem(forbidden)
    }

    /// 404, as if the key did not exist, when the caller is limited to App IDs that do not include the key's.
    func outOfScope(_ keyID: KeyID, _ caller: Caller?) async -> AppAttestProblem? {
        guard let caller, caller.appIDs != nil else { return nil }
        guard let service else { return Self.notConfigured }
        do { return caller.covers(try await service.appID(ofKey: keyID)) ? nil : Self.unknownKey } catch {
            return Self.problem(error)
        }
    }

    // MARK: Plumbing

    /// Runs an operation on the raw body, records its outcome and duration.
    func raw(
        _ request: Request, _ context: ServerRequestContext, operation: String,
        _ body: (ByteBufferView) async -> AppAttestHTTPResponse
    ) async throws -> Response {
        let start = ContinuousClock.now
        let bytes = try await request.body.collect(upTo: configuration.maximumBodyBytes)
        return finish(await body(bytes.readableBytesView), context, operation: operation, start: start)
    }

    /// Decodes a JSON body, runs the operation, records its outcome and duration.
    func json<Body: Decodable>(
        _ request: Request, _ context: ServerRequestContext, operation: String,
        _ body: (Body) async -> AppAttestHTTPResponse
    ) async throws -> Response {
        let start = ContinuousClock.now
        let result: AppAttestHTTPResponse
        let bytes = try await request.body.collect(upTo: configuration.maximumBodyBytes)
        if let decoded = AppAttestHTTPOperations.decode(Body.self, bytes.readableBytesView) {
            result = await body(decoded)
        } else {
            result = .problem(.malformed("The body is not the JSON this operation expects"))
        }
        return finish(result, context, operation: operation, start: start)
    }

    func keyOperation(
        _ context: ServerRequestContext, operation: String, needs permission: ServerConfiguration.Permission,
        _ body: (KeyID) async -> AppAttestHTTPResponse
    ) async -> Response {
        let start = ContinuousClock.now
        let result: AppAttestHTTPResponse
        if let refusal = Self.refusal(context, permission) {
            result = refusal
        } else if let text = context.parameters.get("keyId"),
            let raw = RequestBindingLayout.decodeBase64URL(text, limit: 64),
            let keyID = try? KeyID(rawValue: raw)
        {
            if let refusal = await outOfScope(keyID, context.scope) {
                result = .problem(refusal)
            } else {
                result = await body(keyID)
            }
        } else {
            result = .problem(.malformed("keyId in the path is Base64URL of 32 bytes"))
        }
        return finish(result, context, operation: operation, start: start)
    }

    private func finish(
        _ result: AppAttestHTTPResponse, _ context: ServerRequestContext, operation: String,
        start: ContinuousClock.Instant
    ) -> Response {
        let duration = ContinuousClock.now - start
        let code = result.status.code < 300 ? nil : result.problemCode ?? "status\(result.status.code)"
        metrics.record(operation: operation, code: code, duration: duration)
        context.logger.debug(
            "\(operation)",
            metadata: [
                "caller": "\(context.caller ?? "-")", "status": "\(result.status)", "code": "\(code ?? "ok")",
                "ms": "\(Double(duration.components.attoseconds) / 1e15 + Double(duration.components.seconds) * 1000)",
            ])
        return Response(result)
    }
}

/// Authenticates the caller (bearer token), applies its rate limit and the body size limit.
struct CallerMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext
    let server: AppAttestServer

    func handle(
        _ request: Request, context: ServerRequestContext,
        next: (Request, ServerRequestContext) async throws -> Response
    ) async throws -> Response {
        guard let caller = server.tokens.caller(authorization: request.headers[.authorization]) else {
            server.metrics.refused("unauthorized")
            var refused = Response(
                .problem(.init(status: .unauthorized, code: "unauthorized", title: "A valid bearer token is required")))
            refused.headers[.wwwAuthenticate] = "Bearer"
            return refused
        }
        if let limiter = server.rateLimiter, case .limited(let retryAfter) = limiter.acquire(caller.name) {
            server.metrics.refused("rateLimited")
            return Response(.problem(.rateLimited(retryAfter: retryAfter)))
        }
        var request = request
        let limit = server.configuration.maximumBodyBytes
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            server.metrics.refused("bodyTooLarge")
            return Response(.problem(.bodyTooLarge))
        }
        do { request.body = .init(buffer: try await request.body.collect(upTo: limit)) } catch {
            server.metrics.refused("bodyTooLarge")
            return Response(.problem(.bodyTooLarge))
        }
        var context = context
        context.scope = caller
        // Metadata costs on every request (the stream handler re-renders it): only when info logs are written.
        if context.logger.logLevel <= .info { context.logger[metadataKey: "caller"] = "\(caller.name)" }
        return try await next(request, context)
    }
}
#endif  // Service
