#if PostgreSQL
import AppAttest
import AppAttestPostgres
import AppAttestStore
import Foundation
import PostgresNIO
import Synchronization
import Testing

/// What the store does while its database fails over: the connections reach a server that refuses every write (a
/// standby not yet promoted), and then one that accepts them again. The database of each test is its own, made
/// read-only with `default_transaction_read_only` for new sessions.
@Suite("PostgreSQL failover: a read-only server's refusals never strand the pool's connections", .serialized)
struct FailoverTests {
    /// A flag the storm's tasks and threads read.
    final class Flag: Sendable {
        let value = Mutex(false)
        var isSet: Bool { value.withLock { $0 } }
    }

    /// How the storm's operations ended.
    final class Tally: Sendable {
        let counts = Mutex<[String: Int]>([:])
        func add(_ outcome: String) { counts.withLock { $0[outcome, default: 0] += 1 } }
        subscript(_ outcome: String) -> Int { counts.withLock { $0[outcome] ?? 0 } }
        var all: [String: Int] { counts.withLock { $0 } }
    }

    @Test(
        "after a storm of refused writes under CPU contention, the pool still serves, and writes resume once the server accepts them",
        .enabled(if: Backend.postgresURL != nil || ProcessInfo.processInfo.environment["CI"] != nil),
        .timeLimit(.minutes(2)))
    func readOnlyStorm() async throws {
        let base = try PostgresConnectionTests.url("")
        let admin = PostgresClient(configuration: try PostgresAppAttestStore.configuration(url: base))
        let database = "appattest_failover_\(UInt32.random(in: 0...UInt32.max))"
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            defer { group.cancelAll() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"))
            // The database is dropped whatever happens, so that a failure leaves no read-only database behind.
            var failure: (any Error)?
            do { try await Self.storm(base: base, database: database, admin: admin) } catch { failure = error }
            _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(database) WITH (FORCE)"))
            if let failure { throw failure }
        }
    }

    /// The test's steps on its database.
    static func storm(base: String, database: String, admin: PostgresClient) async throws {
        var components = try #require(URLComponents(string: base))
        components.path = "/\(database)"
        let store = try await PostgresAppAttestStore.connect(
            url: try #require(components.string), operationTimeout: .seconds(5))
        defer { store.shutdown() }
        let keys = (0..<300).map { index in
            try! KeyID(rawValue: Data((0..<32).map { UInt8(truncatingIfNeeded: $0 &+ index) }))
        }
        // The standby: new sessions cannot write; the pool's sessions are closed, so it connects again.
        try await admin.query(
            PostgresQuery(unsafeSQL: "ALTER DATABASE \(database) SET default_transaction_read_only = on"))
        try await admin.query(
            PostgresQuery(
                unsafeSQL:
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(database)'"))

        // The storm: writes and reads from 256 tasks for 3 seconds, while 16 threads keep every core busy (a
        // server under load: postgres-nio's own query path lost a connection for good whenever a refusal
        // arrived before the caller began to read it). The spinning threads run at the lowest priority, so that
        // they take the cores whenever this test's tasks wait, but leave the other tests running in this process
        // their share (they starved them for seconds).
        let stop = Flag()
        let tally = Tally()
        for _ in 0..<16 {
            Thread.detachNewThread {
                #if os(Linux)
                // On Linux a nice value is the thread's, and 0 names the calling thread.
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
                #else
                Thread.current.threadPriority = 0
                #endif
                var spins = 0
                while !stop.isSet { spins &+= 1 }
                _ = spins
            }
        }
        await withTaskGroup(of: Void.self) { tasks in
            for task in 0..<256 {
                tasks.addTask {
                    var round = 0
                    while !stop.isSet {
                        round += 1
                        do {
                            if (task + round) % 2 == 0 {
                                _ = try await store.keys(
                                    withIDs: (0..<(1 + round % 8)).map { keys[(task * 7 + round + $0) % 300] })
                            } else {
                                _ = try await store.acceptAssertions(
                                    (0..<(1 + round % 5)).map { index in
                                        AssertionAcceptance(
                                            keyID: keys[(task + index * 3) % 300], counter: UInt32(round),
                                            counterPolicy: .strictlyIncreasing, challenge: nil)
                                    })
                            }
                            tally.add("ok")
                        } catch {
                            tally.add("\(error)".contains("25006") ? "read-only" : "other")
                        }
                    }
                }
            }
            try? await Task.sleep(for: .seconds(3))
            stop.value.withLock { $0 = true }
        }
        #expect(tally["read-only"] > 0, "the storm never reached the read-only server: \(tally.all)")

        // Every read still has a connection: before, the pool's 20 were lost and each read waited out its 5 s.
        for key in keys.prefix(40) {
            let start = ContinuousClock.now
            _ = try await store.key(key)
            #expect(ContinuousClock.now - start < .seconds(4), "a read waited for a lost connection")
        }
        // The promotion: writes are accepted again (the connections that met the read-only server were closed,
        // and their replacements can write) within a few seconds.
        try await admin.query(
            PostgresQuery(unsafeSQL: "ALTER DATABASE \(database) RESET default_transaction_read_only"))
        let promoted = ContinuousClock.now
        var written = false
        while !written, ContinuousClock.now - promoted < .seconds(10) {
            do {
                _ = try await store.acceptAssertion(
                    AssertionAcceptance(
                        keyID: keys[0], counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil))
                written = true
            } catch {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(written, "no write was accepted within 10 s of the promotion")
    }
}
#endif  // PostgreSQL
