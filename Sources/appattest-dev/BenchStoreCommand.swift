#if Service
import AppAttestCommandSupport
import AppAttest
import AppAttestPostgres
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import ArgumentParser
import Foundation

/// `appattest-dev bench store`: assertions per second through the whole service (load key, verify, consume nothing,
/// advance the counter atomically), with one client and with N concurrent clients, each with its own key.
struct BenchStore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Measure assertions/s through AppAttestService on a store backend, with 1 and N clients."
    )

    @Option(help: "memory, sqlite or postgres.") var backend: String = "sqlite"
    @Option(help: "SQLite file (default: a new temporary file) or PostgreSQL URL (default: $APPATTEST_POSTGRES_URL).")
    var database: String?
    @Option(help: "Concurrent clients for the second measurement.") var clients: Int = 16
    @Option(help: "Assertions per measurement (signed beforehand, outside the timing).") var assertions: Int = 4000
    @Flag(help: "Print one JSON object.") var json = false

    func run() async throws {
        guard clients >= 1, clients <= 1024, assertions >= clients, assertions <= 1_000_000 else {
            throw ValidationError("need 1 ≤ clients ≤ 1024 and clients ≤ assertions ≤ 1,000,000")
        }
        guard ["memory", "sqlite", "postgres"].contains(backend) else {
            throw ValidationError("--backend is memory, sqlite or postgres")
        }
        let store: any AppAttestStore
        // A temporary SQLite file of the bench's own is removed (with its log) when the bench ends.
        let onDisk =
            backend == "memory" ? nil : try BenchDatabase(backend: backend, database: database, newFileOnly: false)
        if let onDisk { store = try await onDisk.location.open() } else { store = MemoryAppAttestStore() }
        defer { (store as? PostgresAppAttestStore)?.shutdown() }
        defer { onDisk?.removeTemporary() }
        let authority = try TestCertificateAuthority(name: "Bench")
        let appID = try AppID("BENCH12345.com.example.bench")
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(apps: [appID: [.production]], trustAnchor: authority.trustAnchor)),
            store: store)
        var results: [(Int, Double)] = []
        for clientCount in Array(Set([1, clients])).sorted() {
            // One registered key per client; every assertion signed before the clock starts.
            var work: [(KeyID, [[UInt8]])] = []
            let perClient = assertions / clientCount
            for _ in 0..<clientCount {
                let device = try SimulatedDevice(authority: authority, appID: appID)
                let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
                    .challenge
                var options = SimulatedDevice.AttestationOptions()
                options.issuedAt = Date()
                _ = try await service.registerAttestation(
                    try device.attest(challenge: challenge, options), keyID: device.keyID, challenge: challenge)
                work.append(
                    (device.keyID, try (0..<perClient).map { _ in try device.assert(clientData: Self.clientData) }))
            }
            let clock = ContinuousClock()
            let start = clock.now
            let accepted = try await withThrowingTaskGroup(of: Int.self) { group in
                for (keyID, list) in work {
                    group.addTask {
                        var count = 0
                        for assertion in list {
                            _ = try await service.authenticateAssertion(
                                assertion, clientData: Self.clientData, keyID: keyID)
                            count += 1
                        }
                        return count
                    }
                }
                return try await group.reduce(0, +)
            }
            let elapsed = start.duration(to: clock.now)
            results.append((clientCount, Double(accepted) / (elapsed / .seconds(1))))
        }
        if onDisk?.isTemporary == true { await store.close() }
        if json {
            let fields = results.map { "\"clients\(String($0.0))\":\(Int($0.1.rounded()))" }.joined(separator: ",")
            print("{\"backend\":\"\(backend)\",\"assertions\":\(assertions),\(fields)}")
        } else {
            for (count, rate) in results {
                print("\(backend)  \(count) client\(count == 1 ? "" : "s"): \(Int(rate.rounded())) assertions/s")
            }
        }
    }

    static let clientData = Array("{\"method\":\"POST\",\"path\":\"/v1/order\"}".utf8)
}
#endif  // Service
