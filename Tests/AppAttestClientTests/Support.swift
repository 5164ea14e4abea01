#if Service && Vapor
import AppAttest
import AppAttestClient
import AppAttestTesting
import Foundation
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What the end-to-end suites share: the test authority, the app, and a transport that can hold a signed request
/// back instead of sending it.
enum E2E {
    static let authority = try! TestCertificateAuthority(name: "Client end to end")
    static let appID = try! AppID("CLIENT1234.com.example.app")

    /// A session without caches or cookies, so that every request reaches the server.
    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = 16
        return URLSession(configuration: configuration)
    }()

    static func directory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("appattest-client-\(UUID())")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Waits until `url` answers (any status).
    static func waitUntilUp(_ url: URL) async throws {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(60) {
            if (try? await session.data(from: url)) != nil { return }
            try await Task.sleep(for: .milliseconds(25))
        }
        throw URLError(.cannotConnectToHost)
    }
}

/// Sends through URLSession, or, once ``holdNext()`` was called, keeps the next signed request and answers 599
/// without sending it: the test then sends it, altered or not, itself. Once ``duplicateNext()`` was called, it
/// delivers the next signed request twice, as a connection retried beneath the app does, and answers the second.
final class HoldingTransport: AppAttestClientTransport {
    let inner = URLSessionClientTransport(session: E2E.session)
    private struct State {
        var hold = false
        var duplicate = false
        var busyAfterDelivery = false
        var loseAttestationAnswer = false
        /// Signed requests to this path wait this long before they are sent (a slow network path).
        var delayed: (path: String, seconds: Double)?
        var held: URLRequest?
        /// The status of every delivery of a signed request, an attestation or a challenge, by path.
        var deliveries: [String: [Int]] = [:]
    }
    private let state = Mutex(State())

    func holdNext() { state.withLock { $0.hold = true } }
    func duplicateNext() { state.withLock { $0.duplicate = true } }
    /// Delivers the next signed request, then answers it with the server's 429 `rateLimited` (`retry`, no wait), as
    /// a proxy that sent it again after a timeout hands back the second delivery's answer.
    func answerBusyAfterNextDelivery() { state.withLock { $0.busyAfterDelivery = true } }
    /// Delivers the next attestation, then loses the server's answer (the connection drops).
    func loseNextAttestationAnswer() { state.withLock { $0.loseAttestationAnswer = true } }
    var held: URLRequest? { state.withLock { $0.held } }
    func deliveries(_ path: String) -> [Int] { state.withLock { $0.deliveries[path] ?? [] } }
    /// Holds back every signed request to `path` for `seconds` before sending it.
    func delay(_ path: String, seconds: Double) { state.withLock { $0.delayed = (path, seconds) } }

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let lose = state.withLock { state -> Bool in
            guard request.url!.path.hasSuffix("/attestation"), state.loseAttestationAnswer else { return false }
            state.loseAttestationAnswer = false
            return true
        }
        if lose {
            let (_, response) = try await inner.send(request)
            #expect(response.statusCode == 200, "the attestation whose answer is lost")
            throw URLError(.networkConnectionLost)
        }
        let signed = request.value(forHTTPHeaderField: "App-Attest-Assertion") != nil
        let (hold, duplicate) = state.withLock { state -> (Bool, Bool) in
            guard signed else { return (false, false) }
            defer { (state.hold, state.duplicate) = (false, false) }
            if state.hold { state.held = request }
            return (state.hold, state.duplicate)
        }
        if hold {
            return (Data(), HTTPURLResponse(url: request.url!, statusCode: 599, httpVersion: nil, headerFields: nil)!)
        }
        if signed, let delayed = state.withLock({ $0.delayed }), request.url!.path == delayed.path {
            try await Task.sleep(for: .seconds(delayed.seconds))
        }
        let busy =
            signed
            && state.withLock { state in
                defer { state.busyAfterDelivery = false }
                return state.busyAfterDelivery
            }
        var answer = try await inner.send(request)
        if busy {
            record(request, answer.1.statusCode)
            let fields = ["Content-Type": "application/problem+json", "Retry-After": "0"]
            let problem = """
                {"action":"retry","code":"rateLimited","status":429,"title":"Too many requests",\
                "type":"https://github.com/swift-app-attest/swift-app-attest/blob/main/README.md#errors"}
                """
            return (
                Data(problem.utf8),
                HTTPURLResponse(url: request.url!, statusCode: 429, httpVersion: "HTTP/1.1", headerFields: fields)!
            )
        }
        if duplicate {
            record(request, answer.1.statusCode)
            answer = try await inner.send(request)
        }
        if signed || request.url!.path.hasSuffix("/attestation") || request.url!.path.hasSuffix("/challenge") {
            record(request, answer.1.statusCode)
        }
        return answer
    }

    private func record(_ request: URLRequest, _ status: Int) {
        state.withLock { $0.deliveries[request.url!.path, default: []].append(status) }
    }
}

