#if Service
import AppAttest
import AppAttestWire
import AppAttestServer
import AppAttestStore
import AppAttestTesting
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import ServiceLifecycle
import Testing

/// The databases the service is tested on. PostgreSQL needs `APPATTEST_POSTGRES_URL` (`.ci/run` sets it); without
/// it that case is disabled locally and fails under CI.
enum Database: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    var testDescription: String { rawValue }
    static var postgresURL: String? { ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_URL"] }
    static var available: [Database] {
        postgresURL == nil && ProcessInfo.processInfo.environment["CI"] == nil ? [.sqlite] : allCases
    }
}

/// Helpers shared by the service tests.
enum Fixture {
    static let authority = try! TestCertificateAuthority(name: "Serve")
    static let appID = try! AppID("SERVE12345.com.example.app")
    static let tokenA = "token-of-orders-service-0001"
    static let tokenB = "token-of-orders-service-0002"

    static func directory() throws -> String {
        let path = NSTemporaryDirectory() + "appattest-serve-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func pem(_ der: [UInt8], at path: String) throws {
        let body = Data(der).base64EncodedString(options: [.lineLength64Characters])
        try "-----BEGIN CERTIFICATE-----\n\(body)\n-----END CERTIFICATE-----\n".write(
            toFile: path, atomically: true, encoding: .utf8)
    }

    /// A configuration on a fresh SQLite file that trusts the test authority, with two caller tokens.
    static func configuration(directory: String, database: Database = .sqlite) throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        switch database {
        case .sqlite: configuration.database = "sqlite:\(directory)/serve.sqlite"
        case .postgres:
            configuration.database = try #require(
                Database.postgresURL, "APPATTEST_POSTGRES_URL is not set: run .ci/postgres.sh start and export it")
        }
        configuration.apps = [.init(appId: appID.rawValue, environments: ["production"])]
        configuration.tokens = [.init(name: "orders", token: tokenA), .init(name: "orders-next", token: tokenB)]
        try pem(authority.rootCertificate, at: "\(directory)/root.pem")
        configuration.testingRootCertificate = "\(directory)/root.pem"
        configuration.maximumBodyBytes = 8192
        configuration.tokenFile = "\(directory)/token"
        // The whole suite shares two cores and many servers: the probe's own deadline is not what these test.
        configuration.readinessTimeoutSeconds = 10
        return configuration
    }

    /// Opens a server on a fresh configuration (changed by `change`), runs `body` against its router, and closes it
    /// whatever happens.
    @discardableResult
    static func withServer<T: Sendable>(
        database: Database = .sqlite, _ change: (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (AppAttestServer, any TestClientProtocol) async throws -> T
    ) async throws -> T {
        let directory = try directory()
        var configuration = try configuration(directory: directory, database: database)
        change(&configuration)
        let server = try await AppAttestServer.open(configuration: configuration)
        do {
            let result = try await server.withSupportingServices {
                try await server.makeApplication().test(.router) { client in try await body(server, client) }
            }
            await server.close()
            return result
        } catch {
            await server.close()
            throw error
        }
    }

    /// Opens a server listening on a free port of 127.0.0.1 (its configuration changed by `change`), runs `body` with
    /// the port, then shuts the server down gracefully, whatever happens.
    static func withListeningServer(
        _ change: (inout ServerConfiguration) -> Void, _ body: (Int) async throws -> Void
    ) async throws {
        var configuration = try configuration(directory: try directory())
        configuration.port = TestPorts.free()
        change(&configuration)
        let server = try await AppAttestServer.open(configuration: configuration)
        let group = ServiceGroup(
            configuration: .init(services: server.makeServices().map { .init(service: $0) }, logger: server.logger))
        let running = Task { try await group.run() }
        var failure: (any Error)?
        do { try await body(configuration.port) } catch { failure = error }
        await group.triggerGracefulShutdown()
        try? await running.value
        await server.close()
        if let failure { throw failure }
    }

    static func headers(_ token: String? = tokenA) -> HTTPFields {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        if let token { headers[.authorization] = "Bearer \(token)" }
        return headers
    }

    /// The answer's JSON; a problem document's action is checked against the documented one on the way.
    static func json(_ response: TestResponse) -> [String: Any] {
        let document = (try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]) ?? [:]
        #expect(DocumentedProblemActions.isDocumented(document), "undocumented action: \(document)")
        return document
    }
}

