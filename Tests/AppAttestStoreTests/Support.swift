import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Crypto
import Foundation
import Logging
import Synchronization
import Testing

#if PostgreSQL
import AppAttestPostgres
#endif
#if SQLite
import AppAttestSQLite
#endif

/// Runs `body` in a task of its own and waits at most `limit` for it: whether it finished by then, and the task, to
/// await once whatever holds it is released. A batcher that keeps a request waiting fails the test here, instead of
/// hanging the suite.
func finishes<T: Sendable>(within limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws
    -> (Bool, Task<T, any Error>)
{
    let done = Mutex(false)
    let task = Task {
        defer { done.withLock { $0 = true } }
        return try await body()
    }
    let start = ContinuousClock.now
    while !done.withLock({ $0 }), ContinuousClock.now - start < limit { try await Task.sleep(for: .milliseconds(5)) }
    return (done.withLock { $0 }, task)
}

/// What a component logged, by level: a logger whose handler records every message (with its metadata's values).
final class LogRecords: Sendable {
    private let records = Mutex<[(Logger.Level, String)]>([])

    var logger: Logger {
        Logger(label: "test") { _ in Handler(records: self) }
    }

    func messages(at level: Logger.Level) -> [String] {
        records.withLock { $0.filter { $0.0 == level }.map(\.1) }
    }

    private struct Handler: LogHandler {
        let records: LogRecords
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let values = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            let line = ([event.message.description] + values).joined(separator: " ")
            records.records.withLock { $0.append((event.level, line)) }
        }
    }
}

/// The backends every contract test runs against. PostgreSQL needs `APPATTEST_POSTGRES_URL` (`.ci/run` starts a
/// server and sets it); without it the PostgreSQL cases are disabled locally, and fail under CI.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, sqlite, postgres

    var testDescription: String { rawValue }

    static var postgresURL: String? { ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_URL"] }
    static var available: [Backend] {
        #if SQLite && PostgreSQL
        if postgresURL == nil && ProcessInfo.processInfo.environment["CI"] != nil {
            // Under CI the PostgreSQL cases must run: fail loudly rather than skip.
            return allCases
        }
        return postgresURL == nil ? [.memory, .sqlite] : allCases
        #else
        // Built without the store traits (`swift test --enable-all-traits` runs them all).
        return [.memory]
        #endif
    }

    /// A store, and how another process can open the same one (nil for memory).
    func open() async throws -> (store: any AppAttestStore, spec: String?) {
        switch self {
        case .memory:
            return (MemoryAppAttestStore(), nil)
        #if SQLite
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent(
                "appattest-\(UUID().uuidString).sqlite"
            ).path
            return (try SQLiteAppAttestStore(path: path), "sqlite:\(path)")
        #endif
        #if PostgreSQL
        case .postgres:
            guard let url = Self.postgresURL else {
                Issue.record("APPATTEST_POSTGRES_URL is not set: run .ci/postgres.sh start and export it")
                throw StoreError(.unavailable, "no PostgreSQL")
            }
            // The suite runs many PostgreSQL tests at once on a small machine: the default 5 s per operation is
            // a production bound, not a test's (the deadline itself is tested in StoreDeadlineTests).
            let store = try await PostgresAppAttestStore.connect(url: url, operationTimeout: .seconds(60))
            return (store, url)
        #endif
        #if !(SQLite && PostgreSQL)
        default:
            throw StoreError(.unavailable, "\(self) needs its trait")
        #endif
        }
    }
}

