import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Synchronization
import Testing

/// The service's group commit: acceptances share transactions while its background work runs, are transactions of
/// their own otherwise, and none is left unanswered when the work stops.
@Suite("Group commit of assertion acceptances")
struct GroupCommitTests {
    /// A memory store whose batch acceptance takes a while and records the size of each batch.
    struct SlowStore {
        final class Log: Sendable {
            let sizes = Mutex<[Int]>([])
            /// Batches handed to the store from a cancelled task (a real store would fail them).
            let cancelled = Mutex(0)
        }
        let log = Log()
        let store: ObservedAppAttestStore

        init(delay: Duration) {
            let log = self.log
            store = ObservedAppAttestStore(MemoryAppAttestStore()) { batch in
                log.sizes.withLock { $0.append(batch.count) }
                if Task.isCancelled { log.cancelled.withLock { $0 += 1 } }
                try? await Task.sleep(for: delay)
            }
        }
    }

    /// A queue deadline no test reaches: a loaded machine may schedule a worker seconds late, and what it takes then
    /// must not have expired (the queue's own deadline is `queueBounds`'s, on a clock it moves).
    static let noDeadline = Duration.seconds(3_600)

    /// `count` acceptances at once (of unknown keys: the memory store answers each without a registration); their
    /// outcomes.
    static func acceptAll(_ batcher: AcceptanceBatcher, count: Int) async -> [AssertionAcceptanceOutcome?] {
        await withTaskGroup(of: AssertionAcceptanceOutcome?.self) { group in
            for index in 0..<count {
                group.addTask {
                    let keyID = try! KeyID(rawValue: [UInt8](repeating: UInt8(index % 256), count: 32))
                    return try? await batcher.accept(
                        .init(keyID: keyID, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil))
                }
            }
            var outcomes: [AssertionAcceptanceOutcome?] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
    }

    @Test("without its background work, each acceptance is a transaction of its own")
    func unbatchedWhenNotRunning() async {
        let store = SlowStore(delay: .milliseconds(5))
        let outcomes = await Self.acceptAll(AcceptanceBatcher(store: store.store), count: 16)
        #expect(outcomes.allSatisfy { $0 == .unknownKey })
        #expect(store.log.sizes.withLock { $0 } == Array(repeating: 1, count: 16))
    }

    @Test("while it runs, acceptances that arrive during a commit share the next one", .timeLimit(.minutes(1)))
    func batchedWhileRunning() async {
        let store = SlowStore(delay: .milliseconds(50))
        let batcher = AcceptanceBatcher(store: store.store, queueDeadline: Self.noDeadline)
        let running = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        let outcomes = await Self.acceptAll(batcher, count: 64)
        running.cancel()
        await running.value
        #expect(outcomes.allSatisfy { $0 == .unknownKey })
        let batches = store.log.sizes.withLock { $0 }
        #expect(batches.reduce(0, +) == 64)
        #expect(batches.count < 64, "\(batches)")
        #expect(batches.allSatisfy { $0 <= AcceptanceBatcher.maximumBatch })
    }

    @Test(
        "stopping the work answers every acceptance it took, and later ones still go through", .timeLimit(.minutes(1)))
    func stoppingAnswersEveryone() async {
        let store = SlowStore(delay: .milliseconds(20))
        let batcher = AcceptanceBatcher(store: store.store, queueDeadline: Self.noDeadline)
        let running = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        async let outcomes = Self.acceptAll(batcher, count: 200)
        try? await Task.sleep(for: .milliseconds(30))
        running.cancel()
        let answered = await outcomes
        await running.value
        #expect(!batcher.isRunning)
        #expect(store.log.cancelled.withLock { $0 } == 0, "a batch was committed from a cancelled task")
        #expect(answered.count == 200)
        #expect(answered.allSatisfy { $0 == .unknownKey })
        #expect(await Self.acceptAll(batcher, count: 3).allSatisfy { $0 == .unknownKey })
        #expect(store.log.sizes.withLock { $0 }.reduce(0, +) == 203)
    }

    @Test("stopping under sustained load returns, without committing from a cancelled task", .timeLimit(.minutes(1)))
    func stoppingUnderLoad() async {
        let store = SlowStore(delay: .milliseconds(5))
        let batcher = AcceptanceBatcher(store: store.store, queueDeadline: Self.noDeadline)
        let running = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        let load = Task {
            while !Task.isCancelled { _ = await Self.acceptAll(batcher, count: 16) }
        }
        try? await Task.sleep(for: .milliseconds(50))
        running.cancel()
        await running.value
        #expect(!batcher.isRunning)
        #expect(store.log.cancelled.withLock { $0 } == 0)
        load.cancel()
        await load.value
    }

    @Test(
        "a stop while commits are in flight: what was taken is committed, none from a cancelled task",
        .timeLimit(.minutes(1)))
    func stopDuringCommits() async {
        let log = SlowStore.Log()
        let open = Mutex(false)
        // Each batch waits until the gate opens (a store answering slowly).
        let store = ObservedAppAttestStore(MemoryAppAttestStore()) { batch in
            log.sizes.withLock { $0.append(batch.count) }
            if Task.isCancelled { log.cancelled.withLock { $0 += 1 } }
            while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) }
        }
        // No commit counts as stalled here, however slow the machine: the queued wave waits as it would.
        let batcher = AcceptanceBatcher(store: store, stallThreshold: .seconds(3_600), queueDeadline: Self.noDeadline)
        let running = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        // One wave per commit in flight, each held at the gate; one more waits in the queue.
        var waves: [Task<[AssertionAcceptanceOutcome?], Never>] = []
        for worker in 1...AcceptanceBatcher.maximumFlushes {
            waves.append(Task { await Self.acceptAll(batcher, count: 10) })
            while log.sizes.withLock({ $0.count }) < worker, !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
        waves.append(Task { await Self.acceptAll(batcher, count: 20) })
        try? await Task.sleep(for: .milliseconds(20))
        running.cancel()
        open.withLock { $0 = true }
        var answered: [AssertionAcceptanceOutcome?] = []
        for wave in waves { answered += await wave.value }
        await running.value
        #expect(answered.count == 10 * AcceptanceBatcher.maximumFlushes + 20)
        #expect(answered.allSatisfy { $0 == .unknownKey })
        #expect(log.sizes.withLock { $0 }.reduce(0, +) == 10 * AcceptanceBatcher.maximumFlushes + 20)
        #expect(log.cancelled.withLock { $0 } == 0, "a batch was handed to the store from a cancelled task")
    }

