#if Service
import AppAttestCommandSupport
import AppAttest
import AppAttestWire
import AppAttestStore
import AppAttestTesting
import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore

/// `appattest-dev load`: simulated devices for load-testing `appattest serve` with wrk (Scripts/load.sh).
struct LoadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Simulated devices and request files for load-testing appattest serve (see Scripts/load.sh).",
        discussion: "The devices come from the test authority of `appattest-dev simulate authority --out DIR`.",
        subcommands: [Prepare.self, Check.self]
    )

    /// Registers devices on each server and writes the assertion request files.
    struct Prepare: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register simulated devices on each server and write assertion request files.",
            discussion: """
                Writes DIR/run-R.txt for R in 1…runs: one line per request, `DEVICE<TAB>JSON body` of \
                POST /v1/assertions/verify, ordered round-robin over the devices with increasing counters, so \
                that requests of one device are never in flight together. Run R holds counters after run R-1's.
                """)

        @Option var dir: String
        @Option(name: .customLong("url"), help: "A server (repeatable); every device is registered on each.")
        var urls: [String] = []
        @Option(
            help: """
                A store (sqlite:PATH or a postgres:// URL) to insert the devices' keys into directly, as registration \
                would store them, instead of or besides registering them on a server: for fleets too large to \
                register one attestation at a time (Scripts/scale.sh). Repeatable: every store gets the same keys. \
                Run it before the server opens the store.
                """)
        var seed: [String] = []
        @Option(
            name: .customLong("receipt-bytes"),
            help: """
                With --seed: store a receipt of N random bytes with each key instead of the simulator's placeholder \
                (36 bytes), so that the rows are the size a real fleet's are (an Apple receipt is 3.6–4.0 KB); at \
                most 65536.
                """)
        var receiptBytes: Int?
        @Option(help: "The caller's bearer token for the servers of --url (not needed with --seed alone).")
        var token: String?
        @Option(name: .customLong("app-id")) var appID: String
        @Option var devices: Int = 1000
        @Option var assertions: Int = 100
        @Option var runs: Int = 2
        @Option(
            help:
                "Also write DIR/run-grouped.txt: each device's counters in groups of N, adjacent and shuffled, so that N of its requests are in flight at once (for a server with a reorder window); 0 for none."
        )
        var grouped: Int = 0

        func run() async throws {
            guard !seed.isEmpty || !urls.isEmpty else { throw ValidationError("give --url or --seed") }
            guard urls.isEmpty || token != nil else { throw ValidationError("--url needs --token") }
            if let receiptBytes {
                guard !seed.isEmpty else { throw ValidationError("--receipt-bytes needs --seed") }
                guard (1...65536).contains(receiptBytes) else {
                    throw ValidationError("--receipt-bytes must be within 1 and 65536")
                }
            }
            // Every store checked before any is seeded: a mistake in the last must not leave the first half-done.
            var locations: [StoreLocation] = []
            for spec in seed {
                do { locations.append(try StoreLocation(spec)) } catch { throw ValidationError("--seed \(error)") }
            }
            guard Set(locations).count == locations.count else { throw ValidationError("a --seed is given twice") }
            let authority = try SimulateCommand.authority(dir)
            let app = try AppID(appID)
            let devices = try (0..<devices).map { _ in try SimulatedDevice(authority: authority, appID: app) }
            // One random receipt for every key: incompressible, as a real one's signatures and certificates are.
            let receipt = receiptBytes.map { count in (0..<count).map { _ in UInt8.random(in: 0...255) } }
            for location in locations {
                let seconds = try await Self.seed(
                    devices, into: location, receipt: receipt ?? SimulatedDevice.placeholderReceipt)
                print("seeded \(devices.count) devices in \(String(format: "%.1f", seconds)) s")
            }
            for url in urls {
                let start = Date()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (index, device) in devices.enumerated() {
                        if index >= 16 { try await group.next() }
                        group.addTask { try await register(device, url: url) }
                    }
                    try await group.waitForAll()
                }
                print(
                    "registered \(devices.count) devices on \(url) in \(String(format: "%.1f", -start.timeIntervalSinceNow)) s"
                )
            }
            for run in 1...runs {
                _ = FileManager.default.createFile(atPath: "\(dir)/run-\(run).txt", contents: nil)
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(dir)/run-\(run).txt"))
                var buffer = Data()
                for round in 0..<assertions {
                    for (index, device) in devices.enumerated() {
                        let clientData = Array("load run \(run) round \(round) device \(index)".utf8)
                        let assertion = try device.assert(clientData: clientData)
                        buffer.append(
                            Data(
                                """
                                \(index)\t{"keyId":"\(device.keyID.base64EncodedString)",\
                                "assertion":"\(Data(assertion).base64EncodedString())",\
                                "clientData":"\(Data(clientData).base64EncodedString())"}\n
                                """.utf8))
                    }
                    if buffer.count > 1 << 20 {
                        try handle.write(contentsOf: buffer)
                        buffer.removeAll(keepingCapacity: true)
                    }
                }
                try handle.write(contentsOf: buffer)
                try handle.close()
                print("wrote \(dir)/run-\(run).txt: \(devices.count * assertions) assertions")
            }
            if grouped > 0 {
                guard grouped <= 64 else { throw ValidationError("--grouped must be at most 64") }
                _ = FileManager.default.createFile(atPath: "\(dir)/run-grouped.txt", contents: nil)
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(dir)/run-grouped.txt"))
                var buffer = Data()
                for round in 0..<max(1, assertions / grouped) {
                    for (index, device) in devices.enumerated() {
                        var lines: [Data] = []
                        for member in 0..<grouped {
                            let clientData = Array("load grouped \(round) \(member) device \(index)".utf8)
                            let assertion = try device.assert(clientData: clientData)
                            lines.append(
                                Data(
                                    """
                                    \(index)\t{"keyId":"\(device.keyID.base64EncodedString)",\
                                    "assertion":"\(Data(assertion).base64EncodedString())",\
                                    "clientData":"\(Data(clientData).base64EncodedString())"}\n
                                    """.utf8))
                        }
                        for line in lines.shuffled() { buffer.append(line) }
                    }
                    if buffer.count > 1 << 20 {
                        try handle.write(contentsOf: buffer)
                        buffer.removeAll(keepingCapacity: true)
                    }
                }
                try handle.write(contentsOf: buffer)
                try handle.close()
                print("wrote \(dir)/run-grouped.txt: groups of \(grouped) per device, shuffled")
            }
        }

        /// Inserts each device's key as `appattest serve` stores it after the device's attestation: its point, App ID
        /// and environment, counter 0, no user, and `receipt` (the simulator's placeholder, as these devices have no
        /// receipt authority, or bytes of a real receipt's size, `--receipt-bytes`). Through the store's own
        /// `insertKey`, so the rows and the key's `attested` event are the store's; only the attestation's verification
        /// and HTTP round trips are skipped.
        /// - Returns: the seconds it took.
        @discardableResult
        static func seed(_ devices: [SimulatedDevice], into location: StoreLocation, receipt: [UInt8]) async throws
            -> Double
        {
            let store = try await location.open()
            let start = Date()
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (index, device) in devices.enumerated() {
                        if index >= 16 { try await group.next() }
                        group.addTask {
                            let now = Date()
                            let record = KeyRecord(
                                key: AttestedKey(
                                    publicKey: try AttestedPublicKey(x963Representation: device.publicKey),
                                    appID: device.appID, environment: device.environment, counter: 0),
                                userID: nil, receipt: receipt, riskMetric: nil,
                                createdAt: now, receiptUpdatedAt: now, revokedAt: nil)
                            guard case .inserted = try await store.insertKey(record, maximumKeysPerUser: nil) else {
                                throw InputError(description: "key \(index) is stored already")
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            } catch {
                await store.close()
                throw error
            }
            await store.close()
            return -start.timeIntervalSinceNow
        }

        func register(_ device: SimulatedDevice, url: String) async throws {
            struct Challenge: Decodable { var challenge: String }
            let token = token ?? ""
            let challenge = try JSONDecoder().decode(
                Challenge.self,
                from: try await post(url + "/v1/challenges", body: #"{"purpose":"attestation"}"#, token: token))
            guard let bytes = RequestBindingLayout.decodeBase64URL(challenge.challenge) else {
                throw InputError(description: "the server's challenge is not Base64URL")
            }
            let object = try device.attest(challenge: bytes)
            _ = try await post(
                url + "/v1/attestations",
                body: """
                    {"keyId":"\(device.keyID.base64EncodedString)",\
                    "attestationObject":"\(Data(object).base64EncodedString())","challenge":"\(challenge.challenge)"}
                    """, token: token)
        }
    }

    /// Compares the highest accepted counter of each key (from the wrk script) with the stored one.
    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check that every accepted assertion's counter is stored.",
            discussion: "ACCEPTED has lines `keyId(Base64) highest-accepted-counter`, as Scripts/load.lua writes.")

        @Option var url: String
        @Option var token: String
        @Argument var accepted: String

        func run() async throws {
            let text = String(decoding: try readInput(accepted, limit: 64 * 1024 * 1024), as: UTF8.self)
            var equal = 0
            var ahead = 0
            var lost: [String] = []
            for line in text.split(separator: "\n") {
                let parts = line.split(separator: " ")
                guard parts.count == 2, let counter = UInt32(parts[1]) else { continue }
                let keyID = try KeyID(base64Encoded: String(parts[0]))
                struct Key: Decodable { var counter: UInt32 }
                let stored = try JSONDecoder().decode(
                    Key.self,
                    from: try await get(
                        url + "/v1/keys/" + RequestBindingLayout.base64URL(keyID.rawValue), token: token)
                ).counter
                if stored == counter {
                    equal += 1
                } else if stored > counter {
                    ahead += 1
                } else {
                    lost.append("\(keyID): accepted \(counter), stored \(stored)")
                }
            }
            print(
                "keys checked: \(equal + ahead + lost.count); stored = highest accepted: \(equal); stored ahead "
                    + "(a response lost after the store): \(ahead); LOST counter updates: \(lost.count)")
            for line in lost.prefix(10) { print("  lost: \(line)") }
            if !lost.isEmpty { throw ExitCode.failure }
        }
    }
}

