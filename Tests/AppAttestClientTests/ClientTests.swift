#if Service && Vapor
import AppAttest
import AppAttestWire
@testable import AppAttestClient
import AppAttestStore
import AppAttestTesting
import Foundation
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The client's own behaviour against a scripted transport: what it sends, and how it recovers.
@Suite("AppAttestClient")
struct ClientTests {
    /// Answers the challenge and attestation routes like the adapters do, and protected requests with a script.
    final class ScriptedTransport: AppAttestClientTransport {
        struct State {
            var sent: [URLRequest] = []
            var attestationStatus: [Int] = []
            var protected: [(Int, String?)] = []
            var date: String?
        }
        let state = Mutex(State())

        var sent: [URLRequest] { state.withLock { $0.sent } }

        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            let url = request.url!
            return state.withLock { state in
                state.sent.append(request)
                func answer(_ status: Int, _ body: String, _ type: String = "application/json", date: String? = nil)
                    -> (Data, HTTPURLResponse)
                {
                    var fields = ["Content-Type": type]
                    if let date { fields["Date"] = date }
                    return (
                        Data(body.utf8),
                        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: fields)!
                    )
                }
                switch url.path {
                case "/appattest/challenge":
                    return answer(200, #"{"challenge":"\#(RequestBindingLayoutTesting.challenge)","expiresAt":"x"}"#)
                case "/appattest/attestation":
                    let status = state.attestationStatus.isEmpty ? 200 : state.attestationStatus.removeFirst()
                    return status == 200 ? answer(200, "{}") : answer(status, #"{"code":"storeUnavailable"}"#)
                default:
                    let (status, code) = state.protected.isEmpty ? (200, nil) : state.protected.removeFirst()
                    guard let code else { return answer(status, "ok", "text/plain") }
                    return answer(
                        status, #"{"type":"about:blank","title":"t","status":\#(status),"code":"\#(code)"}"#,
                        "application/problem+json", date: state.date)
                }
            }
        }
    }

    enum RequestBindingLayoutTesting {
        static let challenge = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
    }

    static let base = URL(string: "https://api.example.com")!

    func client(
        _ provider: SimulatedKeyProvider, _ transport: ScriptedTransport,
        freshness: AppAttestClientFreshness = .challengePerRequest,
        storage: any AppAttestKeyStorage = MemoryKeyStorage(), now: @escaping @Sendable () -> Date = { Date() }
    ) -> AppAttestClient {
        var configuration = AppAttestClientConfiguration(baseURL: Self.base, freshness: freshness)
        configuration.initialRetryDelay = 0.001
        configuration.maximumRetryDelay = 0.004
        configuration.now = now
        return AppAttestClient(
            configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport)
    }

