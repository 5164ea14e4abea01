import AppAttest
import AppAttestStore
import Foundation
import Synchronization
import Testing

#if PostgreSQL
import AppAttestPostgres
import Logging
import PostgresNIO
#endif

/// Store operations that would wait on a database that does not answer fail within a deadline instead.
@Suite("Store deadlines")
struct StoreDeadlineTests {
    @Test("an operation that never answers, nor honours cancellation, fails at the deadline", .timeLimit(.minutes(1)))
    func neverAnswering() async throws {
        // A driver awaiting an answer that never comes, deaf to cancellation; answered by the test at its end.
        let pending = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let start = ContinuousClock.now
        do {
            _ = try await StoreDeadline.run(.milliseconds(300), "the test store") {
                () async throws(StoreError) -> Int in
                await withCheckedContinuation { continuation in pending.withLock { $0 = continuation } }
                return 1
            }
            Issue.record("the operation was waited for")
        } catch {
            #expect(error.kind == .unavailable)
        }
        // Without the deadline the operation would never end; the bound is loose because a loaded CI machine is slow.
        #expect(ContinuousClock.now - start < .seconds(30))
        pending.withLock { $0.take() }?.resume()
        // An operation that ends in time gives its result.
        #expect(
            try await StoreDeadline.run(.seconds(5), "the test store") { () async throws(StoreError) -> Int in 7 } == 7)
    }

    @Test(
        "a short deadline set while a longer one is watched fails at its own time, and the longer one stays watched",
        .timeLimit(.minutes(1)))
    func shorterDeadlineAfterALongerOne() async throws {
        // One watcher sleeps until the earliest deadline: one that comes later but ends sooner must wake it earlier.
        // A watch of the test's own, so that no other test's deadline in flight wakes it.
        let watch = DeadlineWatch()
        let pending = Mutex<[CheckedContinuation<Void, Never>]>([])
        let never = { @Sendable () async throws(StoreError) -> Int in
            await withCheckedContinuation { continuation in pending.withLock { $0.append(continuation) } }
            return 1
        }
        let long = Task { () async -> StoreError? in
            do throws(StoreError) {
                _ = try await StoreDeadline.run(.seconds(40), "the slow store", watch: watch, never)
                return nil
            } catch { return error }
        }
        // The longer deadline is watched once its operation runs (its deadline is registered before).
        while pending.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(5)) }
        let start = ContinuousClock.now
        do {
            _ = try await StoreDeadline.run(.milliseconds(200), "the test store", watch: watch, never)
            Issue.record("the operation was waited for")
        } catch {
            #expect(error.kind == .unavailable)
            #expect(error.timedOut)
        }
        // Bound loose for a loaded CI machine, far below the longer deadline it would otherwise wait for.
        #expect(ContinuousClock.now - start < .seconds(20))
        // The longer one is still watched, and ends with its caller's cancellation, not the other's deadline.
        long.cancel()
        let longError = await long.value
        #expect(longError?.kind == .unavailable)
        #expect(longError?.timedOut == false)
        // Both operations end (each was abandoned, not ended): once the second has started too.
        while pending.withLock({ $0.count < 2 }) { try await Task.sleep(for: .milliseconds(5)) }
        for continuation in pending.withLock({ $0 }) { continuation.resume() }
    }

    #if PostgreSQL
    @Test(
        "PostgreSQL: a request that cannot get a connection fails unavailable within the operation timeout",
        .enabled(if: Backend.postgresURL != nil || ProcessInfo.processInfo.environment["CI"] != nil),
        .timeLimit(.minutes(1)))
    func postgresWithoutConnection() async throws {
        let url = try #require(Backend.postgresURL, "APPATTEST_POSTGRES_URL is not set")
        var configuration = try PostgresAppAttestStore.configuration(url: url)
        configuration.options.maximumConnections = 1
        configuration.options.minimumConnections = 0
        let client = PostgresClient(configuration: configuration)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let store = try await PostgresAppAttestStore.make(
                client: client, startupTimeout: .seconds(90), operationTimeout: .seconds(1))
            // The only connection is held elsewhere for 10 s: the database looks as if it had stopped answering.
            let held = Mutex(false)
            let holding = Task {
                try await client.withConnection { connection in
                    held.withLock { $0 = true }
                    try await connection.query("SELECT pg_sleep(10)", logger: Logger(label: "test"))
                }
            }
            while !held.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            let start = ContinuousClock.now
            do {
                _ = try await store.key(try KeyID(rawValue: [UInt8](repeating: 9, count: 32)))
                Issue.record("the read waited for the connection")
            } catch let error as StoreError {
                #expect(error.kind == .unavailable)
            }
            #expect(ContinuousClock.now - start < .seconds(8), "it waited \(ContinuousClock.now - start)")
            _ = try? await holding.value
        }
    }
    #endif
}
