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
    /// Runs `body`; after `deadline`, cancels it and fails with ``StoreError/Code/unavailable``.
    package static func run<T: Sendable>(
        _ deadline: Duration, _ what: String, _ body: @escaping @Sendable () async throws(StoreError) -> T
    ) async throws(StoreError) -> T {
        let race = Race<T>()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, StoreError>, Never>) in
                race.start(continuation, deadline: deadline, what: what, body)
            }
        } onCancel: {
            race.finish(.failure(StoreError(.unavailable, "\(what): cancelled")))
        }
        return try result.get()
    }

    /// Whichever of the operation and the timer ends first resumes the caller, once, and cancels the other.
    private final class Race<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Result<T, StoreError>, Never>?
            var work: Task<Void, Never>?
            var timer: Task<Void, Never>?
            var finished: Result<T, StoreError>?
        }
        private let state = Mutex(State())

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
            let work = Task {
                let result: Result<T, StoreError>
                do throws(StoreError) { result = .success(try await body()) } catch { result = .failure(error) }
                self.finish(result)
            }
            let timer = Task {
                guard (try? await Task.sleep(for: deadline)) != nil else { return }
                var error = StoreError(.unavailable, "\(what) did not answer within \(Self.seconds(deadline)) s")
                error.timedOut = true
                self.finish(.failure(error))
            }
            let finishedAlready = state.withLock { state -> Bool in
                state.work = work
                state.timer = timer
                return state.continuation == nil
            }
            if finishedAlready {
                work.cancel()
                timer.cancel()
            }
        }

        func finish(_ result: Result<T, StoreError>) {
            let taken = state.withLock {
                state -> (CheckedContinuation<Result<T, StoreError>, Never>?, Task<Void, Never>?, Task<Void, Never>?) in
                guard state.finished == nil else { return (nil, nil, nil) }
                state.finished = result
                let taken = (state.continuation, state.work, state.timer)
                state.continuation = nil
                return taken
            }
            taken.1?.cancel()
            taken.2?.cancel()
            taken.0?.resume(returning: result)
        }

        private static func seconds(_ duration: Duration) -> String {
            let (seconds, attoseconds) = duration.components
            let value = Double(seconds) + Double(attoseconds) / 1e18
            return value == value.rounded() ? "\(Int(value))" : "\(value)"
        }
    }
}
