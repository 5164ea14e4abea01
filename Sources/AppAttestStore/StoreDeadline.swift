import Synchronization

/// A bound on how long a store operation may take, for stores that wait on a network (<doc:RunningTheVerificationService>,
/// “PostgreSQL”).
///
/// The operation runs in a task of its own and is cancelled at the deadline, but the caller does not wait for it to
/// honour the cancellation: a driver blocked on a connection that never answers would hold it as long as the
/// operating system's TCP timeouts (over a minute). What the operation was doing may still complete afterwards (a
/// counter stored after its request was answered 503), which is what a lost response looks like anyway; nothing is
/// half-written, since every store operation is one transaction.
package enum StoreDeadline {
    /// Runs `body`; after `deadline`, cancels it and fails with ``StoreError/Code/unavailable``. `watch` keeps the
    /// deadline (the process's own, unless a test needs one to itself).
    package static func run<T: Sendable>(
        _ deadline: Duration, _ what: String, watch: DeadlineWatch = .shared,
        _ body: @escaping @Sendable () async throws(StoreError) -> T
    ) async throws(StoreError) -> T {
        let race = Race<T>(watch: watch)
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, StoreError>, Never>) in
                race.start(continuation, deadline: deadline, what: what, body)
            }
        } onCancel: {
            race.finish(.failure(StoreError(.unavailable, "\(what): cancelled")))
        }
        return try result.get()
    }

    /// Whichever of the operation and the deadline ends first resumes the caller, once, and cancels the operation.
    private final class Race<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Result<T, StoreError>, Never>?
            var work: Task<Void, Never>?
            var watched: DeadlineWatch.Ticket?
            var finished: Result<T, StoreError>?
        }
        private let state = Mutex(State())
        private let watch: DeadlineWatch
        /// What ``finish(_:)`` takes from the state: whom to resume, what to cancel, what to stop watching.
        private typealias Taken = (
            CheckedContinuation<Result<T, StoreError>, Never>?, Task<Void, Never>?, DeadlineWatch.Ticket?
        )

        init(watch: DeadlineWatch) { self.watch = watch }

        func start(
            _ continuation: CheckedContinuation<Result<T, StoreError>, Never>, deadline: Duration, what: String,
            _ body: @escaping @Sendable () async throws(StoreError) -> T
        ) {
            let early = state.withLock { state -> Result<T, StoreError>? in
                if let finished = state.finished { return finished }
                state.continuation = continuation
                return nil
            }
            if let early {
                continuation.resume(returning: early)
                return
            }
            let ticket = watch.watch(until: .now + deadline) {
                var error = StoreError(.unavailable, "\(what) did not answer within \(Self.seconds(deadline)) s")
                error.timedOut = true
                self.finish(.failure(error))
            }
            let work = Task {
                let result: Result<T, StoreError>
                do throws(StoreError) { result = .success(try await body()) } catch { result = .failure(error) }
                self.finish(result)
            }
            let finishedAlready = state.withLock { state -> Bool in
                state.work = work
                state.watched = ticket
                return state.continuation == nil
            }
            if finishedAlready {
                watch.forget(ticket)
                work.cancel()
            }
        }

        func finish(_ result: Result<T, StoreError>) {
            let taken = state.withLock { state -> Taken in
                guard state.finished == nil else { return (nil, nil, nil) }
                state.finished = result
                let taken = (state.continuation, state.work, state.watched)
                state.continuation = nil
                return taken
            }
            // The caller first: the operation's cancellation runs its driver's handlers on this thread, which, at a
            // deadline, is the watch's, so that every other deadline waits for them.
            taken.0?.resume(returning: result)
            if let ticket = taken.2 { watch.forget(ticket) }
            taken.1?.cancel()
        }

        private static func seconds(_ duration: Duration) -> String {
            let (seconds, attoseconds) = duration.components
            let value = Double(seconds) + Double(attoseconds) / 1e18
            return value == value.rounded() ? "\(Int(value))" : "\(value)"
        }
    }
}

/// The deadlines of every operation in flight, watched by one task that sleeps until the earliest of them, so that an
/// operation costs a registration and its removal, not a timer of its own: a timer per operation (a task sleeping
/// until the deadline, cancelled when the operation ends) left thousands of sleeps a second in the process's timer
/// heap, each firing seconds later to find its task gone.
package final class DeadlineWatch: Sendable {
    /// The process's watch, which every store operation's deadline uses.
    package static let shared = DeadlineWatch()

    /// A watch of its own (for a test, whose deadlines must not share a watcher with others in flight).
    package init() {}

    /// One watched deadline, given back to ``forget(_:)`` when its operation ends first.
    package struct Ticket: Sendable {
        fileprivate let id: UInt64
    }

    private struct Entry {
        var deadline: ContinuousClock.Instant
        var expire: @Sendable () -> Void
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var nextID: UInt64 = 0
        /// The watching task, by the id of the entry that started it (a generation: a watcher replaced since finds
        /// another), and when it wakes; nil when no task watches (nothing is in flight).
        var watcher: (generation: UInt64, wakesAt: ContinuousClock.Instant, task: Task<Void, Never>)?
    }

    private let state = Mutex(State())

    /// Calls `expire` once `deadline` has passed, unless ``forget(_:)`` is called first.
    package func watch(until deadline: ContinuousClock.Instant, _ expire: @escaping @Sendable () -> Void) -> Ticket {
        state.withLock { state in
            state.nextID &+= 1
            let id = state.nextID
            state.entries[id] = Entry(deadline: deadline, expire: expire)
            // A deadline earlier than the watcher's wake-up (a shorter bound than those in flight) needs a watcher
            // that wakes for it; the one sleeping ends when it wakes and finds itself replaced.
            if let watcher = state.watcher, watcher.wakesAt <= deadline { return Ticket(id: id) }
            state.watcher?.task.cancel()
            state.watcher = (id, deadline, Task.detached { await self.run(id, until: deadline) })
            return Ticket(id: id)
        }
    }

    /// Stops watching a deadline whose operation ended.
    package func forget(_ ticket: Ticket) {
        _ = state.withLock { $0.entries.removeValue(forKey: ticket.id) }
    }

    /// The watcher: sleeps until the earliest deadline, expires what has passed, and ends when nothing is left to
    /// watch or a watcher for an earlier deadline replaced it.
    private func run(_ generation: UInt64, until first: ContinuousClock.Instant) async {
        var wakeAt: ContinuousClock.Instant? = first
        while let instant = wakeAt {
            // Cancelled only when replaced, by a watcher for an earlier deadline, which watches every entry.
            do { try await Task.sleep(until: instant, clock: .continuous) } catch { return }
            let now = ContinuousClock.now
            let expired = state.withLock { state -> [@Sendable () -> Void] in
                guard state.watcher?.generation == generation else {
                    wakeAt = nil
                    return []
                }
                var expired: [(id: UInt64, expire: @Sendable () -> Void)] = []
                var earliest: ContinuousClock.Instant?
                for (id, entry) in state.entries {
                    if entry.deadline <= now {
                        expired.append((id, entry.expire))
                    } else if earliest.map({ entry.deadline < $0 }) ?? true {
                        earliest = entry.deadline
                    }
                }
                // Removed after the loop: removing while iterating would copy the whole dictionary.
                for (id, _) in expired { state.entries[id] = nil }
                wakeAt = earliest
                if let earliest { state.watcher?.wakesAt = earliest } else { state.watcher = nil }
                return expired.map(\.expire)
            }
            for expire in expired { expire() }
        }
    }
}
