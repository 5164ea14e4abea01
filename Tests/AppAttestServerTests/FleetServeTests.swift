#if Service
import AppAttest
import AppAttestWire
import AppAttestServer
import AppAttestHTTP
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// Fleet operations through `appattest serve`: report-only enforcement, the attestation budget, key events, policies
/// in the configuration and their reload.
@Suite("appattest serve: fleet operations")
struct FleetServeTests {
    typealias F = Fixture
    let tests = ServerTests()

    func assertion(_ device: SimulatedDevice, _ text: String, counter: UInt32? = nil) throws -> String {
        let raw = Array(text.utf8)
        var options = SimulatedDevice.AssertionOptions()
        options.counter = counter
        return """
            {"keyId":"\(device.keyID.base64EncodedString)",\
            "assertion":"\(Data(try device.assert(clientData: raw, options)).base64EncodedString())",\
            "clientData":"\(Data(raw).base64EncodedString())"}
            """
    }

    static let scoped = "token-of-the-app-backend-reporting"

    @Test(
        "report mode: a caller whose App IDs all report gets 200 enforced false; a reload enforces; others are refused",
        arguments: Database.available)
    func reportThenEnforce(_ database: Database) async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let change: (inout ServerConfiguration) -> Void = { configuration in
            configuration.apps[0].enforcement = "report"
            configuration.apps.append(.init(appId: "OTHER12345.com.example.other", environments: ["production"]))
            configuration.tokens.append(.init(name: "app-backend", token: Self.scoped, appIds: [F.appID.rawValue]))
        }
        try await F.withServer(database: database, change) { server, client in
            try await tests.register(client, device)
            let first = try assertion(device, "order 1", counter: 5)
            var response = try await tests.post(client, "/v1/assertions/verify", first, token: Self.scoped)
            #expect(response.status == .ok && F.json(response)["counter"] as? Int == 5)
            // The same assertion again: a replay, reported, not enforced, for the caller of the reporting App ID.
            response = try await tests.post(client, "/v1/assertions/verify", first, token: Self.scoped)
            #expect(response.status == .ok)
            var body = F.json(response)
            #expect(body["enforced"] as? Bool == false && body["code"] as? String == "counterNotIncreasing")
            #expect(body["action"] as? String == "refetchChallenge" && body["status"] as? Int == 409)
            #expect(body["keyId"] as? String == device.keyID.base64EncodedString)
            // A caller that sees the enforcing App ID too: refused, whatever key the request names.
            response = try await tests.post(client, "/v1/assertions/verify", first)
            #expect(response.status == .conflict && F.json(response)["code"] as? String == "counterNotIncreasing")
            // The caller's scope is never reported: a key it cannot see is 404.
            let stranger = try SimulatedDevice(authority: F.authority, appID: F.appID)
            response = try await tests.post(
                client, "/v1/assertions/verify", try assertion(stranger, "x"), token: Self.scoped)
            #expect(response.status == .notFound && F.json(response)["code"] as? String == "unknownKey")
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(
                metrics.contains(#"appattest_reported_refusals_total{code="counterNotIncreasing"} 1"#), "\(metrics)")

            // A bad value on reload changes nothing, and names its key.
            var reloaded = server.configuration
            reloaded.apps[0].enforcement = "maybe"
            #expect(throws: ServerConfigurationError.self) { try server.reload(reloaded) }
            do { try server.reload(reloaded) } catch {
                #expect("\(error)".contains("apps[\(F.appID.rawValue)].enforcement"))
            }
            response = try await tests.post(client, "/v1/assertions/verify", first, token: Self.scoped)
            #expect(response.status == .ok && F.json(response)["enforced"] as? Bool == false)
            // Reloaded to enforce: the replay is refused.
            reloaded.apps[0].enforcement = "enforce"
            try server.reload(reloaded)
            response = try await tests.post(client, "/v1/assertions/verify", first, token: Self.scoped)
            body = F.json(response)
            #expect(response.status == .conflict && body["code"] as? String == "counterNotIncreasing")
        }
    }

    @Test("report mode for every App ID: even an unknown key's request goes through, unverified")
    func reportEverything() async throws {
        try await F.withServer({ $0.enforcement = "report" }) { _, client in
            let stranger = try SimulatedDevice(authority: F.authority, appID: F.appID)
            let response = try await tests.post(client, "/v1/assertions/verify", try assertion(stranger, "x"))
            let body = F.json(response)
            #expect(response.status == .ok && body["enforced"] as? Bool == false)
            #expect(body["code"] as? String == "unknownKey" && body["action"] as? String == "reattest")
        }
    }

    @Test(
        "key events through serve: attested, revoked with its reason; superseded beyond maximumKeysPerUser",
        arguments: Database.available)
    func events(_ database: Database) async throws {
        let first = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let second = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let user = "user-\(UUID().uuidString)"
        try await F.withServer(database: database, { $0.maximumKeysPerUser = 1 }) { _, client in
            try await tests.register(client, first, userId: user)
            try await tests.register(client, second, userId: user)
            let path = "/v1/keys/" + RequestBindingLayout.base64URL(first.keyID.rawValue)
            var response = try await client.execute(uri: path + "/events", method: .get, headers: F.headers())
            #expect(response.status == .ok)
            var kinds = (F.json(response)["events"] as? [[String: Any]])?.compactMap { $0["kind"] as? String }
            #expect(kinds == ["attested", "superseded"])
            // A revocation of the newer key, with its reason.
            let secondPath = "/v1/keys/" + RequestBindingLayout.base64URL(second.keyID.rawValue)
            response = try await tests.post(client, secondPath + "/revoke", #"{"reason":"fraud review 12"}"#)
            #expect(response.status == .ok)
            response = try await client.execute(uri: secondPath + "/events?limit=1", method: .get, headers: F.headers())
            let events = F.json(response)["events"] as? [[String: Any]]
            kinds = events?.compactMap { $0["kind"] as? String }
            #expect(kinds == ["revoked"] && events?.first?["detail"] as? String == "fraud review 12")
            response = try await tests.post(client, secondPath + "/revoke", #"{"reason":42}"#)
            #expect(response.status == .badRequest)
            // The superseded key's device registers again (action reattest); the revoked key's stays refused.
            for (device, code, action) in [(first, "keySuperseded", "reattest"), (second, "keyRevoked", "none")] {
                let keyID = device.keyID.base64EncodedString
                response = try await tests.post(
                    client, "/v1/challenges", #"{"purpose":"assertion","keyId":"\#(keyID)"}"#)
                let body = F.json(response)
                #expect(
                    response.status == .unauthorized && body["code"] as? String == code
                        && body["action"] as? String == action, "\(response.status) \(body)")
            }
            response = try await client.execute(uri: path + "/events?limit=0", method: .get, headers: F.headers())
            #expect(response.status == .badRequest)
        }
    }

    @Test("beyond the attestation budget: an attestation challenge is 429 with Retry-After and action retry")
    func budget() async throws {
        try await F.withServer({ $0.attestationsPerSecond = 0.01 }) { _, client in
            try await tests.register(client, try SimulatedDevice(authority: F.authority, appID: F.appID))
            var response = try await tests.post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
            let body = F.json(response)
            #expect(response.status == .tooManyRequests && body["code"] as? String == "attestationBudgetExhausted")
            #expect(body["action"] as? String == "retry")
            #expect(response.headers[.retryAfter].flatMap { Int($0) }.map { (1...3600).contains($0) } == true)
            // An App ID that does not parse is malformed; assertion challenges are not attestations.
            response = try await tests.post(
                client, "/v1/challenges", #"{"purpose":"attestation","appId":"not an app id"}"#)
            #expect(response.status == .badRequest)
            response = try await tests.post(client, "/v1/challenges", #"{"purpose":"assertion"}"#)
            #expect(response.status == .ok)
            // Counted on /metrics: the refusal by App ID, the registration as a key event.
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(
                metrics.contains(#"appattest_attestation_budget_exhausted_total{appId="\#(F.appID.rawValue)"} 1"#),
                "\(metrics)")
            #expect(metrics.contains(#"appattest_key_events_total{kind="attested"} 1"#), "\(metrics)")
        }
    }

    @Test("a caller of several App IDs names the one whose budget pays for an attestation challenge")
    func budgetOfSeveralApps() async throws {
        let other = "OTHER12345.com.example.other"
        let twoApps = "token-of-a-two-app-tenant-01"
        try await F.withServer({
            $0.apps.append(.init(appId: other, environments: ["production"]))
            $0.tokens.append(.init(name: "two-apps", token: twoApps, appIds: [F.appID.rawValue, other]))
        }) { _, client in
            func challenge(_ body: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/v1/challenges", method: .post, headers: F.headers(twoApps), body: ByteBuffer(string: body))
            }
            // Unnamed, it was charged to the bucket of unnamed App IDs, which other tenants' requests share.
            var response = try await challenge(#"{"purpose":"attestation"}"#)
            #expect(response.status == .badRequest, "\(response.status)")
            response = try await challenge(#"{"purpose":"attestation","appId":"\#(other)"}"#)
            #expect(response.status == .ok)
            response = try await challenge(#"{"purpose":"assertion"}"#)
            #expect(response.status == .ok)
        }
    }

    @Test(
        "settings are refused with a message that names the key",
        arguments: [
            ("enforcement", #""sometimes""#), ("attestationsPerSecond", "-1"), ("maximumKeysPerUser", "100000"),
            ("keyEventRetentionDays", "0"),
        ])
    func refusedSettings(_ key: String, _ value: String) throws {
        let configuration = try JSONDecoder().decode(
            ServerConfiguration.self,
            from: Data(
                #"{"apps":[{"appId":"TEAM123456.com.example.app","environments":["production"]}],"\#(key)":\#(value)}"#
                    .utf8))
        #expect {
            _ = try configuration.verifierConfiguration()
        } throws: { error in
            "\(error)".contains(key)
        }
    }

    @Test(
        "two serve processes on one PostgreSQL store issue no more attestation challenges together than the budget",
        .enabled(if: Database.available.contains(.postgres)))
    func budgetAcrossProcesses() async throws {
        let url = try #require(Database.postgresURL)
        let directory = try F.directory()
        // An App ID of its own: the budget's bucket lives in the database, across runs.
        let appID = try AppID("BUDGET1234.com.example.fleet\(UInt32.random(in: 0...UInt32.max))")
        try F.pem(F.authority.rootCertificate, at: "\(directory)/root.pem")
        let ports = [TestPorts.free(), TestPorts.free()]
        // One attestation challenge per 50 s (a burst of one refilled at 0.02/s): the test takes a few seconds.
        let processes = try ports.map { port in
            try Self.serveProcess(
                port: port, database: url, appID: appID, directory: directory,
                environment: ["APPATTEST_ATTESTATIONS_PER_SECOND": "0.02"])
        }
        // A failure's way out stops them without waiting; the test's end waits for them off the cooperative pool.
        defer { for process in processes where process.isRunning { process.terminate() } }
        for port in ports { #expect(await ServeOperationTests.health(port: port, attempts: 120)) }
        var statuses: [UInt] = []
        for index in 0..<6 {
            let base = "http://127.0.0.1:\(ports[index % 2])"
            statuses.append(try await Self.post(base + "/v1/challenges", #"{"purpose":"attestation"}"#).status)
        }
        #expect(statuses.filter { $0 == 200 }.count == 1, "\(statuses)")
        #expect(statuses.filter { $0 == 429 }.count == 5, "\(statuses)")
        for process in processes { await ProcessWait.stop(process) }
    }

    /// Starts `appattest serve` as a process on `port`, trusting the test authority (its root written into
    /// `directory`), with a caller token `orders:tokenA` and `environment` on top.
    static func serveProcess(
        port: Int, database: String, appID: AppID, directory: String, environment extra: [String: String]
    ) throws -> Process {
        let process = Process()
        process.executableURL = ServeOperationTests.appattest
        process.arguments = ["serve"]
        var environment = ProcessInfo.processInfo.environment
        environment["APPATTEST_PORT"] = "\(port)"
        environment["APPATTEST_DATABASE"] = database
        environment["APPATTEST_APPS"] = appID.rawValue
        environment["APPATTEST_TOKENS"] = "orders:\(F.tokenA)"
        environment["APPATTEST_TESTING_ROOT"] = "\(directory)/root.pem"
        environment.merge(extra) { _, new in new }
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    static func post(_ url: String, _ body: String, headers: [(String, String)] = []) async throws -> (
        status: UInt, body: [UInt8]
    ) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.headers.add(name: "Authorization", value: "Bearer \(F.tokenA)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (response.status.code, Array(buffer: bytes))
    }
}
#endif  // Service

#if Service
import ServiceLifecycle
import Synchronization
import Logging

/// `appattest serve` exports its spans over OTLP/HTTP (swift-otel) to the endpoint OpenTelemetry's variables name.
@Suite("appattest serve: traces")
struct ServeTracesTests {
    typealias F = Fixture

    /// Every root sampled (the default), then none (`parentbased_traceidratio` at 0, which serve samples at the head):
    /// the caller's sampled trace is exported either way.
    @Test(
        "with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, an attestation's and an assertion's spans reach the collector",
        arguments: [nil, "0"] as [String?])
    func otlpExport(rootRatio: String?) async throws {
        // A stand-in collector: it keeps what is posted to /v1/traces (protobuf; span names and attribute values are
        // in it as plain bytes).
        let received = Mutex<[UInt8]>([])
        let router = Router()
        router.post("v1/traces") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 1 << 22)
            received.withLock { $0 += Array(body.readableBytesView) }
            return Response(status: .ok)
        }
        let collectorPort = TestPorts.free()
        let collector = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: collectorPort)),
            logger: Logger(label: "collector", factory: { _ in SwiftLogNoOpLogHandler() }))
        let group = ServiceGroup(
            configuration: .init(
                services: [collector], logger: Logger(label: "collector", factory: { _ in SwiftLogNoOpLogHandler() })))
        let running = Task { try await group.run() }
        defer { running.cancel() }

        let directory = try F.directory()
        try F.pem(F.authority.rootCertificate, at: "\(directory)/root.pem")
        let port = TestPorts.free()
        let process = try FleetServeTests.serveProcess(
            port: port, database: "sqlite:\(directory)/serve.sqlite", appID: F.appID, directory: directory,
            environment: [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:\(collectorPort)/v1/traces",
                "OTEL_BSP_SCHEDULE_DELAY": "200",
            ].merging(
                rootRatio.map { ["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": $0] }
                    ?? [:]
            ) { $1 })
        defer { if process.isRunning { process.terminate() } }
        #expect(await ServeOperationTests.health(port: port, attempts: 120))
        let base = "http://127.0.0.1:\(port)"
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let issued = try await FleetServeTests.post(base + "/v1/challenges", #"{"purpose":"attestation"}"#)
        let challenge = try #require(
            (try JSONSerialization.jsonObject(with: Data(issued.body)) as? [String: Any])?["challenge"] as? String)
        let object = try device.attest(challenge: try #require(RequestBindingLayout.decodeBase64URL(challenge)))
        let registered = try await FleetServeTests.post(
            base + "/v1/attestations",
            """
            {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
            "challenge":"\(challenge)"}
            """)
        #expect(registered.status == 200)
        // A caller's trace is continued (W3C traceparent): sampled, its trace ID is exported with the verification's
        // spans; not sampled (flags 00), nothing of that request is.
        let sampledTrace: [UInt8] = Array(repeating: 0x5A, count: 15) + [0x01]
        let droppedTrace: [UInt8] = Array(repeating: 0xD7, count: 15) + [0x02]
        func traceparent(_ trace: [UInt8], flags: String) -> [(String, String)] {
            let hex = trace.map { String(format: "%02x", $0) }.joined()
            return [("traceparent", "00-\(hex)-00f067aa0ba902b7-\(flags)")]
        }
        let verified = try await FleetServeTests.post(
            base + "/v1/assertions/verify", try FleetServeTests().assertion(device, "order"),
            headers: traceparent(sampledTrace, flags: "01"))
        #expect(verified.status == 200)
        let unsampled = try await FleetServeTests.post(
            base + "/v1/assertions/verify", try FleetServeTests().assertion(device, "unsampled"),
            headers: traceparent(droppedTrace, flags: "00"))
        #expect(unsampled.status == 200)

        // The attestation has no traceparent: a root, sampled by serve's own ratio.
        let roots = ["appattest.attestation", "appattest.chain"].map { Array($0.utf8) }
        let expected =
            ["appattest.assertion", "appattest.signature", "appattest.acceptance", F.appID.rawValue].map {
                Array($0.utf8)
            } + [sampledTrace] + (rootRatio == nil ? roots : [])
        var missing = expected
        for _ in 0..<100 where !missing.isEmpty {
            try await Task.sleep(for: .milliseconds(100))
            let bytes = received.withLock { $0 }
            missing = expected.filter { !Self.contains(bytes, $0) }
        }
        #expect(missing.isEmpty, "not exported: \(missing.map { String(decoding: $0, as: UTF8.self) })")
        // The export after the sampled request's: any span of the unsampled one would have been in it.
        try await Task.sleep(for: .milliseconds(600))
        #expect(!Self.contains(received.withLock { $0 }, droppedTrace), "a span of an unsampled trace was exported")
        if rootRatio != nil {
            #expect(!roots.contains { Self.contains(received.withLock { $0 }, $0) }, "a sampled-out root was exported")
        }
        await ProcessWait.stop(process)
    }

    @Test("the head sampler: only parentbased_traceidratio below 1 is sampled at the head, at its ratio")
    func headSampler() throws {
        for (sampler, argument, head) in [
            ("parentbased_traceidratio", "0.25", true), ("parentbased_traceidratio", "0", true),
            ("parentbased_traceidratio", "1", false), ("parentbased_traceidratio", "1.5", false),
            ("parentbased_traceidratio", "x", false), ("traceidratio", "0.25", false),
            ("parentbased_always_on", "0.25", false),
        ] {
            var environment = ["OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": argument, "OTHER": "kept"]
            let root = ServerTracing.headSampler(&environment)
            #expect((root != nil) == head, "\(sampler) \(argument)")
            // Sampled at the head, the tracer is told parentbased_always_on instead; otherwise it reads them itself.
            #expect(environment.count == (head ? 1 : 3))
            #expect(environment["OTHER"] == "kept")
        }
        var environment = ["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"]
        let root = try #require(ServerTracing.headSampler(&environment))
        let sampled = (0..<100_000).count { _ in root.sample() }
        #expect((24_000...26_000).contains(sampled), "\(sampled) of 100,000 sampled at 0.25")
        #expect(!(0..<10_000).contains { _ in RootSampler(ratio: 0).sample() })
        #expect((0..<10_000).allSatisfy { _ in RootSampler(ratio: 1).sample() })
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}
#endif  // Service