@Suite("appattest serve")
struct ServerTests {
    typealias F = Fixture

    func post(_ client: some TestClientProtocol, _ path: String, _ body: String, token: String? = F.tokenA)
        async throws -> TestResponse
    {
        try await client.execute(uri: path, method: .post, headers: F.headers(token), body: ByteBuffer(string: body))
    }

    func register(_ client: some TestClientProtocol, _ device: SimulatedDevice, userId: String? = nil) async throws {
        let issued = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
        #expect(issued.status == .ok)
        let challenge = try #require(F.json(issued)["challenge"] as? String)
        let object = try device.attest(challenge: try #require(RequestBindingLayout.decodeBase64URL(challenge)))
        let user = userId.map { #","userId":"\#($0)""# } ?? ""
        let registered = try await post(
            client, "/v1/attestations",
            """
            {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
            "challenge":"\(challenge)"\(user)}
            """)
        #expect(registered.status == .ok, "\(String(buffer: registered.body))")
        #expect(F.json(registered)["counter"] as? Int == 0)
    }

    @Test("a keyId in any spelling names its key: Base64URL or percent-encoded Base64 in a path, Base64URL in JSON")
    func keyIDSpellings() async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let standard = device.keyID.base64EncodedString
        let url = RequestBindingLayout.base64URL(device.keyID.rawValue)
        try await F.withServer { _, client in
            try await register(client, device, userId: nil)
            let encoded = try #require(standard.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
            for spelling in [url, encoded, url + "="] {
                let response = try await client.execute(
                    uri: "/v1/keys/" + spelling, method: .get, headers: F.headers())
                #expect(response.status == .ok, "\(spelling): \(String(buffer: response.body))")
                #expect(F.json(response)["keyId"] as? String == standard)
            }
            let issued = try await post(client, "/v1/challenges", #"{"purpose":"assertion","keyId":"\#(url)"}"#)
            #expect(issued.status == .ok, "\(String(buffer: issued.body))")
        }
    }

    @Test(
        "challenge → attestation → assertions (bound request and raw client data) → replay 409 → revoke → 401",
        arguments: Database.available)
    func flow(database: Database) async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let keyPath = "/v1/keys/" + RequestBindingLayout.base64URL(device.keyID.rawValue)
        try await F.withServer(database: database) { _, client in
            try await register(client, device, userId: "user-7")

            // The canonical binding: the server builds the client data from the request's parts.
            let issued = try await post(
                client, "/v1/challenges", #"{"purpose":"assertion","keyId":"\#(device.keyID.base64EncodedString)"}"#)
            let challengeText = try #require(F.json(issued)["challenge"] as? String)
            let challenge = try #require(RequestBindingLayout.decodeBase64URL(challengeText))
            let requestBody = Array(#"{"amount":5}"#.utf8)
            let clientData = try AppAttestClientData.request(
                method: "POST", pathAndQuery: "/orders?x=1", body: requestBody, challenge: challenge
            ).bytes
            let assertion = Data(try device.assert(clientData: clientData)).base64EncodedString()
            let bound = """
                {"keyId":"\(device.keyID.base64EncodedString)","assertion":"\(assertion)","request":{"method":"POST",\
                "pathAndQuery":"/orders?x=1","bodySha256":"\(Data(AppAttestSHA256.hash(requestBody)).base64EncodedString())",\
                "challenge":"\(challengeText)"}}
                """
            var response = try await post(client, "/v1/assertions/verify", bound)
            #expect(response.status == .ok, "\(String(buffer: response.body))")
            #expect(F.json(response)["counter"] as? Int == 1)
            #expect(F.json(response)["userId"] as? String == "user-7")
            // The same request again: the challenge is spent.
            response = try await post(client, "/v1/assertions/verify", bound)
            #expect(response.status == .conflict)
            #expect(F.json(response)["code"] as? String == "counterNotIncreasing")

            // Raw client data, no challenge: the counter alone stops replays. The second token works too.
            let raw = Array("order 17".utf8)
            let second = """
                {"keyId":"\(device.keyID.base64EncodedString)",\
                "assertion":"\(Data(try device.assert(clientData: raw)).base64EncodedString())",\
                "clientData":"\(Data(raw).base64EncodedString())"}
                """
            response = try await post(client, "/v1/assertions/verify", second, token: F.tokenB)
            #expect(response.status == .ok)
            #expect(F.json(response)["counter"] as? Int == 2)
            response = try await post(client, "/v1/assertions/verify", second)
            #expect(response.status == .conflict)
            #expect(F.json(response)["code"] as? String == "counterNotIncreasing")

            response = try await client.execute(uri: keyPath, method: .get, headers: F.headers())
            #expect(F.json(response)["counter"] as? Int == 2)
            #expect(F.json(response)["appId"] as? String == F.appID.rawValue)

            response = try await post(client, keyPath + "/revoke", "")
            #expect(response.status == .ok)
            let third = """
                {"keyId":"\(device.keyID.base64EncodedString)",\
                "assertion":"\(Data(try device.assert(clientData: raw)).base64EncodedString())",\
                "clientData":"\(Data(raw).base64EncodedString())"}
                """
            response = try await post(client, "/v1/assertions/verify", third)
            #expect(response.status == .unauthorized)
            #expect(F.json(response)["code"] as? String == "keyRevoked")
            response = try await client.execute(uri: keyPath, method: .get, headers: F.headers())
            #expect(F.json(response)["revokedAt"] != nil)

            // Metrics count what happened, by operation, result and code.
            response = try await client.execute(uri: "/metrics", method: .get)
            let metrics = String(buffer: response.body)
            #expect(
                metrics.contains(#"appattest_verifications_total{operation="assertion",result="accepted",code="ok"} 2"#)
            )
            #expect(metrics.contains(#"code="counterNotIncreasing"} 2"#))
            #expect(metrics.contains(#"code="keyRevoked"} 1"#))
            #expect(metrics.contains("appattest_operation_duration_seconds_bucket"))
        }
    }

    @Test("refusals: no or wrong token 401, malformed 400, unknown key 404, oversized 413, foreign object 401")
    func refusals() async throws {
        try await F.withServer { _, client in
            var response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: nil)
            #expect(response.status == .unauthorized)
            #expect(response.headers[.wwwAuthenticate] == "Bearer")
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: F.tokenA + "x")
            #expect(response.status == .unauthorized)
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: "")
            #expect(response.status == .unauthorized)

            response = try await post(client, "/v1/assertions/verify", #"{"keyId":"<b>","assertion":1}"#)
            #expect(response.status == .badRequest)
            #expect(!String(buffer: response.body).contains("<b>"))
            response = try await post(client, "/v1/assertions/verify", "not json")
            #expect(response.status == .badRequest)
            let both =
                #"{"keyId":"\#(Data(count: 32).base64EncodedString())","assertion":"oA==","clientData":"AA==","request":{"method":"GET","pathAndQuery":"/","bodySha256":"AA==","challenge":"AA"}}"#
            response = try await post(client, "/v1/assertions/verify", both)
            #expect(response.status == .badRequest)

            response = try await client.execute(
                uri: "/v1/keys/" + RequestBindingLayout.base64URL([UInt8](repeating: 7, count: 32)), method: .get,
                headers: F.headers())
            #expect(response.status == .notFound)
            response = try await client.execute(uri: "/v1/keys/notakey", method: .get, headers: F.headers())
            #expect(response.status == .badRequest)

            response = try await post(client, "/v1/challenges", String(repeating: " ", count: 9000))
            #expect(response.status == .contentTooLarge)
            #expect(F.json(response)["code"] as? String == "bodyTooLarge")

            // An attestation from a device of another authority fails the chain.
            let stranger = try SimulatedDevice(authority: try TestCertificateAuthority(name: "Other"), appID: F.appID)
            let issued = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
            let challenge = try #require(F.json(issued)["challenge"] as? String)
            let object = try stranger.attest(challenge: RequestBindingLayout.decodeBase64URL(challenge)!)
            response = try await post(
                client, "/v1/attestations",
                """
                {"keyId":"\(stranger.keyID.base64EncodedString)",\
                "attestationObject":"\(Data(object).base64EncodedString())","challenge":"\(challenge)"}
                """)
            #expect(response.status == .unauthorized)
            #expect(F.json(response)["code"] as? String == "certificateChain")

            // Unauthenticated routes.
            response = try await client.execute(uri: "/health", method: .get)
            #expect(response.status == .ok)
            response = try await client.execute(uri: "/ping", method: .get)
            #expect(String(buffer: response.body) == "pong")
        }
    }

    @Test("tokens rotate without a restart: the new set applies at once, an invalid set is refused whole")
    func tokenRotation() async throws {
        let tokenC = "token-of-orders-service-0003"
        try await F.withServer { server, client in
            var response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: F.tokenA)
            #expect(response.status == .ok)
            #expect(try server.reloadTokens([.init(name: "orders-2027", token: tokenC)]) == ["orders-2027"])
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: F.tokenA)
            #expect(response.status == .unauthorized)
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: tokenC)
            #expect(response.status == .ok)
            #expect(throws: ServerConfigurationError.self) {
                try server.reloadTokens([.init(name: "x", token: "short"), .init(name: "y", token: F.tokenB)])
            }
            #expect(try server.reloadTokens([]) == ["orders-2027"])
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: F.tokenB)
            #expect(response.status == .unauthorized)
        }
    }

    @Test("a reloaded configuration without tokens accepts only the generated token: emptying the list revokes them")
    func reloadWithoutTokens() async throws {
        let tokenFile = try F.directory() + "/generated-token"
        try await F.withServer({ $0.tokenFile = tokenFile }) { server, client in
            var reloaded = server.configuration
            reloaded.tokens = []
            #expect(try server.reload(reloaded) == ["generated"])
            var response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: F.tokenA)
            #expect(response.status == .unauthorized)
            let generated = try String(contentsOfFile: tokenFile, encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: generated)
            #expect(response.status == .ok)
        }
    }

    @Test("challengesTotal bounds the unused challenges reserved for no key, whichever caller asks")
    func challengesTotal() async throws {
        try await F.withServer({
            $0.challengesTotal = 3
            $0.challengesPerCaller = 2
        }) { _, client in
            var codes: [String?] = []
            for token in [F.tokenA, F.tokenA, F.tokenB, F.tokenB] {
                let response = try await post(client, "/v1/challenges", #"{"purpose":"assertion"}"#, token: token)
                codes.append(response.status == .ok ? "ok" : F.json(response)["code"] as? String)
            }
            #expect(codes == ["ok", "ok", "ok", "tooManyChallenges"])
        }
    }

    @Test("beyond a caller's rate: 429 with Retry-After; callers are limited separately")
    func rateLimit() async throws {
        try await F.withServer({ $0.rateLimit = .init(requestsPerSecond: 0.01, burst: 2) }) { _, client in
            for _ in 0..<2 {
                let response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
                #expect(response.status == .ok)
            }
            var response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
            #expect(response.status == .tooManyRequests)
            #expect(F.json(response)["code"] as? String == "rateLimited")
            #expect((Int(response.headers[.retryAfter] ?? "") ?? 0) >= 1)
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: F.tokenB)
            #expect(response.status == .ok)
        }
    }

    @Test("the served OpenAPI document is the committed one; without App IDs operations answer 503 notConfigured")
    func openAPIAndNotConfigured() async throws {
        let committed = try Data(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("Sources/AppAttestServer/openapi.yaml"))
        try await F.withServer({
            $0.apps = []
            $0.tokens = []
        }) { server, client in
            // No token configured: one was generated into the token file, readable by the owner only.
            let tokenFile = server.configuration.tokenFile
            let token = try String(contentsOfFile: tokenFile, encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let attributes = try FileManager.default.attributesOfItem(atPath: tokenFile)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
            var response = try await client.execute(uri: "/openapi.yaml", method: .get)
            #expect(Data(buffer: response.body) == committed)
            response = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: token)
            #expect(response.status == .serviceUnavailable)
            #expect(F.json(response)["code"] as? String == "notConfigured")
        }
        // Every path of the router is in the document.
        let text = String(decoding: committed, as: UTF8.self)
        for path in [
            "/health:", "/ping:", "/metrics:", "/v1/challenges:", "/v1/attestations:", "/v1/assertions/verify:",
            "/v1/keys/{keyId}:", "/v1/keys/{keyId}/revoke:", "/v1/keys/{keyId}/receipt/refresh:",
        ] {
            #expect(text.contains(path), "\(path)")
        }
    }
}
#endif  // Service

