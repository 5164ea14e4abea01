import AppAttest
package import AppAttestStore
import Foundation
import Synchronization

/// Group commit for assertion acceptances, while ``run()`` runs (as ``AppAttestService/run(challengePurgeInterval:logger:)``, a service of the
/// application's lifecycle): a worker takes what is pending (at most ``maximumBatch``) into one transaction
/// (``maximumFlushes`` at a time, stalled ones aside: below); the acceptances that arrive while it commits wait, and
/// go to the store together in the next one.
/// Under load many assertions share a commit (one WAL flush for PostgreSQL, one write transaction for SQLite); a
/// quiet store sees batches of one, without delay. While nothing runs it, each acceptance is a transaction of its own,
/// on the caller's task.
///
/// A commit that hangs (a connection that stopped answering) does not hold every acceptance until the store's
/// deadline: a commit that began ``defaultStallThreshold`` ago no longer counts against ``maximumFlushes``, so the next
/// acceptance wakes another worker, which commits what is pending beside it (at most ``maximumStalledFlushes`` in
/// flight, one per worker). What queued behind the hung commit before it stalled goes as soon as it stalls, whether or
/// not another acceptance arrives (``watchForStall()``), while the run is not stopping.
///
/// Sound because each acceptance in a batch is the same conditional statement it would be alone, applied in order
/// within the transaction, and nobody hears an outcome before the transaction commits: a crash before the commit
/// loses only acceptances that were never acknowledged.
///
/// A store that stops answering holds nobody for long: at most ``maximumPending`` acceptances wait (the next is
/// refused `unavailable` at once), and one that waited past the store's bound for its turn is refused `unavailable`
/// rather than committed (``PendingQueue``).
package final class AcceptanceBatcher: Sendable {
    typealias Waiter = CheckedContinuation<AssertionAcceptanceOutcome?, any Error>

    private struct State {
        var pending: PendingQueue<(AssertionAcceptance, Waiter)>
        /// Workers waiting for an acceptance.
        var idle: [CheckedContinuation<Void, Never>] = []
        /// How many `run()` calls are running.
        var runs = 0
        /// The runs asked to stop: their workers leave once nothing is pending that they may take.
        var stopping: Set<Int> = []
        var lastRun = 0
        var commits: InFlight

        /// Whether a watch (``watchForStall()``) should start for what is pending: it is marked as started.
        mutating func startWatch() -> Bool { commits.startWatch(pending: !pending.isEmpty) }

        /// Up to ``maximumBatch`` acceptances to commit, and the waiters of those that waited too long.
        mutating func take() -> (batch: [(AssertionAcceptance, Waiter)], expired: [Waiter]) {
            let (batch, expired) = pending.take(AcceptanceBatcher.maximumBatch)
            return (batch, expired.map(\.1))
        }
    }

    private let store: any AppAttestStore
    private let state: Mutex<State>
    package static let maximumBatch = AssertionAcceptance.maximumBatchSize
    /// Transactions in flight at once: one, committing while the next forms. A second one in flight made PostgreSQL's
    /// batches half as large (about 8 acceptances per transaction instead of 14 in `Scripts/load.sh`), at nearly twice
    /// the database's CPU per assertion (50 µs against 30) and no lower latency; SQLite's writes are serial anyway
    /// (MEASUREMENTS.md, “Load”).
    package static let maximumFlushes = 1
    /// Transactions in flight at most, those that stalled included: the workers of a run.
    package static let maximumStalledFlushes = 4
    /// How long a commit runs before it no longer holds back the next one: far beyond a commit's usual time (a few
    /// milliseconds, PostgreSQL's WAL flush included).
    package static let defaultStallThreshold = Duration.milliseconds(100)
    /// Acceptances queued at most: about half a second of this machine's busiest load, thousands of times what a
    /// store that answers leaves waiting.
    package static let maximumPending = 4_096

    /// - Parameters:
    ///   - stallThreshold: how long a commit runs before another may start beside it (tests shorten it).
    ///   - queueDeadline: how long an acceptance may wait for its turn; by default the store's bound on an operation
    ///     (``AppAttestStore/StoreOperationsAreBounded``), else 5 s.
    ///   - maximumPending: how many may wait (tests lower it).
    ///   - now: the time the queue's deadline is measured in (tests freeze it).
    package init(
        store: any AppAttestStore, stallThreshold: Duration = defaultStallThreshold, queueDeadline: Duration? = nil,
        maximumPending: Int = maximumPending, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.store = store
        state = Mutex(
            State(
                pending: PendingQueue(limit: maximumPending, deadline: queueDeadline, store: store, now: now),
                commits: InFlight(
                    limit: Self.maximumFlushes, stalledLimit: Self.maximumStalledFlushes, threshold: stallThreshold)))
    }

    /// How many acceptances wait for their turn.
    package var waiting: Int { state.withLock { $0.pending.count } }

    /// Whether a `run()` is running (acceptances are then batched).
    package var isRunning: Bool { state.withLock { $0.runs > $0.stopping.count } }

    /// The acceptance's outcome, once the transaction that holds it has committed.
    package func accept(_ acceptance: AssertionAcceptance) async throws(StoreError) -> AssertionAcceptanceOutcome {
        let queued: AssertionAcceptanceOutcome?
        do {
            queued = try await withCheckedThrowingContinuation { (waiter: Waiter) in
                let (enqueued, worker, watch) = state.withLock {
                    state -> (Bool?, CheckedContinuation<Void, Never>?, Bool) in
                    // Queued only while a run that is not stopping will take it.
                    guard state.runs > state.stopping.count else { return (false, nil, false) }
                    guard state.pending.append((acceptance, waiter)) else { return (nil, nil, false) }
                    // A worker is woken only when it may commit; otherwise the one committing takes this next, or,
                    // should that commit stall first, a worker the watch (``watchForStall()``) wakes then.
                    if state.commits.mayBegin() { return (true, state.idle.popLast(), false) }
                    return (true, nil, state.startWatch())
                }
                if watch { Task { await self.watchForStall() } }
                switch enqueued {
                case true?: worker?.resume()
                case false?: waiter.resume(returning: nil)
                case nil: waiter.resume(throwing: state.withLock { $0.pending.refusal(expired: false, "acceptance") })
                }
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.unavailable, "\(error)")
        }
        if let queued { return queued }
        // Nothing runs the group commit: a transaction of its own.
        let outcomes = try await store.acceptAssertions([acceptance])
        guard outcomes.count == 1 else {
            throw StoreError(.corrupted, "the store answered \(outcomes.count) outcomes for 1")
        }
        return outcomes[0]
    }

    /// Runs the group commit until the task is cancelled; then what is still pending is committed, and later
    /// acceptances are transactions of their own again. Calls may overlap (each adds its workers; the last to end
    /// commits what is left).
    ///
    /// The commits run in a task of their own, awaited here, so that cancelling this one stops the workers without
    /// cancelling a transaction: a store that honours cancellation would otherwise fail (or, on PostgreSQL, abandon
    /// while it may still commit) every acceptance taken before the stop.
    package func run() async {
        let id = state.withLock { state in
            state.runs += 1
            state.lastRun += 1
            return state.lastRun
        }
        let work = Task {
            await withDiscardingTaskGroup { group in
                for _ in 0..<Self.maximumStalledFlushes { group.addTask { await self.work(run: id) } }
            }
            let last = state.withLock { state in
                state.runs -= 1
                state.stopping.remove(id)
                return state.runs == 0
            }
            // Other runs' workers take what is pending; the last run commits it (nothing is queued any more).
            while last {
                let (batch, expired) = state.withLock { $0.take() }
                refuse(expired)
                if batch.isEmpty { break }
                await commit(batch)
            }
        }
        await withTaskCancellationHandler {
            await work.value
        } onCancel: {
            let idle = state.withLock { state in
                state.stopping.insert(id)
                defer { state.idle.removeAll() }
                return state.idle
            }
            // Every idle worker looks again; those of other runs go back to waiting.
            for worker in idle { worker.resume() }
        }
    }

    /// A worker of run `id`: commits what is pending, batch after batch, until its run stops; then it leaves at once
    /// when another run carries on, and otherwise once nothing is pending that it may take (what a commit in flight
    /// holds back, that commit's worker takes next; nothing is queued once every run stops). A worker that leaves
    /// with something pending that may be committed wakes an idle worker for it.
    private func work(run id: Int) async {
        enum Step {
            /// With whether a watch starts for what this batch left pending.
            case commit([(AssertionAcceptance, Waiter)], token: Int, watch: Bool, refusing: [Waiter])
            /// Those that waited too long, refused; then the worker looks again.
            case refuse([Waiter])
            case wait
            /// With the idle worker to wake when what is pending may be committed now: a worker of another run, which
            /// no acceptance wakes while one is committing (nobody else would take what is pending).
            case leave(handingOffTo: CheckedContinuation<Void, Never>?)
        }
        while true {
            let step = state.withLock { state -> Step in
                func handOff() -> CheckedContinuation<Void, Never>? {
                    state.pending.isEmpty || !state.commits.mayBegin() ? nil : state.idle.popLast()
                }
                let stopping = state.stopping.contains(id)
                if stopping, state.runs > state.stopping.count { return .leave(handingOffTo: handOff()) }
                if state.commits.mayBegin() {
                    let (batch, expired) = state.take()
                    if !batch.isEmpty {
                        let token = state.commits.begin()
                        return .commit(batch, token: token, watch: state.startWatch(), refusing: expired)
                    }
                    if !expired.isEmpty { return .refuse(expired) }
                }
                // What is pending and not taken here, the worker committing takes next: a stopping worker may go.
                return stopping ? .leave(handingOffTo: handOff()) : .wait
            }
            switch step {
            case .commit(let batch, let token, let watch, let expired):
                if watch { Task { await self.watchForStall() } }
                refuse(expired)
                await commit(batch)
                state.withLock { $0.commits.end(token) }
            case .refuse(let expired):
                refuse(expired)
            case .leave(let next):
                next?.resume()
                return
            case .wait:
                await withCheckedContinuation { (worker: CheckedContinuation<Void, Never>) in
                    // Checked under the lock that `run`'s cancellation handler and `accept` take: no wake-up is lost.
                    let (waits, watch) = state.withLock { state -> (Bool, Bool) in
                        guard state.pending.isEmpty || !state.commits.mayBegin(), !state.stopping.contains(id) else {
                            return (false, false)
                        }
                        state.idle.append(worker)
                        // What is pending waits for the commit in flight, or for its stall.
                        return (true, state.startWatch())
                    }
                    if watch { Task { await self.watchForStall() } }
                    if !waits { worker.resume() }
                }
            }
        }
    }

    /// Waits while what is pending may not be committed, until the commit in flight stalls, then wakes an idle worker
    /// for it: an acceptance queued before a commit hangs waits for the stall threshold, not for the next acceptance
    /// to arrive (on a quiet service, not until the store's deadline). Ends once nothing is pending, once another
    /// commit may begin (an idle worker woken for it; without one, a worker that is not idle takes it when it looks
    /// again), or when none may begin whatever stalls (``maximumStalledFlushes`` in flight). A run that is stopping
    /// parks no worker, so what is pending then waits for a commit to end.
    private func watchForStall() async {
        while true {
            let (stall, worker) = state.withLock {
                state -> (ContinuousClock.Instant?, CheckedContinuation<Void, Never>?) in
                if !state.pending.isEmpty, let stall = state.commits.nextStall() { return (stall, nil) }
                state.commits.endWatch()
                return (nil, state.pending.isEmpty || !state.commits.mayBegin() ? nil : state.idle.popLast())
            }
            guard let stall else {
                worker?.resume()
                return
            }
            try? await Task.sleep(until: stall, clock: .continuous)
        }
    }

    /// Refuses acceptances that waited past the queue's deadline: never sent to the store, so none is applied.
    private func refuse(_ expired: [Waiter]) {
        guard !expired.isEmpty else { return }
        let error = state.withLock { $0.pending.refusal(expired: true, "acceptance") }
        for waiter in expired { waiter.resume(throwing: error) }
    }

    private func commit(_ batch: [(AssertionAcceptance, Waiter)]) async {
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