/// A clock tests can move.
final class TestClock: Sendable {
    private let time: Mutex<Date>
    init(_ start: Date) { time = Mutex(start) }
    var now: Date { time.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// A service on a backend with a simulated device and its test authority.
struct Harness {
    static let authority = try! TestCertificateAuthority(name: "Store")
    static let appID = try! AppID("STORE12345.com.example.store")

    let store: any AppAttestStore
    let spec: String?
    let clock: TestClock
    let service: AppAttestService

    /// - Parameter start: the service clock's start. Tests that purge expired challenges start in the past, so
    ///   that on a shared PostgreSQL they delete only their own.
    ///   - policies: the fleet policies (by default none of them: no attestation budget, no limit of keys per user,
    ///     so that tests sharing a PostgreSQL database, with clocks of their own, do not share a budget).
    init(
        _ backend: Backend, start: Date = Date(),
        policies: AppAttestService.Policies = .init(
            defaultPolicy: .init(attestationsPerSecond: nil, maximumKeysPerUser: nil))
    ) async throws {
        clock = TestClock(start)
        (store, spec) = try await backend.open()
        self.policies = policies
        service = try Self.service(store: store, policies: policies, clock: clock)
    }

    private let policies: AppAttestService.Policies

    private static func service(store: any AppAttestStore, policies: AppAttestService.Policies, clock: TestClock) throws
        -> AppAttestService
    {
        let verifier = try AppAttestVerifier(
            configuration: .init(
                apps: [Self.appID: [.production, .development]], trustAnchor: Self.authority.trustAnchor))
        return AppAttestService(verifier: verifier, store: store, policies: policies, now: { clock.now })
    }

    /// Another service on the same store, clock and policies, with a key cache of its own (another instance, or
    /// this one restarted).
    func freshService() throws -> AppAttestService {
        try Self.service(store: store, policies: policies, clock: clock)
    }

    func device(counter: UInt32 = 0) throws -> SimulatedDevice {
        try SimulatedDevice(authority: Self.authority, appID: Self.appID, counter: counter)
    }

    /// A fresh attestation object for a fresh challenge, as an app would send it.
    func attest(_ device: SimulatedDevice, userID: String? = nil) async throws -> (object: [UInt8], challenge: [UInt8])
    {
        let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, userID: userID)
            .challenge
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Date()
        return (try device.attest(challenge: challenge, options), challenge)
    }

    /// A registered device.
    func registeredDevice(userID: String? = nil) async throws -> SimulatedDevice {
        let device = try device()
        let (object, challenge) = try await attest(device, userID: userID)
        _ = try await service.registerAttestation(object, keyID: device.keyID, challenge: challenge, userID: userID)
        return device
    }

    func close() {
        #if PostgreSQL
        if let postgres = store as? PostgresAppAttestStore { postgres.shutdown() }
        #endif
    }
}

func expectServiceError(
    _ code: AppAttestServiceError.Code, verification: AppAttestError.Code? = nil, _ comment: String = "",
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(code), but it succeeded. \(comment)", sourceLocation: sourceLocation)
    } catch let error as AppAttestServiceError {
        #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
        if let verification {
            #expect(error.verification?.code == verification, "\(comment): \(error)", sourceLocation: sourceLocation)
        }
    } catch {
        Issue.record("expected \(code), got \(error). \(comment)", sourceLocation: sourceLocation)
    }
}

/// A key stored at counter 7 before the reorder window existed: with a window of 64, no counter up to 7 is accepted,
/// 9 is, and then 8, which was never used, once.
func expectCountersBelowSevenUsed(
    _ store: any AppAttestStore, _ key: KeyID, sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    func accept(_ counter: UInt32) async throws -> AssertionAcceptanceOutcome {
        try await store.acceptAssertion(
            .init(keyID: key, counter: counter, counterPolicy: .reorderWindow(64), challenge: nil))
    }
    for counter: UInt32 in [6, 5, 1, 7] {
        #expect(
            try await accept(counter) == .counterRefused(highestCounter: 7),
            "counter \(counter) was accepted before the upgrade", sourceLocation: sourceLocation)
    }
    #expect(try await accept(9) == .accepted(highestCounter: 9), sourceLocation: sourceLocation)
    #expect(try await accept(8) == .accepted(highestCounter: 9), sourceLocation: sourceLocation)
    #expect(try await accept(8) == .counterRefused(highestCounter: 9), sourceLocation: sourceLocation)
}

/// Attested keys for tests that store many: each a real point (a record's keyId is its point's SHA-256), made once.
enum TestKeys {
    private static let made = Mutex<[AttestedPublicKey]>([])

    /// The `index`th key, the same for the same index throughout a test run. Keys are made outside the lock, so that
    /// a caller waits only for the keys it needs.
    static func publicKey(_ index: Int) -> AttestedPublicKey {
        while true {
            if let key = made.withLock({ $0.count > index ? $0[index] : nil }) { return key }
            let key = try! AttestedPublicKey(
                x963Representation: P256.Signing.PrivateKey().publicKey.x963Representation)
            made.withLock { $0.append(key) }
        }
    }

    /// A key record for the `index`th key.
    static func record(
        _ index: Int, appID: AppID = Harness.appID, environment: AppAttestEnvironment = .production,
        counter: UInt32 = 0, userID: String? = nil, receipt: [UInt8] = [], riskMetric: Int? = nil,
        createdAt: Date = Date(), revokedAt: Date? = nil
    ) -> KeyRecord {
        KeyRecord(
            key: AttestedKey(publicKey: publicKey(index), appID: appID, environment: environment, counter: counter),
            userID: userID, receipt: receipt, riskMetric: riskMetric, createdAt: createdAt,
            receiptUpdatedAt: createdAt, revokedAt: revokedAt)
    }
}

/// Another connection to a store that a harness opened, as another instance of the service would have.
struct ReopenedStore {
    let store: any AppAttestStore

    func close() {
        #if PostgreSQL
        if let postgres = store as? PostgresAppAttestStore { postgres.shutdown() }
        #endif
    }
}

extension Backend {
    /// The store `spec` names (``Harness/spec``), opened again.
    static func reopen(_ spec: String) async throws -> ReopenedStore {
        let location = try StoreLocation(spec)
        #if SQLite
        if case .sqlite(let path) = location { return ReopenedStore(store: try SQLiteAppAttestStore(path: path)) }
        #endif
        #if PostgreSQL
        if case .postgres(let url) = location {
            return ReopenedStore(
                store: try await PostgresAppAttestStore.connect(url: url, operationTimeout: .seconds(60)))
        }
        #endif
        throw StoreError(.unavailable, "cannot reopen a store of a trait not built")
    }
}