/// Where a backend listens and what it runs with: a free port, a fresh SQLite file, a freshness mode, a window.
struct BackendSetup: Sendable {
    let port: Int
    let database: String
    let freshness: AppAttestClientFreshness
    let window: Int

    init(freshness: AppAttestClientFreshness, window: Int) throws {
        port = TestPorts.free()
        database = try E2E.directory().appendingPathComponent("app.sqlite").path
        self.freshness = freshness
        self.window = window
    }

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
}

/// A server the app talks to, which can be stopped and started again on the same port and database.
protocol Backend: Sendable {
    /// Where the app's requests go.
    var baseURL: URL { get }
    /// Stops the server and starts it again on the same port and database.
    func restart() async throws
    /// Stops it.
    func stop() async throws
}

/// The cases of “Protecting your app's requests” that every server must pass with the real client.
struct EndToEnd {
    let backend: any Backend
    let freshness: AppAttestClientFreshness
    let concurrency: AppAttestClientConcurrency
    /// The protected routes' prefix on the backend (each answers `METHOD target counter`).
    let prefix: String

    func client(_ provider: SimulatedKeyProvider, storage: any AppAttestKeyStorage, transport: HoldingTransport)
        -> AppAttestClient
    {
        var configuration = AppAttestClientConfiguration(
            baseURL: backend.baseURL, freshness: freshness, concurrency: concurrency)
        configuration.initialRetryDelay = 0.01
        configuration.maximumRetryDelay = 0.05
        return AppAttestClient(
            configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport)
    }

