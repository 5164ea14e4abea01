#if Service
import AppAttestCommandSupport
import AppAttest
import AppAttestPostgres
import AppAttestSQLite
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
/// whose cache is smaller than the keys (the default 10,000 entries: with round-robin each assertion a miss, a read of
/// the store, and an eviction). Both are measured in the same run, in turns, with the process's CPU time per assertion
/// beside the rate, so that the difference is the miss's cost without HTTP and without a load generator sharing the
/// machine (README, “Scale”).
struct BenchKeys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract:
            "Measure what a key cache miss costs: assertions round-robin over many keys, every one cached or none."
    )

    @Option(help: "sqlite or postgres.") var backend: String = "sqlite"
    @Option(
        help:
            "A new SQLite file, kept (default: a temporary file), or a PostgreSQL URL (default: $APPATTEST_POSTGRES_URL) of a database for benchmarks: the keys are added to it."
    )
    var database: String?
    @Option(help: "Keys stored.") var keys: Int = 100_000
    @Option(help: "The key cache of the service that misses: fewer entries than keys.") var cache: Int = 10_000
    @Option(help: "Concurrent clients, each with its share of the keys.") var clients: Int = 32
    @Option(help: "Rounds: each measures misses, then hits (after a pass that fills the cache).") var rounds: Int = 2
    @Flag(help: "Print one JSON object.") var json = false

    func run() async throws {
        guard (100...2_000_000).contains(keys), (1...1024).contains(clients), clients <= keys,
            (1...10).contains(rounds), (1..<keys).contains(cache)
        else {
            throw ValidationError(
                "need 100 ≤ keys ≤ 2,000,000, 1 ≤ clients ≤ min(1024, keys), 1 ≤ rounds ≤ 10, 1 ≤ cache < keys")
        }
        // Every assertion is signed and held before the first pass: about 150 bytes each.
        guard keys * 3 * rounds <= Self.maximumAssertions else {
            throw ValidationError("keys × 3 × rounds must be at most \(Self.maximumAssertions) (the assertions held)")
        }
        let location: StoreLocation
        var temporary: String?
        switch backend {
        case "sqlite":
            if let database {
                guard case .sqlite(let path) = try StoreLocation(database) else {
                    throw ValidationError("--backend sqlite needs --database sqlite:PATH")
                }
                // Its own file: a benchmark adds keys, and must not add them to a database in use.
                guard !FileManager.default.fileExists(atPath: path) else {
                    throw ValidationError("--database names a file that exists: give a new one")
                }
                location = .sqlite(path: path)
            } else {
                let path = FileManager.default.temporaryDirectory.appendingPathComponent(
                    "appattest-bench-\(UUID().uuidString).sqlite"
                ).path
                temporary = path
                location = .sqlite(path: path)
            }
        case "postgres":
            guard let spec = database ?? ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_URL"] else {
                throw ValidationError("give --database postgres://… or set APPATTEST_POSTGRES_URL")
            }
            guard case .postgres = try StoreLocation(spec) else {
                throw ValidationError("--backend postgres needs a postgres:// URL")
            }
            location = try StoreLocation(spec)
        default: throw ValidationError("--backend is sqlite or postgres")
        }
        defer {
            if let temporary {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: temporary + suffix) }
            }
        }
        let authority = try TestCertificateAuthority(name: "Bench")
        let appID = try AppID("BENCH12345.com.example.bench")
        let clock = ContinuousClock()
        let started = clock.now
        let devices = try (0..<keys).map { _ in try SimulatedDevice(authority: authority, appID: appID) }
        try await LoadCommand.Prepare.seed(devices, into: location, receipt: SimulatedDevice.placeholderReceipt)
        // Three passes a round (misses, filling the cache, hits), each with the next counter of every key; signed
        // before any is timed.
        let clientData = BenchStore.clientData
        var passes: [[[UInt8]]] = []
        for _ in 0..<(3 * rounds) { passes.append(try devices.map { try $0.assert(clientData: clientData) }) }
        if !json {
            let seconds = String(format: "%.1f", Self.seconds(started.duration(to: clock.now)))
            print("stored \(keys) keys and signed \(3 * rounds) assertions for each in \(seconds) s")
        }

        let store: any AppAttestStore
        switch location {
        case .sqlite(let path): store = try SQLiteAppAttestStore(path: path)
        case .postgres(let url): store = try await PostgresAppAttestStore.connect(url: url)
        }
        let verifier = try AppAttestVerifier(
            configuration: .init(apps: [appID: [.production]], trustAnchor: authority.trustAnchor))
        let missing = AppAttestService(
            verifier: verifier, store: store, keyCacheLimits: .init(capacity: cache, maximumAge: 86_400))
        let hitting = AppAttestService(
            verifier: verifier, store: store,
            keyCacheLimits: .init(capacity: keys, maximumAge: 86_400))
        let keyIDs = devices.map(\.keyID)
        var misses: [Measurement] = []
        var hits: [Measurement] = []
        do {
            for round in 0..<rounds {
                misses.append(try await pass(missing, keyIDs, passes[3 * round], clientData))
                _ = try await pass(hitting, keyIDs, passes[3 * round + 1], clientData)
                hits.append(try await pass(hitting, keyIDs, passes[3 * round + 2], clientData))
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
        if json {
            print(
                "{\"backend\":\"\(backend)\",\"keys\":\(keys),\"cache\":\(cache),\"clients\":\(clients),\"rounds\":\(rounds),"
                    + "\"missesPerSecond\":\(Int(missRate.rounded())),\"hitsPerSecond\":\(Int(hitRate.rounded())),"
                    + "\"missCPUMicroseconds\":\(Int(miss.rounded())),\"hitCPUMicroseconds\":\(Int(hit.rounded()))}")
        } else {
            print(
                "RESULT backend=\(backend) keys=\(keys) cache=\(cache) clients=\(clients) rounds=\(rounds) "
                    + "miss_rate_ratio=\(String(format: "%.3f", missRate / hitRate)) "
                    + "cpu_us_miss=\(Int(miss.rounded())) cpu_us_hit=\(Int(hit.rounded())) "
                    + "miss_cost_us=\(Int((miss - hit).rounded()))")
        }
    }

    /// The most assertions signed beforehand (about a gigabyte).
    static let maximumAssertions = 6_000_000

    /// One pass's figures.
    struct Measurement {
        var rate: Double
        var cpuPerAssertion: Double
        var description: String {
            "\(Int(rate.rounded())) assertions/s, \(Int(cpuPerAssertion.rounded())) µs of CPU each"
        }
    }

    /// Every key's assertion of one pass, each client taking the keys whose index is its own modulo the clients, in
    /// order; all must be accepted.
    private func pass(_ service: AppAttestService, _ keyIDs: [KeyID], _ assertions: [[UInt8]], _ clientData: [UInt8])
        async throws -> Measurement
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
        let elapsed = Self.seconds(start.duration(to: clock.now))
        let used = Self.processCPU() - cpu
        return Measurement(
            rate: Double(keyIDs.count) / elapsed, cpuPerAssertion: used * 1e6 / Double(keyIDs.count))
    }

    /// The process's user and system CPU time, in seconds.
    static func processCPU() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}
#endif  // Service
