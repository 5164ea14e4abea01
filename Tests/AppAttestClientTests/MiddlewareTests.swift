#if Service && Vapor && ClientMiddleware && ServiceClient
import AppAttestClient
@testable import AppAttestClientMiddleware
import AppAttestTestAppAPI
import AppAttestTesting
import Foundation
import HTTPTypes
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime
import Synchronization
import Testing

/// The app's own API through a client generated from `AppAPI/openapi.yaml`, with `AppAttestClientMiddleware` in
/// front of its transport (AsyncHTTPClient), against the Hummingbird backend.
@Suite("AppAttestClientMiddleware end to end", .serialized)
struct MiddlewareTests {
    /// Delivers the next request of one operation twice and answers the second, as a connection retried beneath
    /// the app does.
    final class Duplicating: ClientMiddleware {
        let operation = Mutex<String?>(nil)

        func intercept(
            _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
            next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
        ) async throws -> (HTTPResponse, HTTPBody?) {
            let duplicate = operation.withLock { operation in
                defer { if operation == operationID { operation = nil } }
                return operation == operationID
            }
            guard duplicate else { return try await next(request, body, baseURL) }
            var bytes: Data?
            if let body { bytes = try await Data(collecting: body, upTo: 1 << 20) }
            let (first, firstBody) = try await next(request, bytes.map { HTTPBody($0) }, baseURL)
            #expect(first.status == .ok, "the first delivery runs the route")
            if let firstBody { _ = try await Data(collecting: firstBody, upTo: 1 << 20) }
            return try await next(request, bytes.map { HTTPBody($0) }, baseURL)
        }
    }

    static func text(_ body: HTTPBody) async throws -> String {
        try await String(collecting: body, upTo: 4096)
    }

    @Test("the request signed is the one the OpenAPI transports send: the base URL's path, then the operation's")
    func signedTarget() throws {
        // What swift-openapi-async-http-client and swift-openapi-urlsession do: the operation's path appended to the
        // base URL's percent-encoded path as it is, and the operation's query.
        for (base, path, expected) in [
            ("https://h.example/v1", "/orders?x=1", "https://h.example/v1/orders?x=1"),
            ("https://h.example/v1/", "/orders", "https://h.example/v1//orders"),
            ("https://h.example", "/a%20b/", "https://h.example/a%20b/"),
            ("https://h.example/api%20v2", "/s?q=a%2Fb", "https://h.example/api%20v2/s?q=a%2Fb"),
        ] {
            let request = HTTPRequest(method: .get, scheme: nil, authority: nil, path: path)
            let signed = try AppAttestClientMiddleware.urlRequest(request, body: nil, baseURL: URL(string: base)!)
            #expect(signed.url?.absoluteString == expected, "\(base) + \(path)")
        }
    }

    @Test("orders, a search with a repeated key, a duplicated GET repaired, a duplicated POST reported")
    func generatedClient() async throws {
        let backend = try await HummingbirdBackend.start(freshness: .nextChallengeInResponse, window: 8)
        do {
            try await run(backend)
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
    }

    func run(_ backend: HummingbirdBackend) async throws {
        let appAttest = AppAttestClient(
            configuration: .init(
                baseURL: backend.baseURL, freshness: .nextChallengeInResponse, concurrency: .reorderWindow(8)),
            keyProvider: SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID))
        let duplicating = Duplicating()
        let api = Client(
            serverURL: backend.baseURL, transport: AsyncHTTPClientTransport(),
            middlewares: [AppAttestClientMiddleware(client: appAttest), duplicating])

        // Orders, four at a time: each signed, each accepted once.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<4 {
                group.addTask {
                    for index in stride(from: lane, to: 20, by: 4) {
                        let output = try await api.createOrder(
                            path: .init(id: "o-\(index)"), body: .json(.init(item: "item \(index)")))
                        let text = try await Self.text(try output.ok.body.plainText)
                        #expect(text.hasPrefix("POST /api/orders/o-\(index) "), "\(text)")
                    }
                }
            }
            try await group.waitForAll()
        }

        // A query with an encoded space and a repeated key, signed as it travels.
        let found = try await Self.text(try await api.search(query: .init(q: "a b", k: ["1", "2"])).ok.body.plainText)
        #expect(found.hasPrefix("GET /api/search?q=a%20b&k=1&k=2 "), "\(found)")

        // A GET delivered twice: the second copy is refused as a replay, the middleware signs it again, once.
        duplicating.operation.withLock { $0 = "search" }
        let again = try await Self.text(try await api.search(query: .init(q: "x")).ok.body.plainText)
        #expect(again.hasPrefix("GET /api/search?q=x "), "\(again)")

        // A POST delivered twice: reported as one that may have run, not sent a third time.
        duplicating.operation.withLock { $0 = "createOrder" }
        do {
            _ = try await api.createOrder(path: .init(id: "twice"), body: .json(.init(item: "once")))
            Issue.record("a duplicated POST was not reported")
        } catch {
            let cause = (error as? ClientError)?.underlyingError as? AppAttestClientError
            #expect(cause?.code == .requestMayHaveRun, "\(error)")
        }
    }
}
#endif
