import AppAttest
import AppAttestStore
import Foundation
import Testing

#if PostgreSQL
import AppAttestPostgres
import Logging
import PostgresNIO
#endif

/// Store operations that would wait on a database that does not answer fail within a deadline instead.
@Suite("Store deadlines")
struct StoreDeadlineTests {
    @Test("an operation that never ends, nor honours cancellation, fails at the deadline", .timeLimit(.minutes(1)))
    func neverEnding() async throws {
        let start = ContinuousClock.now
        do {
            _ = try await StoreDeadline.run(.milliseconds(300), "the test store") {
                () async throws(StoreError) -> Int in
                // Blocks its thread without looking at cancellation, as a driver stuck in a system call would (briefly: it
                // holds one of the few threads every test shares).
                while ContinuousClock.now - start < .milliseconds(1500) { usleep(10_000) }
                return 1
            }
            Issue.record("the operation was waited for")
        } catch {
            #expect(error.kind == .unavailable)
        }
        #expect(ContinuousClock.now - start < .milliseconds(1200))
        // An operation that ends in time gives its result.
        #expect(
            try await StoreDeadline.run(.seconds(5), "the test store") { () async throws(StoreError) -> Int in 7 } == 7)
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
                client: client, startupTimeout: .seconds(20), operationTimeout: .seconds(1))
            // The only connection is held elsewhere for 8 s: the database looks as if it had stopped answering.
            let holding = Task {
                try await client.withConnection { connection in
                    try await connection.query("SELECT pg_sleep(8)", logger: Logger(label: "test"))
                }
            }
            try await Task.sleep(for: .milliseconds(300))
            let start = ContinuousClock.now
            do {
                _ = try await store.key(try KeyID(rawValue: [UInt8](repeating: 9, count: 32)))
                Issue.record("the read waited for the connection")
            } catch let error as StoreError {
                #expect(error.kind == .unavailable)
            }
            #expect(ContinuousClock.now - start < .seconds(4), "it waited \(ContinuousClock.now - start)")
            _ = try? await holding.value
        }
    }
    #endif
}
