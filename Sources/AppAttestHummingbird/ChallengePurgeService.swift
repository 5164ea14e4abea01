#if Hummingbird
import AppAttestStore
public import AppAttestLifecycle
public import ServiceLifecycle

/// Runs an `AppAttestChallengePurger` as a swift-service-lifecycle service, so that expired
/// challenges are deleted for as long as the application runs:
///
/// ```swift
/// let app = Application(router: router, services: [AppAttestChallengePurgeService(service: service)])
/// ```
public struct AppAttestChallengePurgeService: Service {
    /// The purger it runs.
    public let purger: AppAttestChallengePurger

    /// - Parameters:
    ///   - service: the service whose store is purged.
    ///   - interval: time between two purges (a minute by default).
    public init(service: AppAttestService, interval: Duration = .seconds(60)) {
        self.purger = AppAttestChallengePurger(service: service, interval: interval)
    }

    /// Purges until the service group shuts down.
    public func run() async throws {
        await cancelWhenGracefulShutdown { await purger.run() }
    }
}
#endif  // Hummingbird
