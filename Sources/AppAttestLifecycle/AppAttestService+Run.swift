import AppAttestStore
import Foundation
public import Logging

extension AppAttestService {
    /// The service's background work, for as long as the task runs: the group commit of assertion acceptances
    /// (many assertions share one transaction under load) and, every `challengePurgeInterval`, the deletion of
    /// expired challenges and of key events past ``eventRetention``. Returns when the task is cancelled, once every acceptance it took is committed.
    ///
    /// Run it beside your server: Hummingbird's `AppAttestBackgroundService` runs it as a service of the
    /// application's `ServiceGroup`, Vapor's `app.appAttest.use(_:)` from boot to shutdown, `appattest serve` always.
    /// The service works without it, more slowly under load: each acceptance is then a transaction of its own, and
    /// expired challenges are refused but stay in the store until ``purgeExpiredChallenges()`` is called.
    /// - Parameters:
    ///   - challengePurgeInterval: time between two purges of expired challenges, at least a second (nil: never).
    ///   - logger: where a failed purge is logged (it is retried at the next interval).
    public func run(
        challengePurgeInterval: Duration? = .seconds(60),
        logger: Logger = Logger(label: "appattest", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async {
        await withDiscardingTaskGroup { group in
            group.addTask { await batcher.run() }
            if let challengePurgeInterval {
                group.addTask { await purgeChallenges(every: challengePurgeInterval, logger: logger) }
            }
        }
    }

    /// Purges every `interval` (at least a second) until the task is cancelled.
    private func purgeChallenges(every requested: Duration, logger: Logger) async {
        let interval = max(requested, .seconds(1))
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            // Each purge on its own: one that fails (a backlog past the store's deadline) does not stop the other.
            do {
                let deleted = try await purgeExpiredChallenges()
                if deleted > 0 { logger.debug("expired challenges deleted", metadata: ["count": "\(deleted)"]) }
            } catch {
                logger.warning("purging expired challenges failed", metadata: ["error": "\(error.code)"])
            }
            do {
                let events = try await purgeExpiredEvents()
                if events > 0 {
                    logger.debug("key events past their retention deleted", metadata: ["count": "\(events)"])
                }
            } catch {
                logger.warning("purging key events past their retention failed", metadata: ["error": "\(error.code)"])
            }
        }
    }
}
