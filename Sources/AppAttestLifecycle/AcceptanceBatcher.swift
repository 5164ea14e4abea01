import AppAttest
import AppAttestStore
import Foundation
import Synchronization

/// Group commit for assertion acceptances: up to ``maximumFlushes`` transactions run at once; while they all run, the
/// acceptances that arrive wait, and go to the store together in the next one (at most ``maximumBatch``). Under load
/// many assertions share a commit (one WAL flush for PostgreSQL, one write transaction for SQLite); a quiet store
/// sees batches of one, without delay.
///
/// Sound because each acceptance in a batch is the same conditional statement it would be alone, applied in order
/// within the transaction, and nobody hears an outcome before the transaction commits: a crash before the commit
/// loses only acceptances that were never acknowledged.
package final class AcceptanceBatcher: Sendable {
    typealias Waiter = CheckedContinuation<AssertionAcceptanceOutcome, any Error>

    private struct State {
        var pending: [(AssertionAcceptance, Waiter)] = []
        var flushes = 0
    }

    private let store: any AppAttestStore
    private let state = Mutex(State())
    package static let maximumBatch = AssertionAcceptance.maximumBatchSize
    /// Transactions in flight at once: one committing while the next forms. More only make batches smaller, at more
    /// CPU per assertion (`Scripts/load.sh` measures it; CHANGELOG has the figures); SQLite's writes are serial anyway.
    static let maximumFlushes = 2

    init(store: any AppAttestStore) { self.store = store }

    /// The acceptance's outcome, once the transaction that holds it has committed.
    func accept(_ acceptance: AssertionAcceptance) async throws(StoreError) -> AssertionAcceptanceOutcome {
        do {
            return try await withCheckedThrowingContinuation { (waiter: Waiter) in
                let starts = state.withLock { state -> Bool in
                    state.pending.append((acceptance, waiter))
                    guard state.flushes < Self.maximumFlushes else { return false }
                    state.flushes += 1
                    return true
                }
                if starts { Task { await self.flush() } }
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.unavailable, "\(error)")
        }
    }

    /// Runs batches until nothing is pending.
    private func flush() async {
        while true {
            let batch = state.withLock { state -> [(AssertionAcceptance, Waiter)] in
                let batch = Array(state.pending.prefix(Self.maximumBatch))
                state.pending.removeFirst(batch.count)
                if batch.isEmpty { state.flushes -= 1 }
                return batch
            }
            if batch.isEmpty { return }
            do {
                let outcomes = try await store.acceptAssertions(batch.map(\.0))
                guard outcomes.count == batch.count else {
                    throw StoreError(.corrupted, "the store answered \(outcomes.count) outcomes for \(batch.count)")
                }
                for ((_, waiter), outcome) in zip(batch, outcomes) { waiter.resume(returning: outcome) }
            } catch {
                for (_, waiter) in batch { waiter.resume(throwing: error) }
            }
        }
    }
}
