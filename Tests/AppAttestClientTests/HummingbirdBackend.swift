#if Service && Vapor
import AppAttest
import AppAttestClient
import AppAttestHTTP
import AppAttestHummingbird
import AppAttestLifecycle
import AppAttestSQLite
import AppAttestStore
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import Synchronization

/// A Hummingbird app on SQLite: `AppAttestRoutes` under `/appattest`, `AppAttestMiddleware` on `/api/**`.
final class HummingbirdBackend: Backend {
    let setup: BackendSetup
    /// The enrollment routes' default rate limit (10 a second, bursts of 20, per address) instead of none.
    let defaultLimits: Bool
    /// The service's fleet policies.
    let policies: AppAttestService.Policies
    private let running = Mutex<(group: ServiceGroup, task: Task<Void, any Error>, store: any AppAttestStore)?>(nil)

    var baseURL: URL { setup.baseURL }

    private init(_ setup: BackendSetup, defaultLimits: Bool, policies: AppAttestService.Policies) {
        self.setup = setup
        self.defaultLimits = defaultLimits
        self.policies = policies
    }

    static func start(
        freshness: AppAttestClientFreshness, window: Int, defaultLimits: Bool = false,
        policies: AppAttestService.Policies = .init()
    ) async throws -> HummingbirdBackend {
        let backend = HummingbirdBackend(
            try BackendSetup(freshness: freshness, window: window), defaultLimits: defaultLimits, policies: policies)
        try await backend.run()
        return backend
    }

    static func serverFreshness(_ freshness: AppAttestClientFreshness) -> AppAttestFreshness {
        switch freshness {
        case .nextChallengeInResponse: .nextChallengeInResponse
        case .timestamp: .timestamp(window: .seconds(60))
        default: .challengePerRequest
        }
    }

    private func run() async throws {
        let store = try SQLiteAppAttestStore(path: setup.database)
        let service = try EndToEndTests.service(store, window: setup.window, policies: policies)
        let router = Router(context: AppAttestRequestContext.self)
        let routes =
            defaultLimits
            ? AppAttestRoutes<AppAttestRequestContext>(service: service)
            : AppAttestRoutes<AppAttestRequestContext>(service: service, rateLimiter: nil)
        router.addRoutes(routes.collection, atPath: "appattest")
        let api = router.group("api").add(
            middleware: AppAttestMiddleware(service: service, freshness: Self.serverFreshness(setup.freshness)))
        // A protected route that redirects: the client must hand the 3xx back, never send its signed header
        // fields to the new target.
        api.get("redirect") { _, context in
            _ = try context.requireIdentity()
            return Response(status: .temporaryRedirect, headers: [.location: "/api/elsewhere"])
        }
        for method in [HTTPRequest.Method.get, .post, .put, .delete] {
            api.on("**", method: method) { request, context in
                echo(
                    method: request.method.rawValue, target: request.head.path ?? "",
                    counter: try context.requireIdentity().counter)
            }
        }
        var logger = Logger(label: "e2e.hummingbird")
        logger.logLevel = .warning
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: setup.port)), logger: logger)
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let task = Task { try await group.run() }
        running.withLock { $0 = (group, task, store) }
        try await E2E.waitUntilUp(baseURL.appendingPathComponent("appattest/none"))
    }

    func restart() async throws {
        try await stop()
        try await run()
    }

    func stop() async throws {
        guard
            let (group, task, store) = running.withLock({ value in
                defer { value = nil }; return value
            })
        else { return }
        await group.triggerGracefulShutdown()
        try await task.value
        await store.close()
    }
}

#endif
