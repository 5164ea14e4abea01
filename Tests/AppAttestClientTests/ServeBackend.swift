#if Service && Vapor && ServiceClient
import AppAttestClient
import AppAttestLifecycle
import AppAttestServer
import AppAttestServiceClient
import AppAttestTesting
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import OpenAPIRuntime
import ServiceLifecycle
import Synchronization

/// `appattest serve` on SQLite with a reorder window of 64, and in front of it the app's own backend (Hummingbird),
/// which answers the app and asks the service through the typed client (`AppAttestServiceClient`): challenges and
/// attestations are passed on, and each protected request is verified with its parts (method, target, body hash,
/// challenge or timestamp) before the route answers. Restarting restarts the service; the backend stays up.
final class ServeBackend: Backend {
    static let token = "token-of-the-orders-backend-01"

    let servePort: Int
    let backendPort: Int
    let directory: URL
    let freshness: AppAttestClientFreshness
    private let serve = Mutex<(server: AppAttestServer, group: ServiceGroup, task: Task<Void, any Error>)?>(nil)
    private let backend = Mutex<(group: ServiceGroup, task: Task<Void, any Error>)?>(nil)

    var baseURL: URL { URL(string: "http://127.0.0.1:\(backendPort)")! }
    var serveURL: URL { URL(string: "http://127.0.0.1:\(servePort)")! }

    private init(servePort: Int, backendPort: Int, directory: URL, freshness: AppAttestClientFreshness) {
        self.servePort = servePort
        self.backendPort = backendPort
        self.directory = directory
        self.freshness = freshness
    }

    static func start(freshness: AppAttestClientFreshness) async throws -> ServeBackend {
        let backend = ServeBackend(
            servePort: TestPorts.free(), backendPort: TestPorts.free(), directory: try E2E.directory(),
            freshness: freshness)
        let root = Data(E2E.authority.rootCertificate).base64EncodedString(options: [.lineLength64Characters])
        try "-----BEGIN CERTIFICATE-----\n\(root)\n-----END CERTIFICATE-----\n".write(
            to: backend.directory.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        try await backend.startServe()
        try await backend.startBackend()
        return backend
    }

    private var logger: Logger {
        var logger = Logger(label: "e2e.serve")
        logger.logLevel = .warning
        return logger
    }

    private func startServe() async throws {
        var configuration = ServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = servePort
        configuration.database = "sqlite:\(directory.path)/serve.sqlite"
        configuration.apps = [.init(appId: E2E.appID.rawValue, environments: ["production"])]
        configuration.tokens = [.init(name: "orders-backend", token: Self.token)]
        configuration.tokenFile = directory.appendingPathComponent("token").path
        configuration.testingRootCertificate = directory.appendingPathComponent("root.pem").path
        configuration.counterReorderWindow = 64
        configuration.rateLimit = nil
        let server = try await AppAttestServer.open(configuration: configuration, logger: logger)
        let group = ServiceGroup(
            configuration: .init(services: server.makeServices().map { .init(service: $0) }, logger: logger))
        let task = Task { try await group.run() }
        serve.withLock { $0 = (server, group, task) }
        try await E2E.waitUntilUp(serveURL.appendingPathComponent("ping"))
    }

    private func startBackend() async throws {
        let service = Client(serverURL: serveURL, token: Self.token)
        let router = Router()
        let freshness = freshness
        router.post("appattest/challenge") { request, _ -> Response in
            struct Body: Decodable {
                var purpose: String
                var keyId: String?
            }
            let body = try JSONDecoder().decode(
                Body.self, from: Data(buffer: try await request.body.collect(upTo: 4096)))
            let purpose: Components.Schemas.ChallengeRequest.PurposePayload =
                body.purpose == "attestation" ? .attestation : .assertion
            switch try await service.issueChallenge(body: .json(.init(purpose: purpose, keyId: body.keyId))) {
            case .ok(let ok):
                return try Self.json(["challenge": try ok.body.json.challenge])
            case .default(let statusCode, let problem): return try Self.problem(statusCode, problem)
            }
        }
        router.post("appattest/attestation") { request, _ -> Response in
            let body = try JSONDecoder().decode(
                Components.Schemas.AttestationRequest.self,
                from: Data(buffer: try await request.body.collect(upTo: 128 * 1024)))
            switch try await service.registerAttestation(body: .json(body)) {
            case .ok(let ok): return try Self.json(["keyId": try ok.body.json.keyId])
            case .default(let statusCode, let problem): return try Self.problem(statusCode, problem)
            }
        }
        let api = router.group("api")
        for method in [HTTPRequest.Method.get, .post, .put, .delete] {
            api.on("**", method: method) { request, _ -> Response in
                let body = try await request.body.collect(upTo: 1 << 20)
                let fields = request.headers
                guard let keyID = fields[HTTPField.Name("App-Attest-Key-Id")!],
                    let assertion = fields[HTTPField.Name("App-Attest-Assertion")!]
                else { return Response(status: .unauthorized) }
                let target = request.head.path ?? ""
                let bound = Components.Schemas.AssertionRequest.RequestPayload(
                    method: request.method.rawValue, pathAndQuery: target,
                    bodySha256: Data(SHA256.hash(data: Data(buffer: body))).base64EncodedString(),
                    challenge: fields[HTTPField.Name("App-Attest-Challenge")!],
                    timestamp: fields[HTTPField.Name("App-Attest-Timestamp")!].flatMap { Int64($0) })
                switch try await service.verifyAssertion(
                    body: .json(
                        .init(
                            keyId: keyID, assertion: assertion,
                            issueNextChallenge: freshness == .nextChallengeInResponse, request: bound)))
                {
                case .ok(let ok):
                    // This backend's serve enforces: a report-only answer would be a bug.
                    guard case .Key(let key) = try ok.body.json else { return Response(status: .internalServerError) }
                    var headers = HTTPFields()
                    if let next = key.nextChallenge { headers[HTTPField.Name("App-Attest-Next-Challenge")!] = next }
                    return Response(
                        status: .ok, headers: headers,
                        body: .init(
                            byteBuffer: ByteBuffer(
                                string: echo(
                                    method: request.method.rawValue, target: target, counter: UInt32(key.counter)))))
                case .default(let statusCode, let problem): return try Self.problem(statusCode, problem)
                }
            }
        }
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: backendPort)), logger: logger)
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let task = Task { try await group.run() }
        backend.withLock { $0 = (group, task) }
        try await E2E.waitUntilUp(baseURL.appendingPathComponent("none"))
    }

    static func json(_ value: [String: String]) throws -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(
            status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(value))))
    }

    /// The service's refusal, passed on to the app as it came (status and problem document), so that the app's
    /// client can repair what it can.
    static func problem(_ statusCode: Int, _ response: Components.Responses.Problem) throws -> Response {
        try problem(statusCode, try response.body.applicationProblemJson)
    }

    static func problem(_ statusCode: Int, _ problem: Components.Schemas.Problem) throws -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/problem+json"
        return Response(
            status: .init(code: statusCode), headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(problem))))
    }

    func restart() async throws {
        try await stopServe()
        try await startServe()
    }

    private func stopServe() async throws {
        guard
            let (server, group, task) = serve.withLock({ value in
                defer { value = nil }; return value
            })
        else { return }
        await group.triggerGracefulShutdown()
        try await task.value
        await server.close()
    }

    func stop() async throws {
        try await stopServe()
        guard
            let (group, task) = backend.withLock({ value in
                defer { value = nil }; return value
            })
        else { return }
        await group.triggerGracefulShutdown()
        try await task.value
    }
}
#endif
