#if Vapor
import AppAttestStore
public import AppAttestLifecycle
import Synchronization
public import Vapor

/// Runs an `AppAttestChallengePurger` from boot to shutdown, so that expired challenges are
/// deleted for as long as the application runs:
///
/// ```swift
/// app.lifecycle.use(AppAttestPurgeLifecycle(service: service))
/// ```
public final class AppAttestPurgeLifecycle: LifecycleHandler, Sendable {
    /// The purger it runs.
    public let purger: AppAttestChallengePurger
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// - Parameters:
    ///   - service: the service whose store is purged.
    ///   - interval: time between two purges (a minute by default).
    public init(service: AppAttestService, interval: Duration = .seconds(60)) {
        self.purger = AppAttestChallengePurger(service: service, interval: interval)
    }

    /// Starts purging.
    public func didBoot(_ application: Application) throws {
        let purger = self.purger
        task.withLock { task in
            task?.cancel()
            task = Task { await purger.run() }
        }
    }

    /// Stops purging.
    public func shutdown(_ application: Application) {
        task.withLock { task in
            task?.cancel()
            task = nil
        }
    }
}
#endif  // Vapor
