#if Hummingbird
import AppAttest
import AppAttestWire
import AppAttestHTTP
import AppAttestHummingbird
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@Suite("Hummingbird routes and middleware")
struct MiddlewareTests {
    static let authority = try! TestCertificateAuthority(name: "Hummingbird")
    static let appID = try! AppID("HBIRD12345.com.example.app")

    /// The routes at /appattest and a protected POST /api/order, on `store`.
    static func makeRouter(
        store: any AppAttestStore = MemoryAppAttestStore(), rateLimiter: AppAttestRateLimiter? = nil
    ) throws -> Router<AppAttestRequestContext> {
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(appID: appID, environment: .production, trustAnchor: authority.trustAnchor)),
            store: store)
        let router = Router(context: AppAttestRequestContext.self)
        router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
        router.group("api").add(
            middleware: AppAttestMiddleware(service: service, maximumBodySize: 4096, rateLimiter: rateLimiter)
        )
        .post("order") { _, context in "ok counter \(try context.requireIdentity().counter)" }
        return router
    }

    func makeApp() throws -> (some ApplicationProtocol, SimulatedDevice) {
        (
            Application(router: try Self.makeRouter()),
            try SimulatedDevice(authority: Self.authority, appID: Self.appID)
        )
    }

    struct Challenge: Decodable { var challenge: String }

    func challenge(_ client: some TestClientProtocol, purpose: String, keyID: KeyID? = nil) async throws -> [UInt8] {
        let key = keyID.map { ",\"keyId\":\"\($0.base64EncodedString)\"" } ?? ""
        return try await client.execute(
            uri: "/appattest/challenge", method: .post, body: ByteBuffer(string: "{\"purpose\":\"\(purpose)\"\(key)}")
        ) { response in
            #expect(response.status == .ok)
            let decoded = try JSONDecoder().decode(Challenge.self, from: Data(buffer: response.body))
            return RequestBindingLayout.decodeBase64URL(decoded.challenge)!
        }
    }

    func register(_ client: some TestClientProtocol, _ device: SimulatedDevice) async throws {
        let challenge = try await challenge(client, purpose: "attestation")
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Date()
        let object = try device.attest(challenge: challenge, options)
        let body = """
            {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
            "challenge":"\(RequestBindingLayout.base64URL(challenge))"}
            """
        try await client.execute(uri: "/appattest/attestation", method: .post, body: ByteBuffer(string: body)) {
            response in
            #expect(response.status == .ok, "\(String(buffer: response.body))")
        }
    }

    /// Headers for a request signed by `device`.
    func signed(_ device: SimulatedDevice, path: String, body: String, challenge: [UInt8], signedPath: String? = nil)
        throws -> HTTPFields
    {
        let clientData = try AppAttestClientData.request(
            method: "POST", pathAndQuery: signedPath ?? path, body: Array(body.utf8), challenge: challenge
        ).bytes
        let assertion = try device.assert(clientData: clientData)
        var headers = HTTPFields()
        headers[HTTPField.Name(AppAttestHTTPHeaders.keyID.rawName)!] = device.keyID.base64EncodedString
        headers[HTTPField.Name(AppAttestHTTPHeaders.assertion.rawName)!] = Data(assertion).base64EncodedString()
        headers[HTTPField.Name(AppAttestHTTPHeaders.challenge.rawName)!] = RequestBindingLayout.base64URL(challenge)
        return headers
    }

    /// Sends one signed `POST /api/order` per expected status, each with a fresh challenge (signed for
    /// `signedPath` when given), and checks the statuses in order; a 429 must carry a Retry-After.
    func sendOrders(
        _ client: some TestClientProtocol, _ device: SimulatedDevice, expecting statuses: [HTTPResponse.Status],
        signedPath: String? = nil
    ) async throws {
        for expected in statuses {
            let c = try await challenge(client, purpose: "assertion", keyID: device.keyID)
            let headers = try signed(device, path: "/api/order", body: "", challenge: c, signedPath: signedPath)
            try await client.execute(uri: "/api/order", method: .post, headers: headers) { response in
                #expect(response.status == expected)
                if expected == .tooManyRequests {
                    #expect(response.headers[.retryAfter].flatMap(Int.init) ?? 0 >= 1)
                }
            }
        }
    }

    /// The problem's code; its action is checked against the documented one on the way.
    func code(_ response: TestResponse) -> String? {
        let document = (try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]) ?? [:]
        #expect(DocumentedProblemActions.isDocumented(document), "undocumented action: \(document)")
        return document["code"] as? String
    }

    @Test("register, then a protected request passes once; its replay is 409")
    func flow() async throws {
        let (app, device) = try makeApp()
        try await app.test(.router) { client in
            try await register(client, device)
            let c = try await challenge(client, purpose: "assertion", keyID: device.keyID)
            let headers = try signed(device, path: "/api/order", body: "{\"item\":1}", challenge: c)
            try await client.execute(
                uri: "/api/order", method: .post, headers: headers, body: ByteBuffer(string: "{\"item\":1}")
            ) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body) == "ok counter 1")
            }
            try await client.execute(
                uri: "/api/order", method: .post, headers: headers, body: ByteBuffer(string: "{\"item\":1}")
            ) { response in
                #expect(response.status == .conflict)
                #expect(response.headers[.contentType] == "application/problem+json")
            }
        }
    }

    @Test("an assertion is bound to its path and body; missing, malformed and oversized requests are refused")
    func bindings() async throws {
        let (app, device) = try makeApp()
        try await app.test(.router) { client in
            try await register(client, device)
            // Signed for another path.
            var c = try await challenge(client, purpose: "assertion", keyID: device.keyID)
            var headers = try signed(device, path: "/api/order", body: "{}", challenge: c, signedPath: "/api/refund")
            try await client.execute(uri: "/api/order", method: .post, headers: headers, body: ByteBuffer(string: "{}"))
            { response in
                #expect(response.status == .unauthorized)
                #expect(code(response) == "signatureInvalid")
            }
            // Another body.
            c = try await challenge(client, purpose: "assertion", keyID: device.keyID)
            headers = try signed(device, path: "/api/order", body: "{\"item\":1}", challenge: c)
            try await client.execute(
                uri: "/api/order", method: .post, headers: headers, body: ByteBuffer(string: "{\"item\":2}")
            ) { response in
                #expect(response.status == .unauthorized)
            }
            try await client.execute(uri: "/api/order", method: .post, body: ByteBuffer(string: "{}")) { response in
                #expect(response.status == .unauthorized)
                #expect(code(response) == "missingAssertion")
            }
            headers[HTTPField.Name(AppAttestHTTPHeaders.keyID.rawName)!] = "<script>"
            try await client.execute(uri: "/api/order", method: .post, headers: headers, body: ByteBuffer(string: "{}"))
            { response in
                #expect(response.status == .badRequest)
                #expect(!String(buffer: response.body).contains("<script>"))
            }
            c = try await challenge(client, purpose: "assertion", keyID: device.keyID)
            let large = String(repeating: "x", count: 5000)
            headers = try signed(device, path: "/api/order", body: large, challenge: c)
            try await client.execute(
                uri: "/api/order", method: .post, headers: headers, body: ByteBuffer(string: large)
            ) { response in
                #expect(response.status == .contentTooLarge)
            }
            try await client.execute(
                uri: "/appattest/challenge", method: .post, body: ByteBuffer(string: "{\"purpose\":1}")
            ) { response in
                #expect(response.status == .badRequest)
            }
        }
    }
}

