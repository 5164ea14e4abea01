#if Hummingbird
public import AppAttestLifecycle
public import Logging
public import ServiceLifecycle

/// Runs an `AppAttestService`'s background work (`AppAttestService.run(challengePurgeInterval:logger:)`:
/// the group commit of assertion acceptances and the purge of expired challenges) as a swift-service-lifecycle
/// service, for as long as the application runs:
///
/// ```swift
/// let app = Application(router: router, services: [AppAttestBackgroundService(service: service)])
/// ```
///
/// A `ServiceGroup` stops its services in reverse order: list this one before the server (as above, where the
/// application is the group's last service), so that the server stops taking requests before this commits the last
/// acceptances and returns. An acceptance that arrives after it has stopped is a transaction of its own.
public struct AppAttestBackgroundService: Service {
    /// The service whose work it runs.
    public let service: AppAttestService
    /// Time between two purges of expired challenges (nil: never).
    public let challengePurgeInterval: Duration?
    /// Where a failed purge is logged.
    public let logger: Logger

    /// - Parameters:
    ///   - service: the service whose work it runs.
    ///   - challengePurgeInterval: time between two purges of expired challenges (a minute by default; nil: never).
    ///   - logger: where a failed purge is logged.
    public init(
        service: AppAttestService, challengePurgeInterval: Duration? = .seconds(60),
        logger: Logger = Logger(label: "appattest", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.service = service
        self.challengePurgeInterval = challengePurgeInterval
        self.logger = logger
    }

    /// Runs until the service group shuts down.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await service.run(challengePurgeInterval: challengePurgeInterval, logger: logger)
        }
    }
}
#endif  // Hummingbird
