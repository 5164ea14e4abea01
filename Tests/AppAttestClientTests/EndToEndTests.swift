#if Service && Vapor
import AppAttest
import AppAttestClient
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Foundation
import Synchronization
import Testing

/// The app side against real servers on 127.0.0.1, through URLSession (FoundationNetworking): a Hummingbird app, a
/// Vapor app, and a backend that calls `appattest serve` (“Protecting your app's requests”).
/// The protected routes' answer: `METHOD target counter`.
func echo(method: String, target: String, counter: UInt32) -> String { "\(method) \(target) \(counter)" }

@Suite("AppAttestClient end to end", .serialized)
struct EndToEndTests {
    static func service(_ store: any AppAttestStore, window: Int) throws -> AppAttestService {
        AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    appID: E2E.appID, environment: .production, trustAnchor: E2E.authority.trustAnchor)),
            store: store, counterPolicy: window > 1 ? .reorderWindow(window) : .strictlyIncreasing)
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
