#if Service
import AppAttestCommandSupport
import AppAttest
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import ArgumentParser
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `appattest-dev bench keys`: what a key cache miss costs. Many keys are stored; assertions go round-robin over all of
/// them through two services on the same store, one whose key cache holds every key (each assertion a hit) and one
/// whose cache holds at most half of them (the default 10,000 entries: with round-robin each assertion a miss, a read
/// of the store, and an eviction). Each service's cache is filled by a pass that is not timed; then both are measured
/// in the same run, in turns (misses first in odd rounds, hits first in even ones, so that the machine's drift falls
/// on both), with the process's CPU time per assertion beside the rate, so that the difference is the miss's cost
/// without HTTP and without a load generator sharing the machine (README, “Scale”).
struct BenchKeys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract:
            "Measure what a key cache miss costs: assertions round-robin over many keys, all cached or too many to cache."
    )

    @Option(help: "sqlite or postgres.") var backend: String = "sqlite"
    @Option(
        help:
            "sqlite:PATH of a file that does not exist yet, kept (default: a temporary file), or a postgres:// URL (default: $APPATTEST_POSTGRES_URL) of a throwaway database: the keys are added to it and left there."
    )
    var database: String?
    @Option(help: "Keys stored.") var keys: Int = 100_000
    @Option(help: "The key cache of the service that misses: at most half the keys.") var cache: Int = 10_000
    @Option(help: "Concurrent clients, each with its share of the keys.") var clients: Int = 32
    @Option(help: "Rounds: each measures misses and hits, in turns.") var rounds: Int = 2
    @Flag(help: "Print one JSON object.") var json = false

    func run() async throws {
        // At most half the keys in the missing service's cache: with round-robin from concurrent clients the order
        // shifts a little from one pass to the next, and a cache nearly as large as the keys would let some hit.
        guard (100...Self.maximumKeys).contains(keys), (1...1024).contains(clients), clients <= keys,
            (1...10).contains(rounds), (1...keys / 2).contains(cache)
        else {
            throw ValidationError(
                "need 100 ≤ keys ≤ \(Self.maximumKeys), 1 ≤ clients ≤ min(1024, keys), 1 ≤ rounds ≤ 10, "
                    + "1 ≤ cache ≤ keys / 2")
        }
        // Every assertion is signed and held before the first pass.
        guard keys * Self.passes(rounds) <= Self.maximumAssertions else {
            throw ValidationError(
                "keys × (2 + 2 × rounds) must be at most \(Self.maximumAssertions) (the assertions held)")
        }
        // Its own file: the bench adds keys, and must not add them to a database in use.
        let database = try BenchDatabase(backend: backend, database: database, newFileOnly: true)
        defer { database.removeTemporary() }
        let authority = try TestCertificateAuthority(name: "Bench")
        let appID = try AppID("BENCH12345.com.example.bench")
        let clock = ContinuousClock()
        let started = clock.now
        let devices = try (0..<keys).map { _ in try SimulatedDevice(authority: authority, appID: appID) }
        try await LoadCommand.Prepare.seed(
            devices, into: database.location, receipt: SimulatedDevice.placeholderReceipt)
        // A pass that fills each service's cache, then two a round (misses, hits), each with the next counter of
        // every key; signed before any is timed.
        let clientData = BenchStore.clientData
        var passes: [[[UInt8]]] = []
        for _ in 0..<Self.passes(rounds) { passes.append(try devices.map { try $0.assert(clientData: clientData) }) }
        if !json {
            let seconds = String(format: "%.1f", started.duration(to: clock.now) / .seconds(1))
            print("stored \(keys) keys and signed \(Self.passes(rounds)) assertions for each in \(seconds) s")
        }

        let store = try await database.location.open()
        let verifier = try AppAttestVerifier(
            configuration: .init(apps: [appID: [.production]], trustAnchor: authority.trustAnchor))
        let missing = AppAttestService(
            verifier: verifier, store: store, keyCacheLimits: .init(capacity: cache, maximumAge: 86_400))
        let hitting = AppAttestService(
            verifier: verifier, store: store,
            keyCacheLimits: .init(capacity: keys, maximumAge: 86_400))
        let keyIDs = devices.map(\.keyID)
        var misses: [PassFigures] = []
        var hits: [PassFigures] = []
        do {
            _ = try await pass(missing, keyIDs, passes[0], clientData)
            _ = try await pass(hitting, keyIDs, passes[1], clientData)
            for round in 0..<rounds {
                let first = passes[2 + 2 * round], second = passes[3 + 2 * round]
                if round % 2 == 0 {
                    misses.append(try await pass(missing, keyIDs, first, clientData))
                    hits.append(try await pass(hitting, keyIDs, second, clientData))
                } else {
                    hits.append(try await pass(hitting, keyIDs, first, clientData))
                    misses.append(try await pass(missing, keyIDs, second, clientData))
                }
                if !json {
                    print(
                        "round \(round + 1): misses \(misses[round].description), hits \(hits[round].description)")
                }
            }
        } catch {
            await store.close()
            throw error
        }
        await store.close()
        let miss = Self.median(misses.map(\.cpuPerAssertion))
        let hit = Self.median(hits.map(\.cpuPerAssertion))
        let missRate = Self.median(misses.map(\.rate))
        let hitRate = Self.median(hits.map(\.rate))
        let ratio = String(format: "%.3f", missRate / hitRate)
        if json {
            print(
                "{\"backend\":\"\(backend)\",\"keys\":\(keys),\"cache\":\(cache),\"clients\":\(clients),\"rounds\":\(rounds),"
                    + "\"missesPerSecond\":\(Int(missRate.rounded())),\"hitsPerSecond\":\(Int(hitRate.rounded())),"
                    + "\"missRateRatio\":\(ratio),"
                    + "\"missCPUMicroseconds\":\(Int(miss.rounded())),\"hitCPUMicroseconds\":\(Int(hit.rounded())),"
                    + "\"missCostMicroseconds\":\(Int((miss - hit).rounded()))}")
        } else {
            print(
                "RESULT backend=\(backend) keys=\(keys) cache=\(cache) clients=\(clients) rounds=\(rounds) "
                    + "miss_rps=\(Int(missRate.rounded())) hit_rps=\(Int(hitRate.rounded())) miss_rate_ratio=\(ratio) "
                    + "cpu_us_miss=\(Int(miss.rounded())) cpu_us_hit=\(Int(hit.rounded())) "
                    + "miss_cost_us=\(Int((miss - hit).rounded()))")
        }
    }

    /// The most keys: with every key cached, and its device and assertions held, about 2 GiB of memory at most.
    static let maximumKeys = 1_000_000
    /// The most assertions signed beforehand (about 150 bytes each).
    static let maximumAssertions = 6_000_000

    /// Passes for `rounds`: one to fill each service's cache, then a misses pass and a hits pass a round.
    static func passes(_ rounds: Int) -> Int { 2 + 2 * rounds }

    /// One pass's figures.
    struct PassFigures {
        var rate: Double
        var cpuPerAssertion: Double
        var description: String {
            "\(Int(rate.rounded())) assertions/s, \(Int(cpuPerAssertion.rounded())) µs of CPU each"
        }
    }

    /// Every key's assertion of one pass, each client taking the keys whose index is its own modulo the clients, in
    /// order; all must be accepted.
    private func pass(_ service: AppAttestService, _ keyIDs: [KeyID], _ assertions: [[UInt8]], _ clientData: [UInt8])
        async throws -> PassFigures
    {
        let clock = ContinuousClock()
        let cpu = Self.processCPU()
        let start = clock.now
        let clients = clients
        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in 0..<clients {
                group.addTask {
                    for index in stride(from: client, to: keyIDs.count, by: clients) {
                        _ = try await service.authenticateAssertion(
                            assertions[index], clientData: clientData, keyID: keyIDs[index])
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = start.duration(to: clock.now) / .seconds(1)
        let used = Self.processCPU() - cpu
        return PassFigures(
            rate: Double(keyIDs.count) / elapsed, cpuPerAssertion: used * 1e6 / Double(keyIDs.count))
    }

    /// The process's user and system CPU time, in seconds.
    static func processCPU() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}
#endif  // Service
