#if Service && Vapor
import AppAttest
import AppAttestClient
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Foundation
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app side against real servers on 127.0.0.1, through URLSession (FoundationNetworking): a Hummingbird app, a
/// Vapor app, and a backend that calls `appattest serve` (“Protecting your app's requests”).
/// The protected routes' answer: `METHOD target counter`.
func echo(method: String, target: String, counter: UInt32) -> String { "\(method) \(target) \(counter)" }

@Suite("AppAttestClient end to end", .serialized)
struct EndToEndTests {
    static func service(
        _ store: any AppAttestStore, window: Int, policies: AppAttestService.Policies = .init()
    ) throws -> AppAttestService {
        AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    appID: E2E.appID, environment: .production, trustAnchor: E2E.authority.trustAnchor)),
            store: store, counterPolicy: window > 1 ? .reorderWindow(window) : .strictlyIncreasing,
            policies: policies)
    }

    @Test("the server's attestation budget and the client meet: 429 on the challenge, the wait, one attestation")
    func attestationBudget() async throws {
        // One attestation challenge per 5 s, no burst beyond it: of two devices that start together, one is told to
        // wait about 5 s (both passing would need them 5 s apart).
        let backend = try await HummingbirdBackend.start(
            freshness: .challengePerRequest, window: 1,
            policies: .init(defaultPolicy: .init(attestationsPerSecond: 0.2, attestationBurst: 1)))
        func client(_ provider: SimulatedKeyProvider, _ transport: HoldingTransport) -> AppAttestClient {
            AppAttestClient(
                configuration: AppAttestClientConfiguration(baseURL: backend.baseURL), keyProvider: provider,
                transport: transport)
        }
        let providers = [
            SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID),
            SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID),
        ]
        let transport = HoldingTransport()
        let statuses: [Int]
        do {
            let request = URLRequest(url: backend.baseURL.appendingPathComponent("api/budget"))
            statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for provider in providers {
                    group.addTask { try await client(provider, transport).data(for: request).1.statusCode }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
        #expect(statuses == [200, 200])
        // One device's attestation challenge was refused for the budget, before it asked Apple; after the wait it
        // got one, attested its key once and was accepted. Each device attested one key, once.
        #expect(transport.deliveries("/appattest/challenge").filter { $0 == 429 }.count == 1)
        #expect(transport.deliveries("/appattest/attestation") == [200, 200])
        for provider in providers {
            let attestKey = await provider.callCount("attestKey"), generateKey = await provider.callCount("generateKey")
            #expect(attestKey == 1 && generateKey == 1)
        }
    }

    @Test(
        "Hummingbird, strictly increasing counters, serialized client",
        arguments: [AppAttestClientFreshness.challengePerRequest, .nextChallengeInResponse, .timestamp])
    func hummingbird(_ freshness: AppAttestClientFreshness) async throws {
        let backend = try await HummingbirdBackend.start(freshness: freshness, window: 1)
        do {
            try await EndToEnd(backend: backend, freshness: freshness, concurrency: .serialized, prefix: "/api").run()
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
    }

    @Test(
        "a POST whose retry answer was a duplicate delivery's is sent again as signed: refused as a replay, it runs once",
        arguments: [AppAttestClientFreshness.challengePerRequest, .nextChallengeInResponse, .timestamp])
    func busyDuplicate(_ freshness: AppAttestClientFreshness) async throws {
        let backend = try await HummingbirdBackend.start(freshness: freshness, window: 1)
        let transport = HoldingTransport()
        let client = AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: backend.baseURL, freshness: freshness),
            keyProvider: SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID), transport: transport)
        do {
            var post = URLRequest(url: backend.baseURL.appendingPathComponent("api/orders"))
            post.httpMethod = "POST"
            post.httpBody = Data(#"{"item":1}"#.utf8)
            // The first delivery runs; the answer the app gets says to come back.
            transport.answerBusyAfterNextDelivery()
            do {
                let (_, response) = try await client.data(for: post)
                Issue.record("the POST was sent again and answered \(response.statusCode): it ran twice")
            } catch {
                #expect(error.code == .requestMayHaveRun, "\(error)")
            }
            #expect(transport.deliveries("/api/orders") == [200, 409])
            // A GET, which may run twice, is signed again and answered.
            transport.answerBusyAfterNextDelivery()
            let (_, response) = try await client.data(
                for: URLRequest(url: backend.baseURL.appendingPathComponent("api/items")))
            #expect(response.statusCode == 200)
            #expect(transport.deliveries("/api/items") == [200, 200])
            // The POST's key and turn are as before: the next POST runs.
            let (_, next) = try await client.data(for: post)
            #expect(next.statusCode == 200)
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
    }

    #if ServiceClient
    @Test(
        "appattest serve behind the app's backend (typed client), a reorder window of 64, eight in flight",
        arguments: [AppAttestClientFreshness.challengePerRequest, .nextChallengeInResponse, .timestamp])
    func serve(_ freshness: AppAttestClientFreshness) async throws {
        let backend = try await ServeBackend.start(freshness: freshness)
        do {
            try await EndToEnd(
                backend: backend, freshness: freshness, concurrency: .reorderWindow(8), prefix: "/api"
            ).run()
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
    }
    #endif

    @Test("the default transport hands a redirect back instead of sending the signed request elsewhere")
    func redirect() async throws {
        let backend = try await HummingbirdBackend.start(freshness: .challengePerRequest, window: 1)
        let client = AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: backend.baseURL),
            keyProvider: SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID))
        let response: HTTPURLResponse
        do {
            response = try await client.data(
                for: URLRequest(url: backend.baseURL.appendingPathComponent("api/redirect"))
            )
            .1
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
        #expect(response.statusCode == 307)
        #expect(response.value(forHTTPHeaderField: "Location") == "/api/elsewhere")
    }

    @Test(
        "many requests at once stay within the server's default limits and its counter window",
        .timeLimit(.minutes(2)))
    func concurrency() async throws {
        func client(
            _ backend: HummingbirdBackend, _ concurrency: AppAttestClientConcurrency, _ transport: HoldingTransport
        )
            -> AppAttestClient
        {
            var configuration = AppAttestClientConfiguration(
                baseURL: backend.baseURL, freshness: backend.setup.freshness, concurrency: concurrency)
            configuration.initialRetryDelay = 0.05
            return AppAttestClient(
                configuration: configuration,
                keyProvider: SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID), transport: transport)
        }
        func send(_ client: AppAttestClient, _ backend: HummingbirdBackend, count: Int, method: String = "GET")
            async throws -> [Int]
        {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<count {
                    var request = URLRequest(url: backend.baseURL.appendingPathComponent("api/c/\(index)"))
                    request.httpMethod = method
                    group.addTask { try await client.data(for: request).1.statusCode }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        // A challenge per request, the enrollment routes limited to bursts of 20 per address: 20 at once (22
        // challenge and attestation calls with the registration) wait for Retry-After instead of failing; with a
        // reorder window of 64 the client still holds at most 16 challenges, the server's limit per key.
        for (concurrency, window) in [(AppAttestClientConcurrency.serialized, 1), (.reorderWindow(64), 64)] {
            let backend = try await HummingbirdBackend.start(
                freshness: .challengePerRequest, window: window, defaultLimits: true)
            let statuses = try await send(client(backend, concurrency, HoldingTransport()), backend, count: 20)
            try await backend.stop()
            #expect(statuses == Array(repeating: 200, count: 20), "\(concurrency)")
        }
        // Next challenges, 200 at once, eight in flight on a window of 8, one path slow on the network: the client
        // signs nothing more than 7 counters past the slow one until it is answered, so that no POST is refused
        // for arriving late.
        let backend = try await HummingbirdBackend.start(freshness: .nextChallengeInResponse, window: 8)
        let transport = HoldingTransport()
        transport.delay("/api/c/0", seconds: 0.5)
        let statuses = try await send(
            client(backend, .reorderWindow(8), transport), backend, count: 200, method: "POST")
        try await backend.stop()
        #expect(statuses == Array(repeating: 200, count: 200))
    }

    @Test(
        "Vapor, a reorder window of 64, eight requests in flight",
        arguments: [AppAttestClientFreshness.nextChallengeInResponse, .timestamp])
    func vapor(_ freshness: AppAttestClientFreshness) async throws {
        let backend = try await VaporBackend.start(freshness: freshness, window: 64)
        do {
            try await EndToEnd(backend: backend, freshness: freshness, concurrency: .reorderWindow(8), prefix: "/api")
                .run()
        } catch {
            try await backend.stop()
            throw error
        }
        try await backend.stop()
    }
}

#endif
