#if SQLite && PostgreSQL
import AppAttest
import AppAttestSQLite
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Crypto
import Foundation
import GRDB
import Testing

/// Several processes on one store, and a process killed in the middle of a load (SIGKILL).
@Suite("Processes sharing a store")
struct MultiProcessTests {
    static var processBackends: [Backend] { Backend.available.filter { $0 != .memory } }

    /// The worker executable, built beside the test bundle.
    static let worker: URL = {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("appattest-store-worker")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent(".build/debug/appattest-store-worker")
    }()

    /// A registered device whose private key is in a file the workers read.
    func setUp(_ backend: Backend) async throws -> (Harness, SimulatedDevice, String) {
        let harness = try await Harness(backend)
        let device = try await harness.registeredDevice()
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent(
            "appattest-key-\(UUID().uuidString)")
        try device.privateKey.rawRepresentation.write(to: keyFile)
        return (harness, device, keyFile.path)
    }

    func launch(_ arguments: [String], output: URL, window: Int? = nil) throws -> Process {
        let process = Process()
        process.executableURL = Self.worker
        process.arguments = arguments
        if let window {
            process.environment = ProcessInfo.processInfo.environment.merging(["APPATTEST_WINDOW": "\(window)"]) {
                $1
            }
        }
        #expect(FileManager.default.createFile(atPath: output.path, contents: nil))
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Waits without blocking a cooperative thread (`waitUntilExit` would stall every other test on 2 cores).
    func wait(_ process: Process) async throws {
        while process.isRunning { try await Task.sleep(nanoseconds: 10_000_000) }
    }

    func lines(_ url: URL) -> [String] {
        (try? String(contentsOf: url, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
    }

    func outputFile() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("appattest-out-\(UUID().uuidString)")
    }

    @Test("two processes, 32 copies each of one assertion: exactly one accepted", arguments: processBackends)
    func sameCounterAcrossProcesses(_ backend: Backend) async throws {
        let (harness, device, keyFile) = try await setUp(backend)
        defer { harness.close() }
        let outputs = [outputFile(), outputFile()]
        let processes = try outputs.map {
            try launch([harness.spec!, keyFile, Harness.appID.rawValue, "same-counter", "1", "32"], output: $0)
        }
        for process in processes { try await wait(process) }
        let accepted = outputs.flatMap(lines).compactMap { line -> Int? in
            guard line.hasPrefix("done accepted=") else { return nil }
            return Int(line.dropFirst("done accepted=".count))
        }
        #expect(accepted.count == 2, "both workers finished: \(outputs.flatMap(lines))")
        #expect(accepted.reduce(0, +) == 1)
        #expect(try await harness.store.key(device.keyID)?.key.counter == 1)
    }

    @Test("two processes racing through the same counters: no counter accepted twice", arguments: processBackends)
    func sequencesAcrossProcesses(_ backend: Backend) async throws {
        let (harness, device, keyFile) = try await setUp(backend)
        defer { harness.close() }
        let outputs = [outputFile(), outputFile()]
        let processes = try outputs.map {
            try launch([harness.spec!, keyFile, Harness.appID.rawValue, "sequence", "1", "120"], output: $0)
        }
        for process in processes { try await wait(process) }
        let accepted = outputs.flatMap(lines).filter { $0.hasPrefix("accepted ") }.compactMap {
            UInt32($0.split(separator: " ")[1])
        }
        #expect(!accepted.isEmpty)
        #expect(Set(accepted).count == accepted.count, "a counter was accepted twice")
        #expect(try await harness.store.key(device.keyID)?.key.counter == accepted.max())
        #expect(accepted.max() == 120)
    }

    @Test(
        "SIGKILL in the middle of a load: the stored counter is the last accepted one, no challenge works twice",
        arguments: processBackends)
    func killedMidLoad(_ backend: Backend) async throws {
        let (harness, device, keyFile) = try await setUp(backend)
        defer { harness.close() }
        let output = outputFile()
        let process = try launch(
            [harness.spec!, keyFile, Harness.appID.rawValue, "sequence", "1", "1000000", "challenge"], output: output)
        let deadline = Date().addingTimeInterval(60)
        while lines(output).filter({ $0.hasPrefix("accepted ") }).count < 40, Date() < deadline, process.isRunning {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        kill(process.processIdentifier, SIGKILL)
        try await wait(process)
        #expect(process.terminationReason == .uncaughtSignal)
        let log = lines(output)
        let accepted = log.filter { $0.hasPrefix("accepted ") }.map { $0.split(separator: " ") }
        let tried = log.filter { $0.hasPrefix("trying ") }.map { $0.split(separator: " ") }
        #expect(accepted.count >= 40, "\(log.suffix(3))")
        let highest = accepted.compactMap { UInt32($0[1]) }.max() ?? 0
        let inFlight = tried.compactMap { UInt32($0[1]) }.max() ?? 0
        // Stored: the last accepted counter, or the one in flight when the kill came if its update committed. A
        // PostgreSQL server finishes (and commits) a statement whose client was killed: wait until the stored counter
        // has settled before reading it.
        var stored = try await harness.store.key(device.keyID)?.key.counter ?? 0
        for _ in 0..<20 {
            try await Task.sleep(nanoseconds: 100_000_000)
            let again = try await harness.store.key(device.keyID)?.key.counter ?? 0
            if again == stored { break }
            stored = again
        }
        #expect(
            stored == highest || (stored == inFlight && inFlight == highest + 1),
            "stored \(stored), accepted \(highest), in flight \(inFlight)")
        // Every challenge of an accepted assertion is gone; the in-flight one at most once.
        for line in accepted {
            let challenge = hexBytes(String(line[2]))
            #expect(
                try await harness.store.challenge(challenge) == nil,
                "challenge of counter \(line[1]) still usable")
        }
        // And the store still works: the next assertion after the stored counter is accepted.
        var options = SimulatedDevice.AssertionOptions()
        options.counter = stored + 1
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: [1], options), clientData: [1], keyID: device.keyID)
        if backend == .sqlite, let spec = harness.spec {
            let queue = try DatabaseQueue(path: String(spec.dropFirst("sqlite:".count)))
            let result = try await queue.read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") }
            #expect(result == "ok")
        }
    }
}

