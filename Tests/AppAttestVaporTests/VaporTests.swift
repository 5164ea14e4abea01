#if Vapor
import AppAttest
import AppAttestWire
import AppAttestHTTP
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import AppAttestVapor
import Foundation
import Synchronization
import Testing
import VaporTesting

@Suite("Vapor routes and middleware")
struct VaporMiddlewareTests {
    static let authority = try! TestCertificateAuthority(name: "Vapor")
    static let appID = try! AppID("VAPOR12345.com.example.app")

    /// Runs `body` against an app with the routes at /appattest and a protected POST /api/order.
    func withProtectedApp(
        rateLimiter: AppAttestRateLimiter? = nil, policies: AppAttestService.Policies = .init(),
        _ body: (Application, SimulatedDevice) async throws -> Void
    ) async throws {
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    appID: Self.appID, environment: .production, trustAnchor: Self.authority.trustAnchor)),
            store: MemoryAppAttestStore(), policies: policies)
        let device = try SimulatedDevice(authority: Self.authority, appID: Self.appID)
        try await withApp { app in
            app.appAttest.use(service)
            try app.register(collection: app.appAttest.routes())
            app.grouped("api").grouped(app.appAttest.middleware(maximumBodySize: 4096, rateLimiter: rateLimiter))
                .on(.POST, "order", body: .collect(maxSize: 8192)) { request async throws -> String in
                    if let report = request.appAttest.report {
                        #expect(request.appAttest.device == nil && AppAttestReport.current == report)
                        return "unverified \(report.problem.code)"
                    }
                    let device = try request.auth.require(AttestedDevice.self)
                    #expect(request.appAttest.device == device)
                    #expect(try request.appAttest.requireDevice() == device)
                    return "ok counter \(device.counter) body \(request.body.string ?? "")"
                }
            try await body(app, device)
        }
    }

    struct Challenge: Decodable { var challenge: String }

    /// The problem's code; its action is checked against the documented one on the way.
    func code(_ response: TestingHTTPResponse) -> String? {
        let document = (try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]) ?? [:]
        #expect(DocumentedProblemActions.isDocumented(document), "undocumented action: \(document)")
        return document["code"] as? String
    }

    func challenge(_ app: Application, purpose: String, keyID: KeyID? = nil) async throws -> [UInt8] {
        let key = keyID.map { ",\"keyId\":\"\($0.base64EncodedString)\"" } ?? ""
        let response = try await app.testing().sendRequest(
            .POST, "/appattest/challenge", headers: ["Content-Type": "application/json"],
            body: ByteBuffer(string: "{\"purpose\":\"\(purpose)\"\(key)}"))
        #expect(response.status == .ok)
        let decoded = try JSONDecoder().decode(Challenge.self, from: Data(buffer: response.body))
        return try #require(RequestBindingLayout.decodeBase64URL(decoded.challenge))
    }

    func register(_ app: Application, _ device: SimulatedDevice) async throws {
        let challenge = try await challenge(app, purpose: "attestation")
        let object = try device.attest(challenge: challenge)
        let body = """
            {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
            "challenge":"\(RequestBindingLayout.base64URL(challenge))"}
            """
        let response = try await app.testing().sendRequest(
            .POST, "/appattest/attestation", headers: ["Content-Type": "application/json"],
            body: ByteBuffer(string: body))
        #expect(response.status == .ok, "\(response.body.string)")
    }

    func signed(_ device: SimulatedDevice, path: String, body: String, challenge: [UInt8], signedPath: String? = nil)
        throws -> HTTPHeaders
    {
        let clientData = try AppAttestClientData.request(
            method: "POST", pathAndQuery: signedPath ?? path, body: Array(body.utf8), challenge: challenge
        ).bytes
        let assertion = try device.assert(clientData: clientData)
        return [
            AppAttestHTTPHeaders.keyID.rawName: device.keyID.base64EncodedString,
            AppAttestHTTPHeaders.assertion.rawName: Data(assertion).base64EncodedString(),
            AppAttestHTTPHeaders.challenge.rawName: RequestBindingLayout.base64URL(challenge),
        ]
    }

    @Test("register, then a protected request passes once with the device in req.auth; its replay is 409")
    func flow() async throws {
        try await withProtectedApp { app, device in
            try await register(app, device)
            let c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            let headers = try signed(device, path: "/api/order", body: "{\"item\":1}", challenge: c)
            var response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{\"item\":1}"))
            #expect(response.status == .ok)
            #expect(response.body.string == "ok counter 1 body {\"item\":1}")
            response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{\"item\":1}"))
            #expect(response.status == .conflict)
            #expect(response.headers.first(name: "Content-Type") == "application/problem+json")
            // The attestation cannot be registered twice either.
            let again = try await app.testing().sendRequest(
                .POST, "/appattest/attestation", headers: ["Content-Type": "application/json"],
                body: ByteBuffer(string: "{\"keyId\":1}"))
            #expect(again.status == .badRequest)
        }
    }

    @Test("report mode: a replay and a request without headers run unverified, with the report in req.appAttest")
    func reportMode() async throws {
        try await withProtectedApp(policies: .init(defaultPolicy: .init(enforcement: .report))) { app, device in
            try await register(app, device)
            let c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            let headers = try signed(device, path: "/api/order", body: "{}", challenge: c)
            var response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{}"))
            #expect(response.body.string == "ok counter 1 body {}")
            response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{}"))
            #expect(response.status == .ok && response.body.string == "unverified counterNotIncreasing")
            response = try await app.testing().sendRequest(.POST, "/api/order", body: ByteBuffer(string: "{}"))
            #expect(response.status == .ok && response.body.string == "unverified missingAssertion")
            // Enforced again: refused.
            app.appAttest.service.replacePolicies(.init())
            response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{}"))
            #expect(response.status == .conflict && code(response) == "counterNotIncreasing")
        }
    }

    @Test("an assertion is bound to its path and body; missing, malformed and oversized requests are refused")
    func bindings() async throws {
        try await withProtectedApp { app, device in
            try await register(app, device)
            var c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            var headers = try signed(device, path: "/api/order", body: "{}", challenge: c, signedPath: "/api/refund")
            var response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{}"))
            #expect(response.status == .unauthorized)
            #expect(code(response) == "signatureInvalid")

            c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            headers = try signed(device, path: "/api/order", body: "{\"item\":1}", challenge: c)
            response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{\"item\":2}"))
            #expect(response.status == .unauthorized)

            response = try await app.testing().sendRequest(.POST, "/api/order", body: ByteBuffer(string: "{}"))
            #expect(response.status == .unauthorized)
            #expect(code(response) == "missingAssertion")

            headers.replaceOrAdd(name: AppAttestHTTPHeaders.keyID.rawName, value: "<script>")
            response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: "{}"))
            #expect(response.status == .badRequest)
            #expect(!response.body.string.contains("<script>"))

            c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            let large = String(repeating: "x", count: 5000)
            headers = try signed(device, path: "/api/order", body: large, challenge: c)
            response = try await app.testing().sendRequest(
                .POST, "/api/order", headers: headers, body: ByteBuffer(string: large))
            #expect(response.status == .payloadTooLarge)
            #expect(code(response) == "bodyTooLarge")

            response = try await app.testing().sendRequest(
                .POST, "/appattest/challenge", body: ByteBuffer(string: "{\"purpose\":1}"))
            #expect(response.status == .badRequest)
            response = try await app.testing().sendRequest(
                .POST, "/appattest/attestation",
                body: ByteBuffer(repeating: 0x20, count: AppAttestHTTPLimits.maximumJSONBodySize + 1))
            #expect(response.status == .payloadTooLarge)
            #expect(code(response) == "bodyTooLarge")
        }
    }

    @Test("beyond the per-key rate the middleware answers 429 with Retry-After, before any verification")
    func rateLimited() async throws {
        let limiter = AppAttestRateLimiter(ratePerSecond: 0.001, burst: 1)
        try await withProtectedApp(rateLimiter: limiter) { app, device in
            try await register(app, device)
            var c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            var headers = try signed(device, path: "/api/order", body: "", challenge: c)
            var response = try await app.testing().sendRequest(.POST, "/api/order", headers: headers)
            #expect(response.status == .ok)
            c = try await challenge(app, purpose: "assertion", keyID: device.keyID)
            headers = try signed(device, path: "/api/order", body: "", challenge: c)
            response = try await app.testing().sendRequest(.POST, "/api/order", headers: headers)
            #expect(response.status == .tooManyRequests)
            #expect(code(response) == "rateLimited")
            #expect(Int(response.headers.first(name: "Retry-After") ?? "") ?? 0 >= 1)
        }
    }
}
#endif  // Vapor

