#if Service
import AppAttest
import AppAttestWire
import AppAttestSQLite
import AppAttestServer
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import AppleDeviceAPITesting
import AsyncHTTPClient
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import ServiceLifecycle
import Synchronization
import Testing

@Suite("appattest serve: configuration")
struct ConfigurationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("the committed sample configuration loads and validates")
    func sample() throws {
        // Copied as an operator installs it: mode 0600 (a checkout leaves it readable by others, which load refuses).
        let copy = NSTemporaryDirectory() + "appattest-sample-\(UUID().uuidString).json"
        let sample = try Data(contentsOf: Self.root.appendingPathComponent("appattest.sample.json"))
        #expect(FileManager.default.createFile(atPath: copy, contents: sample, attributes: [.posixPermissions: 0o600]))
        defer { try? FileManager.default.removeItem(atPath: copy) }
        let configuration = try ServerConfiguration.load(file: copy)
        #expect(configuration.apps.count == 2)
        #expect(
            configuration.tokens.map(\.name) == ["orders-service", "orders-service-next", "gateway", "support-console"])
        // A verify-only caller limited to one App ID, and a support console that reads and revokes.
        #expect(configuration.tokens[2].permissions == [.verify])
        #expect(configuration.tokens[2].appIds == ["ABCDE12345.com.example.app"])
        #expect(configuration.tokens[3].permissions == [.read, .revoke])
        #expect(configuration.idleTimeoutSeconds == 60)
        #expect(configuration.sqliteLogRestartMiB == 64)
        #expect(configuration.apple?.teamId == "ABCDE12345")
        let verifier = try #require(try configuration.verifierConfiguration())
        #expect(verifier.apps[try AppID("ABCDE12345.com.example.app.beta")] == [.development, .production])
        #expect(verifier.trustAnchor == .appleAppAttestationRoot)
        #expect(configuration.validatesAttestationReceipts)
    }

    @Test("a setting no configuration has is refused with where it is, never ignored")
    func unknownSettings() throws {
        func load(_ json: String) throws(ServerConfigurationError) -> ServerConfiguration {
            let path = NSTemporaryDirectory() + "appattest-unknown-\(UUID().uuidString).json"
            _ = FileManager.default.createFile(
                atPath: path, contents: Data(json.utf8), attributes: [.posixPermissions: 0o600])
            defer { try? FileManager.default.removeItem(atPath: path) }
            return try ServerConfiguration.load(file: path)
        }
        // `permission` for `permissions`: ignored, the token would be allowed everything.
        do {
            _ = try load(#"{"tokens":[{"name":"ci","token":"0123456789abcdef0","permission":["verify"]}]}"#)
            Issue.record("a misspelt permissions was ignored")
        } catch {
            #expect(error.description.contains(#"tokens[0]."permission""#), "\(error.description)")
        }
        do {
            let app = #"{"appId":"TEAM123456.com.a","environments":["production"],"enforcment":"report"}"#
            let apple = #"{"teamId":"T","keyId":"K","privateKeyFile":"f","endPoint":"x"}"#
            _ = try load(
                #"{"keyCacheSise":100,"apps":["# + app + #"],"rateLimit":{"requestsPerSecond":1,"burst":2,"bursts":3},"#
                    + #""apple":"# + apple + #","\u001b[31m":1}"#)
            Issue.record("unknown settings were ignored")
        } catch {
            let message = error.description
            for expected in [
                #""keyCacheSise""#, #"apps[0]."enforcment""#, #"rateLimit."bursts""#, #"apple."endPoint""#,
                "(a name of 5 bytes that is not printable ASCII)",
            ] {
                #expect(message.contains(expected), "\(expected) in \(message)")
            }
            #expect(!message.utf8.contains(0x1B), "a control character is not echoed")
        }
        // Every name the decoder knows is accepted.
        let token = #"{"name":"ci","token":"0123456789abcdef0","permissions":["verify"],"appIds":["TEAM123456.com.a"]}"#
        let known = try load(#"{"tokens":["# + token + #"],"keyCacheSize":100}"#)
        #expect(known.tokens.first?.permissions == [.verify] && known.keyCacheSize == 100)
    }

    @Test("APPATTEST_ variables that no setting reads are named for serve's warning; the known list is the loader's")
    func unknownEnvironmentNames() throws {
        #expect(
            ServerConfiguration.unknownEnvironmentNames(
                in: [
                    "APPATTEST_KEY_CACHE_SISE": "1", "APPATTEST_PORT": "1", "HOME": "/", "APPATTEST_LOG_LEVEL": "info",
                    "APPATTEST_\u{1B}[2J": "x",
                ], also: ["APPATTEST_LOG_LEVEL"])
                == ["(a name of 14 bytes that is not printable ASCII)", #""APPATTEST_KEY_CACHE_SISE""#])
        // Every variable the loader reads is in the list (else serve would warn that a real setting is ignored).
        let source = try String(
            contentsOf: Self.root.appendingPathComponent("Sources/AppAttestServer/ServerConfiguration+Loading.swift"),
            encoding: .utf8)
        let apply = try #require(source.range(of: "mutating func apply(environment:"))
        let read = Set(source[apply.lowerBound...].matches(of: /"(APPATTEST_[A-Z0-9_]+)"/).map { String($0.output.1) })
        #expect(read.count > 30)
        #expect(read.subtracting(ServerConfiguration.environmentNames).isEmpty)
    }

    @Test("environment variables override the file; bad values are refused with a message")
    func environment() throws {
        var configuration = ServerConfiguration()
        try configuration.apply(environment: [
            "APPATTEST_APPS": "TEAM123456.com.a=production+development,TEAM123456.com.b",
            "APPATTEST_TOKENS": "a:0123456789abcdef0,b:0123456789abcdef1", "APPATTEST_PORT": "9090",
            "APPATTEST_DATABASE": "postgres://u@localhost/db", "APPATTEST_RATE_LIMIT": "10/20",
        ])
        #expect(configuration.apps.map(\.environments) == [["production", "development"], ["production"]])
        #expect(configuration.tokens.count == 2)
        #expect(configuration.port == 9090)
        #expect(configuration.rateLimit == .init(requestsPerSecond: 10, burst: 20))
        #expect(try configuration.verifierConfiguration()?.apps.count == 2)
        try configuration.apply(environment: ["APPATTEST_TOKENS": "ro:0123456789abcdef0:read+verify"])
        #expect(configuration.tokens.map(\.permissions) == [[.read, .verify]])
        try configuration.apply(environment: ["APPATTEST_RATE_LIMIT": "off"])
        #expect(configuration.rateLimit == nil)
        try configuration.apply(environment: ["APPATTEST_SQLITE_LOG_RESTART_MIB": "1024"])
        #expect(configuration.sqliteLogRestartMiB == 1024)
        try configuration.apply(environment: ["APPATTEST_CHALLENGES_TOTAL": "400000"])
        #expect(configuration.challengesTotal == 400_000)
        configuration.challengesTotal = 100_000

        for bad: [String: String] in [
            ["APPATTEST_PORT": "x"], ["APPATTEST_TOKENS": "notoken"], ["APPATTEST_RATE_LIMIT": "fast"],
            // An empty permission list (an unset variable) is not every permission, nor an empty token a permission.
            ["APPATTEST_TOKENS": "ro:0123456789abcdef0:"], ["APPATTEST_TOKENS": "ro::0123456789abcdef0"],
            ["APPATTEST_TOKENS": "ro:0123456789abcdef0:read+"], ["APPATTEST_TOKENS": ":0123456789abcdef0"],
            // Not two numbers: a third part, or an empty one, is not dropped.
            ["APPATTEST_RATE_LIMIT": "x/100/200"], ["APPATTEST_RATE_LIMIT": "/100/200"],
            ["APPATTEST_RATE_LIMIT": "100//200"],
            // Apple's API needs its three settings: one or two (a secret that did not mount) is not "off".
            ["APPATTEST_APPLE_TEAM_ID": "TEAM123456", "APPATTEST_APPLE_KEY_ID": "KEY1234567"],
            ["APPATTEST_APPLE_PRIVATE_KEY_FILE": "/run/secrets/apple.p8"],
        ] {
            var copy = configuration
            #expect(throws: ServerConfigurationError.self) { try copy.apply(environment: bad) }
        }
        for change: (inout ServerConfiguration) -> Void in [
            { $0.tokens = [.init(name: "short", token: "abc")] }, { $0.port = 0 },
            { $0.apps = [.init(appId: "nodot", environments: ["production"])] },
            { $0.apps = [.init(appId: "TEAM123456.com.a", environments: ["staging"])] },
            { $0.rateLimit = .init(requestsPerSecond: 0, burst: 1) }, { $0.maximumBodyBytes = 10 },
            { $0.testingRootCertificate = "/nonexistent/root.pem" },
            { $0.database = "mysql://u@localhost/db" }, { $0.database = "sqlite:" }, { $0.database = "" },
            { $0.sqliteLogRestartMiB = 0 }, { $0.sqliteLogRestartMiB = 65_537 },
            // A caller's share beyond the total, and a total beyond its range.
            { $0.challengesPerCaller = 100_001 }, { $0.challengesTotal = 0 }, { $0.challengesTotal = 10_000_001 },
        ] {
            var copy = configuration
            change(&copy)
            #expect(throws: ServerConfigurationError.self) { try copy.verifierConfiguration() }
        }
        // The message names the key, and does not repeat a value that may hold a password.
        var copy = configuration
        copy.database = "mysql://user:secret@localhost/db"
        let error = #expect(throws: ServerConfigurationError.self) { try copy.verifierConfiguration() }
        #expect(error?.description.hasPrefix("database ") == true)
        #expect(error?.description.contains("secret") == false)
    }
}

@Suite("appattest serve: receipts and shutdown")
struct ServerLifecycleTests {
    typealias F = Fixture

    @Test("receipt refresh through Apple's stand-in stores the new receipt and its risk metric")
    func receiptRefresh() async throws {
        let directory = try F.directory()
        let receipts = try TestReceiptAuthority()
        let providerKey = P256.Signing.PrivateKey()
        try providerKey.pemRepresentation.write(toFile: "\(directory)/key.p8", atomically: true, encoding: .utf8)
        chmod("\(directory)/key.p8", 0o600)
        let standIn = AppleServerStandIn(
            keys: [.init(teamID: "SERVE12345", keyID: "KEY1234567", publicKey: providerKey.publicKey)],
            receiptAuthority: receipts)
        let url = try await standIn.start()
        var configuration = try F.configuration(directory: directory)
        try F.pem(receipts.rootCertificate, at: "\(directory)/receipt-root.pem")
        configuration.testingReceiptRootCertificate = "\(directory)/receipt-root.pem"
        configuration.apple = .init(
            teamId: "SERVE12345", keyId: "KEY1234567", privateKeyFile: "\(directory)/key.p8", endpoint: url)
        let server = try await AppAttestServer.open(configuration: configuration)
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID, receiptAuthority: receipts)
        let keyPath = "/v1/keys/" + RequestBindingLayout.base64URL(device.keyID.rawValue)
        do {
            try await server.makeApplication().test(.router) { client in
                let issued = try await client.execute(
                    uri: "/v1/challenges", method: .post, headers: F.headers(),
                    body: ByteBuffer(string: #"{"purpose":"attestation"}"#))
                let challenge = try #require(F.json(issued)["challenge"] as? String)
                let object = try device.attest(challenge: RequestBindingLayout.decodeBase64URL(challenge)!)
                var response = try await client.execute(
                    uri: "/v1/attestations", method: .post, headers: F.headers(),
                    body: ByteBuffer(
                        string: """
                            {"keyId":"\(device.keyID.base64EncodedString)",\
                            "attestationObject":"\(Data(object).base64EncodedString())","challenge":"\(challenge)"}
                            """))
                #expect(response.status == .ok, "\(String(buffer: response.body))")
                await standIn.setRiskMetric(3, forKeyPoint: device.publicKey)
                response = try await client.execute(
                    uri: keyPath + "/receipt/refresh", method: .post, headers: F.headers())
                #expect(response.status == .ok, "\(String(buffer: response.body))")
                #expect(F.json(response)["outcome"] as? String == "refreshed")
                #expect(F.json(response)["riskMetric"] as? Int == 3)
                response = try await client.execute(uri: keyPath, method: .get, headers: F.headers())
                #expect(F.json(response)["riskMetric"] as? Int == 3)
                // Apple failing is a 502 with Apple's code, not a crash or a changed key.
                await standIn.enqueue(status: 401, body: "")
                response = try await client.execute(
                    uri: keyPath + "/receipt/refresh", method: .post, headers: F.headers())
                #expect(response.status == .badGateway)
                #expect((F.json(response)["code"] as? String)?.hasPrefix("apple.") == true)
            }
        } catch {
            await standIn.stop()
            throw error
        }
        await standIn.stop()
        await server.close()
    }

    @Test(
        "graceful shutdown under load: in-flight requests finish and every accepted counter is stored",
        .timeLimit(.minutes(2)))
    func gracefulShutdown() async throws {
        let directory = try F.directory()
        var configuration = try F.configuration(directory: directory)
        configuration.port = TestPorts.free()
        configuration.rateLimit = nil
        let server = try await AppAttestServer.open(configuration: configuration)
        let service = try #require(server.service)
        let devices = try (0..<8).map { _ in try SimulatedDevice(authority: F.authority, appID: F.appID) }
        for device in devices {
            let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
            _ = try await service.registerAttestation(
                try device.attest(challenge: challenge.challenge), keyID: device.keyID, challenge: challenge.challenge)
        }
        let bodies = try devices.map { device in
            try (0..<40).map { index in
                let clientData = Array("request \(index)".utf8)
                return """
                    {"keyId":"\(device.keyID.base64EncodedString)",\
                    "assertion":"\(Data(try device.assert(clientData: clientData)).base64EncodedString())",\
                    "clientData":"\(Data(clientData).base64EncodedString())"}
                    """
            }
        }
        let group = ServiceGroup(
            configuration: .init(services: server.makeServices().map { .init(service: $0) }, logger: server.logger))
        let running = Task { try await group.run() }
        let base = "http://127.0.0.1:\(configuration.port)"
        // Wait until it answers.
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(60) {
            if (try? await HTTPClient.shared.execute(HTTPClientRequest(url: base + "/ping"), timeout: .seconds(1)))?
                .status == .ok
            {
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        let answered = Counter()
        // Each device sends its requests in order; after 60 answers in all, shutdown begins.
        let accepted = try await withThrowingTaskGroup(of: (Int, UInt32).self) { tasks in
            for (index, requests) in bodies.enumerated() {
                tasks.addTask {
                    var highest: UInt32 = 0
                    for body in requests {
                        var request = HTTPClientRequest(url: base + "/v1/assertions/verify")
                        request.method = .POST
                        request.headers.add(name: "Authorization", value: "Bearer \(F.tokenA)")
                        request.body = .bytes(ByteBuffer(string: body))
                        // After shutdown began: reset or refused (the client retries refused connections until
                        // its deadline, so keep it short). Before, however slow the machine, the answer.
                        let shortly = answered.count >= 60
                        guard
                            let response = try? await HTTPClient.shared.execute(
                                request, timeout: .seconds(shortly ? 2 : 30)),
                            let bytes = try? await response.body.collect(upTo: 1 << 16)
                        else { break }
                        if response.status == .ok,
                            let json = try? JSONSerialization.jsonObject(with: Data(buffer: bytes)) as? [String: Any],
                            let counter = json["counter"] as? Int
                        {
                            highest = max(highest, UInt32(counter))
                        }
                        if answered.increment() == 60 { await group.triggerGracefulShutdown() }
                    }
                    return (index, highest)
                }
            }
            var result: [Int: UInt32] = [:]
            for try await (index, highest) in tasks { result[index] = highest }
            return result
        }
        // Whatever happened to the requests, the service stops (a second trigger is harmless).
        await group.triggerGracefulShutdown()
        try await running.value
        await server.close()
        let acceptedTotal = accepted.values.reduce(0) { $0 + Int($1) }
        #expect(acceptedTotal >= 60)
        #expect(acceptedTotal < 8 * 40, "shutdown happened after all requests")
        // Reopen the database: every accepted counter is there.
        let store = try SQLiteAppAttestStore(path: "\(directory)/serve.sqlite")
        for (index, device) in devices.enumerated() {
            let stored = try #require(try await store.key(device.keyID)).key.counter
            #expect(stored >= accepted[index]!, "device \(index): accepted \(accepted[index]!), stored \(stored)")
            #expect(stored <= accepted[index]! + 1)
        }
        // And the server is gone.
        #expect(
            (try? await HTTPClient.shared.execute(HTTPClientRequest(url: base + "/ping"), timeout: .milliseconds(500)))
                == nil)
    }
}

/// A thread-safe counter.
final class Counter: Sendable {
    private let value = Mutex(0)
    var count: Int { value.withLock { $0 } }
    func increment() -> Int {
        value.withLock {
            $0 += 1; return $0
        }
    }
}
#endif  // Service