@Suite("Hummingbird: store down and rate limits")
struct MiddlewareFailureTests {
    @Test("a store that cannot answer gives 503 storeUnavailable, never a verdict")
    func storeDown() async throws {
        let router = try MiddlewareTests.makeRouter(store: UnavailableAppAttestStore())
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        try await Application(router: router).test(.router) { client in
            try await client.execute(
                uri: "/appattest/challenge", method: .post, body: ByteBuffer(string: #"{"purpose":"attestation"}"#)
            ) { response in
                #expect(response.status == .serviceUnavailable)
                #expect(MiddlewareTests().code(response) == "storeUnavailable")
            }
            let headers = try MiddlewareTests().signed(device, path: "/api/order", body: "", challenge: Array(0..<32))
            try await client.execute(uri: "/api/order", method: .post, headers: headers) { response in
                #expect(response.status == .serviceUnavailable)
                #expect(!String(buffer: response.body).contains("connection refused"))
            }
        }
    }

    @Test("beyond the per-key rate the middleware answers 429 with Retry-After")
    func rateLimited() async throws {
        let router = try MiddlewareTests.makeRouter(
            rateLimiter: AppAttestRateLimiter(ratePerSecond: 0.001, burst: 1))
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        let tests = MiddlewareTests()
        try await Application(router: router).test(.router) { client in
            try await tests.register(client, device)
            try await tests.sendOrders(client, device, expecting: [.ok, .tooManyRequests])
        }
    }
}
#endif  // Hummingbird

#if Hummingbird
@Suite("Hummingbird: the per-key rate limit")
struct MiddlewareRateLimitTests {
    @Test("assertions that fail verification do not charge the key's bucket")
    func forgedRequestsDoNotCharge() async throws {
        let router = try MiddlewareTests.makeRouter(
            rateLimiter: AppAttestRateLimiter(ratePerSecond: 0.001, burst: 1))
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        let tests = MiddlewareTests()
        try await Application(router: router).test(.router) { client in
            try await tests.register(client, device)
            // Someone who knows the keyId but not the key: signed for another path, so verification fails.
            try await tests.sendOrders(
                client, device, expecting: [.unauthorized, .unauthorized, .unauthorized], signedPath: "/other")
            // The device itself is not rate-limited by them; its own second request is.
            try await tests.sendOrders(client, device, expecting: [.ok, .tooManyRequests])
        }
    }