#if Vapor
/// app.appAttest, req.appAttest, refusals for the application's error middleware, freshness and the store's close.
@Suite("Vapor: app.appAttest, errors and freshness")
struct VaporIntegrationTests {

    static func service(_ store: any AppAttestStore) throws -> AppAttestService {
        AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    appID: VaporMiddlewareTests.appID, environment: .production,
                    trustAnchor: VaporMiddlewareTests.authority.trustAnchor)),
            store: store)
    }

    @Test("app.appAttest closes the store at shutdown")
    func storeClosedAtShutdown() async throws {
        let closed = Atomic<Bool>(false)
        // A memory store that records when it is closed.
        let store = ObservedAppAttestStore(MemoryAppAttestStore(), didClose: { closed.store(true, ordering: .relaxed) })
        try await withApp { app in
            app.appAttest.use(try Self.service(store), purgeInterval: nil)
            #expect(app.appAttest.serviceIfConfigured != nil)
        }
        let wasClosed = closed.load(ordering: .relaxed)
        #expect(wasClosed)
    }

    @Test("refusals thrown to the application's error middleware keep their status, code and Retry-After")
    func thrownRefusals() async throws {
        let tests = VaporMiddlewareTests()
        let device = try SimulatedDevice(authority: VaporMiddlewareTests.authority, appID: VaporMiddlewareTests.appID)
        try await withApp { app in
            // The application's own error rendering: it sees an AbortError with the problem inside.
            app.middleware = Middlewares()
            app.middleware.use(
                ErrorMiddleware { request, error in
                    let abort = error as? AppAttestAbort
                    let response = Response(status: abort?.status ?? .internalServerError)
                    response.headers.replaceOrAdd(name: "X-App-Error", value: abort?.identifier ?? "other")
                    return response
                })
            app.appAttest.use(try Self.service(MemoryAppAttestStore()), purgeInterval: nil, rendersProblems: false)
            try app.register(collection: app.appAttest.routes())
            app.grouped("api").grouped(app.appAttest.middleware(refusals: .thrown))
                .post("order") { request async throws -> String in "ok \(try request.appAttest.requireDevice().counter)"
                }
            try await tests.register(app, device)
            let missing = try await app.testing().sendRequest(.POST, "/api/order")
            #expect(missing.status == .unauthorized)
            #expect(missing.headers.first(name: "X-App-Error") == "missingAssertion")
            let c = try await tests.challenge(app, purpose: "assertion", keyID: device.keyID)
            let headers = try tests.signed(device, path: "/api/order", body: "", challenge: c)
            #expect(try await app.testing().sendRequest(.POST, "/api/order", headers: headers).status == .ok)
            let replay = try await app.testing().sendRequest(.POST, "/api/order", headers: headers)
            #expect(replay.status == .conflict)
            #expect(replay.headers.first(name: "X-App-Error") == "counterNotIncreasing")
        }
    }

    @Test("the next challenge in each response: five requests on one fetched challenge")
    func nextChallenge() async throws {
        let tests = VaporMiddlewareTests()
        let device = try SimulatedDevice(authority: VaporMiddlewareTests.authority, appID: VaporMiddlewareTests.appID)
        try await withApp { app in
            app.appAttest.use(try Self.service(MemoryAppAttestStore()), purgeInterval: nil)
            try app.register(collection: app.appAttest.routes())
            app.grouped("api").grouped(app.appAttest.middleware(freshness: .nextChallengeInResponse))
                .post("order") { request async throws -> String in "ok \(try request.appAttest.requireDevice().counter)"
                }
            try await tests.register(app, device)
            var c = try await tests.challenge(app, purpose: "assertion", keyID: device.keyID)
            for round in 1...5 {
                let response = try await app.testing().sendRequest(
                    .POST, "/api/order", headers: try tests.signed(device, path: "/api/order", body: "", challenge: c))
                #expect(response.status == .ok, "round \(round)")
                let next = try #require(response.headers.first(name: AppAttestHTTPHeaders.nextChallenge.rawName))
                c = try #require(RequestBindingLayout.decodeBase64URL(next))
            }
        }
    }
}
#endif  // Vapor