    static func provider() -> SimulatedKeyProvider { SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID) }

    @Test("the target is the URL as it travels: encoded path, trailing slash, query")
    func target() throws {
        let cases = [
            ("https://h.example/a%20b/c", "/a%20b/c"), ("https://h.example/a%2Fb", "/a%2Fb"),
            ("https://h.example/dir/", "/dir/"), ("https://h.example", "/"), ("https://h.example/?", "/?"),
            ("https://h.example/s?q=a%20b&x=%2F", "/s?q=a%20b&x=%2F"), ("https://h.example/p;v=1?x#frag", "/p;v=1?x"),
        ]
        for (text, expected) in cases {
            #expect(AppAttestClient.pathAndQuery(of: try #require(URL(string: text))) == expected, "\(text)")
        }
        #expect(AppAttestClient.pathAndQuery(of: try #require(URL(string: "/relative"))) == nil)
    }

    @Test("the client data is the server's canonical binding, byte for byte")
    func binding() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let client = client(provider, transport)
        var request = URLRequest(url: URL(string: "https://api.example.com/api/orders%2F7/?draft=1")!)
        request.httpMethod = "patch"
        request.httpBody = Data("{\"n\":1}".utf8)
        let (_, response) = try await client.data(for: request)
        #expect(response.statusCode == 200)
        let signed = try #require(transport.sent.last)
        let keyID = try #require(signed.value(forHTTPHeaderField: "App-Attest-Key-Id"))
        let assertionText = try #require(signed.value(forHTTPHeaderField: "App-Attest-Assertion"))
        let assertion = try #require(Data(base64Encoded: assertionText))
        let challengeText = try #require(signed.value(forHTTPHeaderField: "App-Attest-Challenge"))
        let challenge = try #require(RequestBindingLayout.decodeBase64URL(challengeText))
        // The server's side: its own layout and verifier, with the key the device holds.
        let device = try #require(await provider.device(keyID))
        let clientData = try AppAttestClientData.request(
            method: "PATCH", pathAndQuery: "/api/orders%2F7/?draft=1", body: Array("{\"n\":1}".utf8),
            challenge: challenge
        ).bytes
        let key = try AttestedPublicKey(x963Representation: device.publicKey)
        let verifier = try AppAttestVerifier(
            configuration: .init(appID: E2E.appID, environment: .production, trustAnchor: E2E.authority.trustAnchor))
        let verified = try verifier.verifyAssertion(
            Array(assertion), clientData: clientData,
            key: AttestedKey(publicKey: key, appID: E2E.appID, environment: .production, counter: 0))
        #expect(verified.counter == 1)
    }

    @Test("featureUnsupported is a typed outcome, and nothing is sent")
    func unsupported() async throws {
        let provider = Self.provider()
        await provider.setSupported(false)
        let transport = ScriptedTransport()
        let client = client(provider, transport)
        #expect(await client.isSupported == false)
        await #expect(throws: AppAttestClientError.self) { try await client.register() }
        do {
            _ = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            Issue.record("no error")
        } catch {
            #expect(error.code == .featureUnsupported)
        }
        #expect(transport.sent.isEmpty)
    }

    @Test("serverUnavailable from Apple and 503 from the server are retried with backoff; the key is kept")
    func backoff() async throws {
        let provider = Self.provider()
        await provider.failNext(.serverUnavailable, times: 2)
        let transport = ScriptedTransport()
        transport.state.withLock { $0.attestationStatus = [503] }
        let storage = MemoryKeyStorage()
        let client = client(provider, transport, storage: storage)
        let keyID = try await client.register()
        #expect(await provider.callCount("generateKey") == 1)
        #expect(await provider.callCount("attestKey") == 4)  // two unavailable, one refused by a 503, one accepted
        #expect(await storage.load() == AppAttestStoredKey(keyID: keyID, registered: true))
    }

    @Test("registration gives up after the configured attempts, with the last error")
    func givesUp() async throws {
        let provider = Self.provider()
        await provider.failNext(.serverUnavailable, times: 10)
        let client = client(provider, ScriptedTransport())
        do {
            _ = try await client.register()
            Issue.record("no error")
        } catch {
            #expect(error.code == .keyProvider)
            #expect(error.providerCode == .serverUnavailable)
        }
        #expect(await provider.callCount("attestKey") == 5)
    }

    @Test("concurrent first requests share one registration")
    func oneRegistration() async throws {
        let provider = Self.provider()
        let client = client(provider, ScriptedTransport())
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<8 {
                group.addTask {
                    try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/\(index)"))).1
                        .statusCode
                }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(await provider.callCount("generateKey") == 1)
        #expect(await provider.callCount("attestKey") == 1)
    }

    @Test("repairable refusals are repaired once: unknown key, used challenge, late counter, skewed clock")
    func repairs() async throws {
        for (code, status) in [("unknownKey", 401), ("challengeUnknown", 409), ("counterNotIncreasing", 409)] {
            let provider = Self.provider()
            let transport = ScriptedTransport()
            transport.state.withLock { $0.protected = [(status, code)] }
            let client = client(provider, transport)
            let (_, response) = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            #expect(response.statusCode == 200, "\(code)")
            let protected = transport.sent.filter { $0.url!.path == "/api/x" }
            #expect(protected.count == 2, "\(code)")
            #expect(await provider.callCount("generateKey") == (code == "unknownKey" ? 2 : 1), "\(code)")
        }
        // The same refusal twice is answered to the app, not retried again.
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [(409, "challengeUnknown"), (409, "challengeUnknown")] }
        let (_, response) = try await client(Self.provider(), transport).data(
            for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
        #expect(response.statusCode == 409)
        // A route's own 401 is the app's business.
        let plain = ScriptedTransport()
        plain.state.withLock { $0.protected = [(401, "notLoggedIn")] }
        let (_, own) = try await client(Self.provider(), plain).data(
            for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
        #expect(own.statusCode == 401)
        #expect(plain.sent.filter { $0.url!.path == "/api/x" }.count == 1)
    }

    @Test("a stale timestamp is retried once on the server's clock (its Date header)")
    func clockSkew() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock {
            $0.protected = [(401, "staleTimestamp")]
            $0.date = "Sun, 06 Nov 1994 08:49:37 GMT"
        }
        let client = client(Self.provider(), transport, freshness: .timestamp)
        let (_, response) = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
        #expect(response.statusCode == 200)
        let stamps = transport.sent.compactMap { $0.value(forHTTPHeaderField: "App-Attest-Timestamp") }.compactMap {
            Int64($0)
        }
        #expect(stamps.count == 2)
        #expect(abs(stamps[1] - 784_111_777_000) < 5_000, "the retry uses the server's clock: \(stamps)")
    }

    @Test("requests that cannot be signed are refused before anything is sent")
    func unsupportedRequests() async throws {
        let transport = ScriptedTransport()
        let client = client(Self.provider(), transport)
        var streamed = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        streamed.httpBodyStream = InputStream(data: Data([1, 2, 3]))
        var badMethod = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        badMethod.httpMethod = "GE T"
        var long = URLRequest(url: URL(string: "https://api.example.com/" + String(repeating: "a", count: 9000))!)
        long.httpMethod = "GET"
        for request in [streamed, badMethod, long] {
            do {
                _ = try await client.data(for: request)
                Issue.record("no error")
            } catch {
                #expect(error.code == .unsupportedRequest)
            }
        }
        #expect(transport.sent.isEmpty)
    }

    @Test("file storage survives a relaunch and is replaced atomically; a corrupt file is an error, not a new key")
    func fileStorage() async throws {
        let url = try E2E.directory().appendingPathComponent("key.json")
        let storage = FileKeyStorage(url: url)
        #expect(try storage.load() == nil)
        try storage.save(AppAttestStoredKey(keyID: "abc", registered: false))
        try storage.save(AppAttestStoredKey(keyID: "abc", registered: true))
        #expect(try FileKeyStorage(url: url).load() == AppAttestStoredKey(keyID: "abc", registered: true))
        try Data("not json".utf8).write(to: url)
        #expect(throws: (any Error).self) { try storage.load() }
        try Data(repeating: 0x20, count: 5000).write(to: url)
        #expect(throws: (any Error).self) { try storage.load() }
        try storage.remove()
        #expect(try storage.load() == nil)
    }
}
#endif