    @Test(
        "behind a store that stopped answering, acceptances wait neither in unbounded numbers nor past the deadline",
        .timeLimit(.minutes(1)))
    func queueBounds() async throws {
        let open = Mutex(false)
        let handed = Mutex(0)
        let committed = Mutex(0)
        // Every batch waits at the gate (a store that stopped answering), then counts what it was handed.
        let store = ObservedAppAttestStore(MemoryAppAttestStore()) { batch in
            handed.withLock { $0 += 1 }
            while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) }
            committed.withLock { $0 += batch.count }
        }
        // No commit counts as stalled: what queues waits for the one in flight.
        // The queue's time moves only when the test moves it: on a loaded machine the first acceptance may wait
        // seconds for a worker, and must not expire meanwhile.
        let frozen = ContinuousClock.now
        let elapsed = Mutex(Duration.zero)
        let batcher = AcceptanceBatcher(
            store: store, stallThreshold: .seconds(3_600), queueDeadline: .seconds(2), maximumPending: 32,
            now: { frozen + elapsed.withLock { $0 } })
        let running = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        let first = Task { await Self.acceptAll(batcher, count: 1) }
        let start = ContinuousClock.now
        while handed.withLock({ $0 }) == 0, ContinuousClock.now - start < .seconds(10) {
            try await Task.sleep(for: .milliseconds(1))
        }
        try #require(handed.withLock { $0 } == 1, "the first acceptance never reached the store")
        // As many as may wait: the next one is refused at once, while the store still hangs.
        let queued = Task { await Self.acceptAll(batcher, count: 32) }
        while batcher.waiting < 32 { try await Task.sleep(for: .milliseconds(1)) }
        let (refusedAtOnce, extra) = try await finishes(within: .seconds(30)) {
            await Self.acceptAll(batcher, count: 1)
        }
        #expect(refusedAtOnce, "an acceptance beyond the queue's bound waited for the store")
        open.withLock { $0 = refusedAtOnce ? false : true }
        #expect(try await extra.value == [nil])
        // Past the deadline, what waited is refused when the hung commit ends, not handed to the store.
        elapsed.withLock { $0 = .milliseconds(2_100) }
        open.withLock { $0 = true }
        #expect(await first.value == [.unknownKey])
        let outcomes = await queued.value
        #expect(outcomes.count == 32)
        #expect(outcomes.allSatisfy { $0 == nil }, "an acceptance that waited past the deadline was committed")
        #expect(committed.withLock { $0 } == 1)
        // The queue works again at once.
        #expect(await Self.acceptAll(batcher, count: 3) == [.unknownKey, .unknownKey, .unknownKey])
        running.cancel()
        await running.value
    }

    @Test("two runs, one stopped while its worker commits: what queued meanwhile goes to the other's workers")
    func overlappingRuns() async throws {
        let held = Mutex(true)
        let batches = Mutex(0)
        // The first batch waits at the gate; the others go through.
        let store = ObservedAppAttestStore(MemoryAppAttestStore()) { _ in
            let first = batches.withLock { count in
                count += 1
                return count == 1
            }
            if first { while held.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) } }
        }
        // No commit counts as stalled: only the hand-off can move what is queued.
        let batcher = AcceptanceBatcher(store: store, stallThreshold: .seconds(3_600), queueDeadline: Self.noDeadline)
        let first = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        let keyID = try KeyID(rawValue: [UInt8](repeating: 0xAB, count: 32))
        let acceptance = AssertionAcceptance(
            keyID: keyID, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil)
        // The first run's worker takes this one and waits at the gate.
        let waiting = Task { try await batcher.accept(acceptance) }
        while batches.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        // A second run starts (its workers idle), the first is asked to stop, and more acceptances queue meanwhile.
        let second = Task { await batcher.run() }
        try await Task.sleep(for: .milliseconds(50))
        first.cancel()
        let queued = Task { await Self.acceptAll(batcher, count: 8) }
        try await Task.sleep(for: .milliseconds(50))
        // The first run's worker commits and leaves: the second run's workers must take what is queued.
        held.withLock { $0 = false }
        #expect(try await waiting.value == .unknownKey)
        let (answered, _) = try await finishes(within: .seconds(10)) { await queued.value }
        #expect(answered, "the queued acceptances were left to nobody")
        second.cancel()
        await first.value
        await second.value
        #expect(await queued.value.allSatisfy { $0 == .unknownKey })
    }

    @Test(
        "a commit that hangs holds no acceptance past its stall: those that arrive after it, nor those queued before it",
        .timeLimit(.minutes(1)), arguments: [false, true])
    func hungCommit(queuedBeforeTheStall: Bool) async throws {
        struct Commits { var now = 0, most = 0, first = true }
        let commits = Mutex(Commits())
        let open = Mutex(false)
        let hung = try KeyID(rawValue: [UInt8](repeating: 0xEE, count: 32))
        // The batch with the first acceptance hangs until the gate opens (a connection that stopped answering).
        let store = ObservedAppAttestStore(MemoryAppAttestStore()) { batch in
            let hangs = commits.withLock { commits in
                commits.now += 1
                commits.most = max(commits.most, commits.now)
                defer { commits.first = false }
                return commits.first
            }
            if hangs { while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) } }
            commits.withLock { $0.now -= 1 }
        }
        let batcher = AcceptanceBatcher(
            store: store, stallThreshold: .milliseconds(queuedBeforeTheStall ? 200 : 50), queueDeadline: Self.noDeadline
        )
        let running = Task { await batcher.run() }
        while !batcher.isRunning { await Task.yield() }
        let first = Task {
            try await batcher.accept(.init(keyID: hung, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil))
        }
        while commits.withLock({ $0.now }) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        // Past the threshold, the next acceptances commit beside the hung one, however long it hangs. Or they queue at
        // once, long before the commit in flight stalls, and no other arrives: they are committed at the stall.
        if !queuedBeforeTheStall { try await Task.sleep(for: .milliseconds(100)) }
        let (answered, later) = try await finishes(within: .seconds(10)) {
            await Self.acceptAll(batcher, count: 20)
        }
        #expect(answered, "the acceptances waited for the hung commit")
        #expect(commits.withLock { $0.now } == 1, "the hung commit is still in flight")
        open.withLock { $0 = true }
        #expect(try await later.value.allSatisfy { $0 == .unknownKey })
        #expect(try await first.value == .unknownKey)
        // Commits beside the hung one, within the bound (one at a time unless one of them is itself held past the
        // threshold, which a slow machine may do).
        let most = commits.withLock { $0.most }
        #expect(most >= 2 && most <= AcceptanceBatcher.maximumStalledFlushes, "\(most) commits in flight at once")
        running.cancel()
        await running.value
    }
}