extension MultiProcessTests {
    @Test(
        "reorder window, two processes: 64 distinct counters shuffled across both, all accepted",
        arguments: processBackends)
    func windowAcrossProcesses(_ backend: Backend) async throws {
        let (harness, device, keyFile) = try await setUp(backend)
        defer { harness.close() }
        let counters = Array(UInt32(1)...64).shuffled()
        let halves = [counters.prefix(32), counters.suffix(32)].map { $0.map(String.init).joined(separator: ",") }
        let outputs = [outputFile(), outputFile()]
        let processes = try zip(halves, outputs).map { half, output in
            try launch([harness.spec!, keyFile, Harness.appID.rawValue, "counters", half], output: output, window: 64)
        }
        for process in processes { try await wait(process) }
        let accepted = outputs.flatMap(lines).filter { $0.hasPrefix("accepted ") }.compactMap {
            UInt32($0.split(separator: " ")[1])
        }
        #expect(
            accepted.sorted() == Array(UInt32(1)...64), "\(outputs.flatMap(lines).filter { $0.hasPrefix("rejected") })")
        #expect(try await harness.store.key(device.keyID)?.key.counter == 64)
        // Both again: every one is a replay.
        let again = [outputFile(), outputFile()]
        let replays = try zip(halves, again).map { half, output in
            try launch([harness.spec!, keyFile, Harness.appID.rawValue, "counters", half], output: output, window: 64)
        }
        for process in replays { try await wait(process) }
        #expect(again.flatMap(lines).filter { $0.hasPrefix("accepted ") }.isEmpty)
        #expect(again.flatMap(lines).filter { $0.hasPrefix("rejected ") }.count == 64)
    }

    @Test(
        "reorder window, two processes, 32 copies each of one in-window counter: exactly one accepted",
        arguments: processBackends)
    func windowSameCounterAcrossProcesses(_ backend: Backend) async throws {
        let (harness, device, keyFile) = try await setUp(backend)
        defer { harness.close() }
        // The highest is 40, so counter 30 lies inside the window, below it.
        var options = SimulatedDevice.AssertionOptions()
        options.counter = 40
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: [4, 0], options), clientData: [4, 0], keyID: device.keyID)
        let outputs = [outputFile(), outputFile()]
        let processes = try outputs.map {
            try launch(
                [harness.spec!, keyFile, Harness.appID.rawValue, "same-counter", "30", "32"], output: $0, window: 64)
        }
        for process in processes { try await wait(process) }
        let accepted = outputs.flatMap(lines).compactMap { line -> Int? in
            guard line.hasPrefix("done accepted=") else { return nil }
            return Int(line.dropFirst("done accepted=".count))
        }
        #expect(accepted.count == 2 && accepted.reduce(0, +) == 1, "\(outputs.flatMap(lines))")
        #expect(try await harness.store.key(device.keyID)?.key.counter == 40)
    }

    @Test(
        "reorder window, SIGKILL mid-load with 8 in flight: every accepted counter and challenge stays used",
        arguments: processBackends)
    func windowKilledMidLoad(_ backend: Backend) async throws {
        let (harness, device, keyFile) = try await setUp(backend)
        defer { harness.close() }
        let output = outputFile()
        let process = try launch(
            [harness.spec!, keyFile, Harness.appID.rawValue, "sequence", "1", "1000000", "challenge"], output: output,
            window: 64)
        let deadline = Date().addingTimeInterval(60)
        while lines(output).filter({ $0.hasPrefix("accepted ") }).count < 80, Date() < deadline, process.isRunning {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        kill(process.processIdentifier, SIGKILL)
        try await wait(process)
        #expect(process.terminationReason == .uncaughtSignal)
        let log = lines(output)
        let accepted = log.filter { $0.hasPrefix("accepted ") }.map { $0.split(separator: " ") }
        let tried = log.filter { $0.hasPrefix("trying ") }.compactMap { UInt32($0.split(separator: " ")[1]) }
        #expect(accepted.count >= 80, "\(log.suffix(3))")
        let highest = accepted.compactMap { UInt32($0[1]) }.max() ?? 0
        let stored = try await harness.store.key(device.keyID)?.key.counter ?? 0
        #expect(stored >= highest && stored <= (tried.max() ?? 0), "stored \(stored), accepted up to \(highest)")
        // Nothing accepted is lost: each accepted counter is refused again, its challenge is gone.
        let service = AppAttestService(
            verifier: harness.service.verifier, store: harness.store, counterPolicy: .reorderWindow(64))
        for line in accepted {
            let counter = try #require(UInt32(line[1]))
            #expect(try await harness.store.challenge(hexBytes(String(line[2]))) == nil, "challenge of \(counter)")
            guard stored - counter < 63 else { continue }
            var options = SimulatedDevice.AssertionOptions()
            options.counter = counter
            await expectServiceError(.counterReplayed, "counter \(counter) accepted again") {
                _ = try await service.authenticateAssertion(
                    try device.assert(clientData: [9], options), clientData: [9], keyID: device.keyID)
            }
        }
        if backend == .sqlite, let spec = harness.spec {
            let queue = try DatabaseQueue(path: String(spec.dropFirst("sqlite:".count)))
            let result = try await queue.read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") }
            #expect(result == "ok")
        }
    }
}

func hexBytes(_ text: String) -> [UInt8] {
    let digits = Array(text.utf8)
    return stride(from: 0, to: digits.count - 1, by: 2).compactMap {
        UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)
    }
}
#endif  // SQLite && PostgreSQL
