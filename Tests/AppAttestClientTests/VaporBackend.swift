#if Service && Vapor
import AppAttest
import AppAttestClient
import AppAttestSQLite
import AppAttestStore
@testable import AppAttestVapor
import Foundation
import Synchronization
import Vapor

/// A Vapor app on SQLite: `app.appAttest.routes()` and `app.appAttest.middleware()` on `/api/**`.
final class VaporBackend: Backend {
    let setup: BackendSetup
    private let running = Mutex<Application?>(nil)

    var baseURL: URL { setup.baseURL }

    private init(_ setup: BackendSetup) { self.setup = setup }

    static func start(freshness: AppAttestClientFreshness, window: Int) async throws -> VaporBackend {
        let backend = VaporBackend(try BackendSetup(freshness: freshness, window: window))
        try await backend.run()
        return backend
    }

    private func run() async throws {
        let app = try await Application.make(.testing)
        app.logger.logLevel = .warning
        app.appAttest.use(
            try EndToEndTests.service(try SQLiteAppAttestStore(path: setup.database), window: setup.window))
        try app.register(
            collection: AppAttestRouteCollection(service: app.appAttest.service, rateLimiter: nil))
        let api = app.grouped("api").grouped(
            app.appAttest.middleware(freshness: HummingbirdBackend.serverFreshness(setup.freshness)))
        for method in [HTTPMethod.GET, .POST, .PUT, .DELETE] {
            api.on(method, "**") { request async throws -> String in
                // The target as received (Vapor's own `url.string` shows `%3B` in a path as `;` on Linux).
                echo(
                    method: request.method.rawValue, target: request.requestTarget,
                    counter: try request.appAttest.requireDevice().counter)
            }
        }
        do {
            try await app.asyncBoot()
            try await app.server.start(address: .hostname("127.0.0.1", port: setup.port))
        } catch {
            try? await app.asyncShutdown()
            throw error
        }
        running.withLock { $0 = app }
    }

    func restart() async throws {
        try await stop()
        try await run()
    }

    func stop() async throws {
        guard
            let app = running.withLock({ value in
                defer { value = nil }; return value
            })
        else { return }
        await app.server.shutdown()
        try await app.asyncShutdown()
    }
}
#endif
