#if Vapor
import AppAttestStore
public import AppAttestLifecycle
import Synchronization
public import Vapor

/// Runs an `AppAttestService`'s background work (the group commit of assertion acceptances and the purge of expired
/// challenges) from boot to shutdown. `app.appAttest.use(_:)` installs one; install it yourself only when you use
/// the service without it:
///
/// ```swift
/// app.lifecycle.use(AppAttestBackgroundLifecycle(service: service))
/// ```
///
/// Vapor's lifecycle handlers have no run loop of their own, so the work runs in a task started at boot and
/// cancelled (and awaited: the last acceptances are committed) at shutdown.
public final class AppAttestBackgroundLifecycle: LifecycleHandler, Sendable {
    /// The service whose work it runs.
    public let service: AppAttestService
    /// Time between two purges of expired challenges (nil: never).
    public let challengePurgeInterval: Duration?
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// - Parameters:
    ///   - service: the service whose work it runs.
    ///   - challengePurgeInterval: time between two purges of expired challenges (a minute by default; nil: never).
    public init(service: AppAttestService, challengePurgeInterval: Duration? = .seconds(60)) {
        self.service = service
        self.challengePurgeInterval = challengePurgeInterval
    }

    /// Starts the work.
    public func didBoot(_ application: Application) throws {
        start(application).map { $0.cancel() }
    }

    /// Starts the work, once a previous run has ended.
    public func didBootAsync(_ application: Application) async throws {
        if let previous = stop() {
            previous.cancel()
            await previous.value
        }
        start(application)?.cancel()
    }

    /// Stops the work (the acceptances it took are still committed, by a task no longer awaited).
    public func shutdown(_ application: Application) {
        stop()?.cancel()
    }

    /// Stops the HTTP server (Vapor runs the lifecycle handlers before it stops the server; stopping it twice is
    /// harmless), then the work, once the acceptances it took are committed: no request arrives meanwhile.
    public func shutdownAsync(_ application: Application) async {
        await application.server.shutdown()
        let running = stop()
        running?.cancel()
        await running?.value
    }

    /// Starts a run; the one it replaces, if any.
    private func start(_ application: Application) -> Task<Void, Never>? {
        let service = self.service
        let interval = challengePurgeInterval
        let logger = application.logger
        return task.withLock { task in
            defer { task = Task { await service.run(challengePurgeInterval: interval, logger: logger) } }
            return task
        }
    }

    private func stop() -> Task<Void, Never>? {
        task.withLock { task in
            defer { task = nil }
            return task
        }
    }
}
#endif  // Vapor