func post(_ url: String, body: String, token: String) async throws -> Data {
    var request = HTTPClientRequest(url: url)
    request.method = .POST
    request.headers.add(name: "Authorization", value: "Bearer \(token)")
    request.headers.add(name: "Content-Type", value: "application/json")
    request.body = .bytes(ByteBuffer(string: body))
    return try await send(request)
}

func get(_ url: String, token: String) async throws -> Data {
    var request = HTTPClientRequest(url: url)
    request.headers.add(name: "Authorization", value: "Bearer \(token)")
    return try await send(request)
}

/// Sends, waiting out a 429 with `Retry-After` as the app client does (an attestation challenge beyond the App ID's
/// attestation budget), at most 600 times; anything but 200 then is an error.
private func send(_ request: HTTPClientRequest) async throws -> Data {
    for _ in 0..<600 {
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        if response.status == .tooManyRequests,
            let wait = response.headers.first(name: "Retry-After").flatMap({ Int($0) })
        {
            try await Task.sleep(for: .seconds(min(max(wait, 1), 60)))
            continue
        }
        guard response.status == .ok else {
            throw InputError(description: "\(request.url): \(response.status.code) \(String(buffer: body))")
        }
        return Data(buffer: body)
    }
    throw InputError(description: "\(request.url): still 429 after 600 waits")
}
#endif  // Service