#if Service
/// The freshness modes and the reorder window through `appattest serve`, on both databases.
@Suite("appattest serve: freshness and the reorder window")
struct ServerFreshnessTests {
    typealias F = Fixture
    let tests = ServerTests()

    func verify(_ client: some TestClientProtocol, _ device: SimulatedDevice, _ bound: String, next: Bool = false)
        async throws -> TestResponse
    {
        let clientDataJSON = #"{"keyId":"\#(device.keyID.base64EncodedString)","issueNextChallenge":\#(next),"#
        return try await tests.post(client, "/v1/assertions/verify", clientDataJSON + bound)
    }

    static let emptyHash = Data(AppAttestSHA256.hash([UInt8]())).base64EncodedString()

    @Test(
        "next challenge with each answer; timestamps within the window; 8 out of order with counterReorderWindow 8",
        arguments: Database.available)
    func modes(database: Database) async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        try await F.withServer(database: database, { $0.counterReorderWindow = 8 }) { _, client in
            try await tests.register(client, device)
            // The next challenge: one fetched, then each answer carries the next.
            let issued = try await tests.post(
                client, "/v1/challenges", #"{"purpose":"assertion","keyId":"\#(device.keyID.base64EncodedString)"}"#)
            var challengeText = try #require(F.json(issued)["challenge"] as? String)
            for round in 1...5 {
                let challenge = try #require(RequestBindingLayout.decodeBase64URL(challengeText))
                let clientData = try AppAttestClientData.request(
                    method: "GET", pathAndQuery: "/feed", body: [UInt8](), challenge: challenge
                ).bytes
                let assertion = Data(try device.assert(clientData: clientData)).base64EncodedString()
                let response = try await verify(
                    client, device,
                    #""assertion":"\#(assertion)","request":{"method":"GET","pathAndQuery":"/feed","bodySha256":"\#(Self.emptyHash)","challenge":"\#(challengeText)"}}"#,
                    next: true)
                #expect(response.status == .ok, "round \(round): \(String(buffer: response.body))")
                challengeText = try #require(F.json(response)["nextChallenge"] as? String)
            }
            // Timestamps: now is accepted, ten minutes ago is stale.
            func timestamped(_ milliseconds: Int64) throws -> String {
                let clientData = try AppAttestClientData.request(
                    method: "GET", pathAndQuery: "/feed", bodySHA256: AppAttestSHA256.hash([UInt8]()),
                    timestampMilliseconds: milliseconds
                ).bytes
                let assertion = Data(try device.assert(clientData: clientData)).base64EncodedString()
                return
                    #""assertion":"\#(assertion)","request":{"method":"GET","pathAndQuery":"/feed","bodySha256":"\#(Self.emptyHash)","timestamp":\#(milliseconds)}}"#
            }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            var response = try await verify(client, device, try timestamped(now))
            #expect(response.status == .ok, "\(String(buffer: response.body))")
            response = try await verify(client, device, try timestamped(now - 600_000))
            #expect(response.status == .unauthorized)
            #expect(F.json(response)["code"] as? String == "staleTimestamp")
            // Eight generated in order, delivered in reverse: all accepted under the window, each once.
            let batch = try (0..<8).map { try timestamped(now + Int64($0)) }
            for body in batch.reversed() {
                response = try await verify(client, device, body)
                #expect(response.status == .ok, "\(String(buffer: response.body))")
            }
            for body in batch {
                response = try await verify(client, device, body)
                #expect(response.status == .conflict)
            }
        }
    }
}
#endif  // Service