    @Test("concurrent assertions of one key pass no more often than its bucket allows: the charge is atomic")
    func concurrentRequestsCharged() async throws {
        // A reorder window, so that concurrent assertions are all valid whatever order they arrive in.
        let store = MemoryAppAttestStore()
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    appID: MiddlewareTests.appID, environment: .production,
                    trustAnchor: MiddlewareTests.authority.trustAnchor)),
            store: store, counterPolicy: .reorderWindow(64))
        let operations = AppAttestHTTPOperations(
            service: service, rateLimiter: AppAttestRateLimiter(ratePerSecond: 0.001, burst: 2))
        let device = try SimulatedDevice(authority: MiddlewareTests.authority, appID: MiddlewareTests.appID)
        let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation).challenge
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Date()
        _ = try await service.registerAttestation(
            try device.attest(challenge: challenge, options), keyID: device.keyID, challenge: challenge)
        let now = Date()
        let requests = try (0..<12).map { _ in
            try FreshnessTests.timestamped(
                device, path: "/order", milliseconds: Int64(now.timeIntervalSince1970 * 1000))
        }
        let statuses = await withTaskGroup(of: HTTPResponse.Status.self) { group in
            for fields in requests {
                group.addTask {
                    let request = HTTPRequest(
                        method: .post, scheme: "http", authority: "x", path: "/order", headerFields: fields)
                    do throws(AppAttestProblem) {
                        _ = try await operations.authenticate(
                            request, body: [UInt8](), freshness: .timestamp(window: .seconds(60)), now: now)
                        return .ok
                    } catch {
                        return error.status
                    }
                }
            }
            var statuses: [HTTPResponse.Status] = []
            for await status in group { statuses.append(status) }
            return statuses
        }
        #expect(statuses.filter { $0 == .ok }.count == 2, "\(statuses)")
        #expect(statuses.filter { $0 == .tooManyRequests }.count == 10, "\(statuses)")
    }

    @Test("the documented setup counts each request against its client's address, not one bucket for everyone")
    func callersByAddress() async throws {
        let router = try MiddlewareTests.makeRouter()
        // What AppAttestRoutes counts a request against, by default.
        router.get("caller") { _, context in AppAttestRoutes<AppAttestRequestContext>.defaultCaller(context) }
        // Behind a proxy, the address it forwards (the DocC article's form).
        let proxied = AppAttestRoutes<AppAttestRequestContext>(
            service: AppAttestService(
                verifier: try AppAttestVerifier(configuration: .init(apps: [MiddlewareTests.appID: [.production]])),
                store: MemoryAppAttestStore()),
            caller: { request, context in
                request.headers[.init("X-Real-IP")!].map(AppAttestEnrollmentRoutes.caller(ipAddress:))
                    ?? AppAttestRoutes<AppAttestRequestContext>.defaultCaller(context)
            })
        router.get("proxied") { request, context in proxied.caller(request, context) }
        try await Application(router: router).test(.live) { client in
            try await client.execute(uri: "/caller", method: .get) { response in
                let caller = String(buffer: response.body)
                #expect(caller == "127.0.0.1" || caller == "0:0:0:0::/64", "not one bucket for every client: \(caller)")
            }
            try await client.execute(
                uri: "/proxied", method: .get, headers: [.init("X-Real-IP")!: "2001:db8:5:5::9"]
            ) { response in
                #expect(String(buffer: response.body) == "2001:db8:5:5::/64")
            }
        }
    }
}
#endif  // Hummingbird