    func request(_ method: String, _ target: String, body: String? = nil) throws -> URLRequest {
        var request = URLRequest(url: try #require(URL(string: backend.baseURL.absoluteString + prefix + target)))
        request.httpMethod = method
        request.httpBody = body.map { Data($0.utf8) }
        return request
    }

    func run() async throws {
        let provider = SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID)
        let storage = FileKeyStorage(url: try E2E.directory().appendingPathComponent("key.json"))
        let transport = HoldingTransport()
        let client = client(provider, storage: storage, transport: transport)

        // Register; the attestation's answer is lost, the app posts the same attestation again (a key is attested
        // once) and the server answers as the first time.
        transport.loseNextAttestationAnswer()
        let keyID = try await client.register()
        #expect(try storage.load() == AppAttestStoredKey(keyID: keyID, registered: true))
        #expect(await provider.callCount("attestKey") == 1)

        // 100 protected requests, 8 in flight at once: every one accepted.
        let statuses = try await withThrowingTaskGroup(of: [Int].self) { group in
            for lane in 0..<8 {
                let requests = try (0..<100).filter { $0 % 8 == lane }.map { index in
                    try request("POST", "/orders/\(index)", body: "{\"order\":\(index)}")
                }
                group.addTask {
                    var statuses: [Int] = []
                    for request in requests { statuses.append(try await client.data(for: request).1.statusCode) }
                    return statuses
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(statuses.count == 100)
        #expect(
            statuses.allSatisfy { $0 == 200 }, "statuses: \(Dictionary(grouping: statuses) { $0 }.mapValues(\.count))")
        #expect(await provider.device(keyID)?.counter == 100)

        // Targets as they travel: a space, encoded delimiters (slash, semicolon, percent), a matrix parameter, a
        // trailing slash, a query with a repeated key and an empty value.
        for (method, target) in [
            ("POST", "/with%20space/x"), ("POST", "/a%2Fb"), ("POST", "/a%3Bb"), ("POST", "/100%25/x"),
            ("GET", "/m;v=1/x"), ("GET", "/trailing/"), ("GET", "/search?q=a%20b&page=2"),
            ("GET", "/list?k=1&k=2&empty=&k=3"), ("DELETE", "/orders/7?force=true"),
        ] {
            let (data, response) = try await client.data(for: try request(method, target))
            #expect(response.statusCode == 200, "\(method) \(target): \(String(decoding: data, as: UTF8.self))")
            #expect(String(decoding: data, as: UTF8.self).hasPrefix("\(method) \(prefix)\(target) "))
        }

        // A signed request held back: altered in method, path, query or body it is refused; as signed it passes
        // once; replayed it is refused.
        transport.holdNext()
        let (_, heldResponse) = try await client.data(for: try request("POST", "/orders/held?tip=1", body: "{\"a\":1}"))
        #expect(heldResponse.statusCode == 599)
        let held = try #require(transport.held)
        func altered(_ change: (inout URLRequest) -> Void) -> URLRequest {
            var copy = held
            change(&copy)
            return copy
        }
        let alterations = [
            ("method", altered { $0.httpMethod = "PUT" }),
            (
                "path",
                altered {
                    $0.url = URL(string: held.url!.absoluteString.replacingOccurrences(of: "held", with: "other"))
                }
            ),
            (
                "query",
                altered {
                    $0.url = URL(string: held.url!.absoluteString.replacingOccurrences(of: "tip=1", with: "tip=2"))
                }
            ),
            ("body", altered { $0.httpBody = Data("{\"a\":2}".utf8) }),
        ]
        for (what, request) in alterations {
            let (data, response) = try await transport.inner.send(request)
            #expect(
                [401, 409].contains(response.statusCode),
                "altered \(what): \(response.statusCode) \(String(decoding: data, as: UTF8.self))")
        }
        let (_, original) = try await transport.inner.send(held)
        #expect(original.statusCode == 200, "the held request as signed")
        let (replayData, replay) = try await transport.inner.send(held)
        #expect([401, 409].contains(replay.statusCode), "replay: \(String(decoding: replayData, as: UTF8.self))")

        // A POST delivered twice beneath the app: its route runs once, the second copy is refused as a replay, and
        // the client does not send it a third time: it says the request may have run.
        let duplicated = try request("POST", "/orders/delivered-twice", body: "{}")
        transport.duplicateNext()
        do {
            _ = try await client.data(for: duplicated)
            Issue.record("a duplicated POST was not reported")
        } catch {
            #expect(error.code == .requestMayHaveRun, "\(error)")
            #expect(["challengeUnknown", "counterReplayed", "counterNotIncreasing"].contains(error.problemCode))
        }
        let postDeliveries = transport.deliveries(prefix + "/orders/delivered-twice")
        #expect(postDeliveries.count == 2 && postDeliveries.first == 200, "\(postDeliveries)")
        // A GET delivered twice is signed again once and answered.
        transport.duplicateNext()
        let (_, get) = try await client.data(for: try request("GET", "/orders/delivered-twice"))
        #expect(get.statusCode == 200)
        #expect(transport.deliveries(prefix + "/orders/delivered-twice").filter { $0 == 200 }.count == 3)

        // The key is lost (reinstall, restore): the next request attests a new one and passes.
        await provider.loseKeys()
        let (_, afterLoss) = try await client.data(for: try request("POST", "/orders/after-loss"))
        #expect(afterLoss.statusCode == 200)
        let newKeyID = try #require(await client.registeredKeyID)
        #expect(newKeyID != keyID)
        #expect(await provider.callCount("attestKey") == 2)
        let afterLossStored = try #require(try storage.load())
        #expect(afterLossStored.keyID == newKeyID && afterLossStored.registered)
        #expect(afterLossStored.history?.discards.count == 1, "the lost key counts against the day's budget")

        // The server restarts: the app goes on with its key, without a new attestation.
        try await backend.restart()
        for index in 0..<3 {
            let (data, response) = try await client.data(for: try request("POST", "/orders/after-restart-\(index)"))
            #expect(response.statusCode == 200, "after restart: \(String(decoding: data, as: UTF8.self))")
        }
        #expect(await provider.callCount("attestKey") == 2)

        // The app relaunches: a new client on the same storage keeps the key.
        let relaunched = self.client(provider, storage: storage, transport: transport)
        let (_, afterRelaunch) = try await relaunched.data(for: try request("GET", "/orders/after-relaunch"))
        #expect(afterRelaunch.statusCode == 200)
        #expect(await relaunched.registeredKeyID == newKeyID)
        #expect(await provider.callCount("attestKey") == 2)
    }
}
#endif