#if Service
import AppAttestHTTP
import AppAttestLifecycle
@testable import AppAttestServer

/// The hot path writes its answer without JSONEncoder; it must be byte for byte what JSONEncoder writes.
@Suite("appattest serve: the answer's JSON")
struct KeyDocumentTests {
    @Test("the direct JSON equals JSONEncoder's, with and without the optional fields and with awkward strings")
    func sameAsEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let publicKey = try AttestedPublicKey(
            x963Representation: P256.Signing.PrivateKey().publicKey.x963Representation)
        for userID in [
            nil, "alice", "quote\" back\\slash / tab\t nl\n bell\u{07} é 🚀", String(repeating: "x", count: 256),
            String(String.UnicodeScalarView((0..<0x20).compactMap(Unicode.Scalar.init) + ["\u{7F}"])),
        ] {
            for revoked in [nil, Date(timeIntervalSince1970: 1_700_000_123.9)] {
                let record = KeyRecord(
                    key: AttestedKey(
                        publicKey: publicKey, appID: try AppID("ABCDE12345.com.example.app"), environment: .development,
                        counter: 4_000_000_000),
                    userID: userID, receipt: [1], riskMetric: revoked == nil ? nil : 7,
                    createdAt: Date(timeIntervalSince1970: 946_684_800),
                    receiptUpdatedAt: Date(timeIntervalSince1970: 2_000_000_000.5),
                    revokedAt: revoked)
                var response = AppAttestKeyDocument(record)
                if revoked != nil {
                    response.nextChallenge = "abc-_"
                    response.nextChallengeExpiresAt = Date(timeIntervalSince1970: 1_800_000_000)
                }
                #expect(
                    response.json == Array(try encoder.encode(response)),
                    "\(String(decoding: response.json, as: UTF8.self))")
            }
        }
    }

    /// The shape problem documents had when JSONEncoder wrote them.
    struct EncodedProblem: Encodable {
        var type: String
        var title: String
        var status: Int
        var code: String
        var action: String
    }

    @Test("problem documents are written directly, byte for byte what JSONEncoder writes")
    func problemDocuments() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var problems: [AppAttestProblem] = [
            .bodyTooLarge, .missingAssertion, .staleTimestamp, .malformed("Expected keyId and assertion"),
            .rateLimited(retryAfter: 3), AppAttestServer.notConfigured, AppAttestServer.unknownKey,
        ]
        for title in [
            "quote\" back\\slash / tab\t nl\n é 🚀",
            String(String.UnicodeScalarView((0..<0x20).compactMap(Unicode.Scalar.init) + ["\u{7F}"])),
        ] {
            problems.append(AppAttestProblem(status: .badRequest, code: "code/\"x\"", title: title))
        }
        for problem in problems {
            let expected = EncodedProblem(
                type: "https://github.com/swift-app-attest/swift-app-attest/blob/main/README.md#errors",
                title: problem.title, status: problem.status.code, code: problem.code, action: problem.action.rawValue)
            #expect(
                problem.document == Array(try encoder.encode(expected)),
                "\(String(decoding: problem.document, as: UTF8.self))")
        }
    }

    @Test("every service refusal carries the action the README documents for its code, and a retry its wait")
    func problemActions() {
        let codes: [AppAttestServiceError.Code] = [
            .challengeUnknown, .challengeExpired, .challengeMismatch, .keyAlreadyRegistered, .keyBoundToAnotherUser,
            .unknownKey, .keyRevoked, .counterReplayed, .verificationFailed, .storeUnavailable, .environmentNotAllowed,
            .tooManyChallenges, .malformedBinding, .invalidUserID, .attestationBudgetExhausted,
        ]
        var problems = codes.map { AppAttestProblem(AppAttestServiceError($0, "test")) }
        problems += [AppAttestError.Code.counterNotIncreasing, .signatureInvalid, .malformed, .appIdMismatch].map {
            AppAttestProblem(
                AppAttestServiceError(.verificationFailed, "test", verification: AppAttestError($0, "test")))
        }
        problems += [.staleTimestamp, .missingAssertion, .bodyTooLarge, .rateLimited(retryAfter: 2)]
        for problem in problems {
            #expect(problem.action.rawValue == DocumentedProblemActions.action(for: problem.code), "\(problem.code)")
            #expect((problem.action == .retry) == (problem.retryAfter != nil), "\(problem.code)")
        }
    }
}
#endif  // Service
