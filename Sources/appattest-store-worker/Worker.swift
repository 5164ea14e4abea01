#if SQLite && PostgreSQL
import AppAttest
import AppAttestPostgres
import AppAttestSQLite
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Crypto
import Foundation

/// Drives an App Attest store from its own process, for the multi-process and SIGKILL tests:
///
///     appattest-store-worker sqlite:PATH|postgres://URL KEYFILE APPID same-counter COUNTER COPIES
///     appattest-store-worker sqlite:PATH|postgres://URL KEYFILE APPID sequence FROM COUNT [challenge]
///     appattest-store-worker sqlite:PATH|postgres://URL KEYFILE APPID counters C1,C2,…
///
/// With `APPATTEST_WINDOW=N` in the environment the service accepts counters within a reorder window of N; then
/// `sequence` sends its counters eight at a time, shuffled and concurrently, and `counters` sends all of its list at
/// once.
///
/// KEYFILE holds the device's raw P-256 private key; the key must already be registered. Every line is written
/// unbuffered: `trying N` before an assertion is submitted, `accepted N [challenge-hex]` once it is stored,
/// `rejected N code`, and `done accepted=K` at the end.
@main
struct Worker {
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            try await run(arguments)
        } catch {
            emit("error \(error)")
            exit(1)
        }
    }

    static func emit(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func openStore(_ spec: String) async throws -> any AppAttestStore {
        switch try StoreLocation(spec) {
        case .sqlite(let path): try SQLiteAppAttestStore(path: path)
        case .postgres(let url): try await PostgresAppAttestStore.connect(url: url)
        }
    }

    static func run(_ arguments: [String]) async throws {
        guard arguments.count >= 5 else { throw WorkerError(description: "usage: STORE KEYFILE APPID COMMAND ARGS…") }
        let store = try await openStore(arguments[0])
        let key = try P256.Signing.PrivateKey(
            rawRepresentation: try Data(contentsOf: URL(fileURLWithPath: arguments[1])))
        let appID = try AppID(arguments[2])
        let device = try SimulatedDevice(
            authority: try TestCertificateAuthority(name: "Worker"), appID: appID, privateKey: key)
        // Assertions need only the stored key: the trust anchor of the verifier plays no part in them.
        let verifier = try AppAttestVerifier(configuration: .init(apps: [appID: [.development, .production]]))
        let window = ProcessInfo.processInfo.environment["APPATTEST_WINDOW"].flatMap(Int.init)
        let service = AppAttestService(
            verifier: verifier, store: store,
            counterPolicy: window.map { .reorderWindow($0) } ?? .strictlyIncreasing)
        switch arguments[3] {
        case "same-counter":
            guard arguments.count == 6, let counter = UInt32(arguments[4]), let copies = Int(arguments[5]) else {
                throw WorkerError(description: "same-counter COUNTER COPIES")
            }
            var options = SimulatedDevice.AssertionOptions()
            options.counter = counter
            let clientData = Array("same-counter \(counter)".utf8)
            let assertion = try device.assert(clientData: clientData, options)
            let accepted = await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<copies {
                    group.addTask {
                        (try? await service.authenticateAssertion(
                            assertion, clientData: clientData, keyID: device.keyID)) != nil
                    }
                }
                var count = 0
                for await ok in group where ok { count += 1 }
                return count
            }
            emit("done accepted=\(accepted)")
        case "sequence":
            guard arguments.count >= 6, let from = UInt32(arguments[4]), let count = UInt32(arguments[5]) else {
                throw WorkerError(description: "sequence FROM COUNT [challenge]")
            }
            let useChallenges = arguments.count > 6 && arguments[6] == "challenge"
            // A worker never outlives a test that forgot it: it stops after two minutes.
            let deadline = Date().addingTimeInterval(120)
            let batch = window == nil ? 1 : 8
            var accepted = 0
            var next = from
            while next < from + count, Date() < deadline {
                let counters = Array(next..<min(next + UInt32(batch), from + count)).shuffled()
                next += UInt32(counters.count)
                accepted += await withTaskGroup(of: Int.self) { group in
                    for counter in counters {
                        group.addTask {
                            (try? await send(counter, service: service, device: device, challenge: useChallenges))
                                ?? 0
                        }
                    }
                    return await group.reduce(0, +)
                }
            }
            emit("done accepted=\(accepted)")
        case "counters":
            let counters = arguments[4].split(separator: ",").compactMap { UInt32($0) }
            let accepted = await withTaskGroup(of: Int.self) { group in
                for counter in counters {
                    group.addTask {
                        (try? await send(counter, service: service, device: device, challenge: false)) ?? 0
                    }
                }
                return await group.reduce(0, +)
            }
            emit("done accepted=\(accepted)")
        default:
            throw WorkerError(description: "unknown command \(arguments[3])")
        }
        if let postgres = store as? PostgresAppAttestStore { postgres.shutdown() }
    }
}

extension Worker {
    /// Sends one assertion with `counter` (and a fresh challenge when asked); returns 1 when it was accepted.
    static func send(
        _ counter: UInt32, service: AppAttestService, device: SimulatedDevice, challenge useChallenge: Bool
    )
        async throws -> Int
    {
        var challenge: [UInt8]?
        var clientData = Array("sequence \(counter)".utf8)
        if useChallenge {
            let issued = try await service.issueChallenge(
                purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
            challenge = issued.challenge
            clientData = issued.challenge + Array("|request".utf8)
        }
        var options = SimulatedDevice.AssertionOptions()
        options.counter = counter
        let assertion = try device.assert(clientData: clientData, options)
        let binding = try AppAttestClientData.opaque(clientData, challenge: challenge)
        emit("trying \(counter) \(challenge.map { $0.hexString } ?? "-")")
        do {
            _ = try await service.authenticateAssertion(assertion, clientData: binding, keyID: device.keyID)
            emit("accepted \(counter) \(challenge.map { $0.hexString } ?? "-")")
            return 1
        } catch {
            emit("rejected \(counter) \(error.code)")
            return 0
        }
    }
}

struct WorkerError: Error, CustomStringConvertible {
    var description: String
}
#else
/// Without the SQLite and PostgreSQL traits there is no store to drive.
@main
struct Worker {
    static func main() {
        print("appattest-store-worker needs the SQLite and PostgreSQL traits (swift build --enable-all-traits)")
    }
}
#endif  // SQLite && PostgreSQL
