import AppAttestStore
import Foundation
public import Logging

/// Deletes expired challenges at a fixed interval, for as long as its task runs.
///
/// `appattest serve` runs one. An app that uses the adapters runs one beside its server: in Hummingbird, add it to
/// the application's services (it conforms to `Service` there); in Vapor, `app.lifecycle.use(AppAttestPurgeLifecycle(…))`.
/// Without it, expired challenges are refused but stay in the store.
public struct AppAttestChallengePurger: Sendable {
    /// The service whose store is purged.
    public let service: AppAttestService
    /// Time between two purges.
    public let interval: Duration
    /// Where failures are logged (a failed purge is retried at the next interval).
    public let logger: Logger

    /// - Parameters:
    ///   - service: the service whose store is purged.
    ///   - interval: time between two purges (a minute by default).
    ///   - logger: where failures are logged.
    public init(
        service: AppAttestService, interval: Duration = .seconds(60),
        logger: Logger = Logger(label: "appattest", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.service = service
        self.interval = interval
        self.logger = logger
    }

    /// Purges every `interval` until the task is cancelled.
    public func run() async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            do {
                let deleted = try await service.purgeExpiredChallenges()
                if deleted > 0 { logger.debug("expired challenges deleted", metadata: ["count": "\(deleted)"]) }
            } catch {
                logger.warning("purging expired challenges failed", metadata: ["error": "\(error.code)"])
            }
        }
    }
}
