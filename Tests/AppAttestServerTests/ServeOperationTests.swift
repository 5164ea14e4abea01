#if Service
import AppAttest
import AppAttestWire
import AppAttestHummingbird
import AppAttestServer
import AppAttestHTTP
import AppAttestStore
import AppAttestTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What an operator relies on: probes, background work, settings refused when out of range, token files and
/// permissions, connection timeouts and limits.
@Suite("appattest serve: probes, settings, tokens and connection limits")
struct ServeOperationTests {
    typealias F = Fixture

    @Test("probes: /health/live answers 200 while the store is down; /health/ready (and /health) answer 503")
    func probes() async throws {
        let directory = try F.directory()
        let configuration = try F.configuration(directory: directory)
        let server = try await AppAttestServer.open(configuration: configuration, store: UnavailableAppAttestStore())
        try await server.makeApplication().test(.router) { client in
            try await client.execute(uri: "/health/live", method: .get) { response in
                #expect(response.status == .ok)
            }
            for path in ["/health/ready", "/health"] {
                try await client.execute(uri: path, method: .get) { response in
                    #expect(response.status == .serviceUnavailable, "\(path)")
                }
            }
        }
        await server.close()
    }

    @Test("a flood of readiness probes (no token, no rate limit) asks the store about once a second, not once a probe")
    func probesShareOneCheck() async throws {
        let directory = try F.directory()
        let configuration = try F.configuration(directory: directory)
        let checks = Atomic<Int>(0)
        let store = ObservedAppAttestStore(
            MemoryAppAttestStore(),
            willReadKey: { keyID in
                if keyID == .unassigned {
                    checks.add(1, ordering: .relaxed)
                    // A store that takes a while, so that probes arrive while a check runs.
                    try? await Task.sleep(for: .milliseconds(50))
                }
            })
        let server = try await AppAttestServer.open(configuration: configuration, store: store)
        let started = ContinuousClock.now
        try await server.makeApplication().test(.router) { client in
            try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for index in 0..<400 {
                    group.addTask {
                        try await client.execute(uri: index % 2 == 0 ? "/health/ready" : "/health", method: .get)
                            .status
                    }
                }
                for try await status in group { #expect(status == .ok) }
            }
        }
        let seconds = Double((ContinuousClock.now - started).components.seconds) + 1
        #expect(checks.load(ordering: .relaxed) >= 1)
        #expect(Double(checks.load(ordering: .relaxed)) <= seconds + 1, "\(checks.load(ordering: .relaxed)) checks")
        await server.close()
    }

    @Test("serve runs the service's background work (group commit, challenge purge), stopped after its HTTP server")
    func backgroundRunsInServe() async throws {
        try await F.withServer { server, _ in
            let services = server.makeServices()
            // A ServiceGroup stops its services in reverse order: the server first, then the background work.
            #expect(services.first is AppAttestBackgroundService)
            #expect(!(services.last is AppAttestBackgroundService))
            #expect(services.count == 2)
        }
    }

    @Test(
        "numeric settings outside their documented ranges are refused at start-up",
        arguments: [
            ("APPATTEST_RATE_LIMIT", "1e-19/1"), ("APPATTEST_RATE_LIMIT", "5/1e300"),
            ("APPATTEST_RATE_LIMIT", "1e300/5"),
            ("APPATTEST_PORT", "70000"), ("APPATTEST_MAX_BODY_BYTES", "12"), ("APPATTEST_IDLE_TIMEOUT", "0"),
            ("APPATTEST_IDLE_TIMEOUT", "1e19"), ("APPATTEST_REQUEST_TIMEOUT", "-1"), ("APPATTEST_MAX_CONNECTIONS", "0"),
            ("APPATTEST_CHALLENGE_PURGE_INTERVAL", "0.001"), ("APPATTEST_STARTUP_TIMEOUT", "1e19"),
        ])
    func numericRanges(_ name: String, _ value: String) throws {
        var configuration = ServerConfiguration()
        #expect(throws: ServerConfigurationError.self, "\(name)=\(value)") {
            try configuration.apply(environment: [name: value])
            _ = try configuration.verifierConfiguration()
        }
    }

    @Test("a rate limiter with a vanishing rate answers a bounded Retry-After, never traps")
    func vanishingRate() {
        let limiter = AppAttestRateLimiter(ratePerSecond: 1e-19, burst: 1)
        #expect(limiter.acquire("caller") == .allowed)
        guard case .limited(let retryAfter) = limiter.acquire("caller") else {
            Issue.record("the second request passed")
            return
        }
        #expect((1...86400).contains(retryAfter))
    }

    // MARK: Token and secret files

    func permissions(_ path: String) -> mode_t {
        var info = stat()
        guard lstat(path, &info) == 0 else { return 0o7777 }
        return info.st_mode & 0o777
    }

    @Test("a generated token file is created 0600 and read back on the next start")
    func generatedTokenFile() async throws {
        let directory = try F.directory()
        var configuration = try F.configuration(directory: directory)
        configuration.tokens = []
        let first = try await AppAttestServer.open(configuration: configuration)
        await first.close()
        #expect(permissions(configuration.tokenFile) == 0o600)
        let second = try await AppAttestServer.open(configuration: configuration)
        #expect(second.configuration.tokens == first.configuration.tokens)
        await second.close()
    }

    @Test("a token file readable by others, owned by another user or a symbolic link is refused with a message")
    func tokenFileRefusals() async throws {
        let directory = try F.directory()
        var configuration = try F.configuration(directory: directory)
        configuration.tokens = []
        let token = Data("an-existing-token-of-32-characters\n".utf8)

        // Readable by others.
        #expect(FileManager.default.createFile(atPath: configuration.tokenFile, contents: token))
        chmod(configuration.tokenFile, 0o644)
        await #expect(throws: ServerConfigurationError.self) {
            _ = try await AppAttestServer.open(configuration: configuration)
        }

        // A symbolic link to a file that is itself fine.
        let target = "\(directory)/elsewhere"
        #expect(FileManager.default.createFile(atPath: target, contents: token, attributes: [.posixPermissions: 0o600]))
        unlink(configuration.tokenFile)
        symlink(target, configuration.tokenFile)
        await #expect(throws: ServerConfigurationError.self) {
            _ = try await AppAttestServer.open(configuration: configuration)
        }

        // Owned by another user (only root can give a file away).
        if geteuid() == 0 {
            unlink(configuration.tokenFile)
            #expect(
                FileManager.default.createFile(
                    atPath: configuration.tokenFile, contents: token, attributes: [.posixPermissions: 0o600]))
            chown(configuration.tokenFile, 65534, 65534)
            await #expect(throws: ServerConfigurationError.self) {
                _ = try await AppAttestServer.open(configuration: configuration)
            }
        }
    }

    // MARK: Connections

    /// A TCP connection to 127.0.0.1:port, as a raw descriptor (-1 on failure), with a receive buffer of
    /// `receiveBuffer` bytes when given (set before connecting, so that the window advertised is that small).
    static func connect(port: Int, receiveBuffer: Int32? = nil) -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if var size = receiveBuffer {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        return connected == 0 ? descriptor : -1
    }

    /// Whether the server closed the connection within `seconds` (a read returns end of file or an error).
    static func closedByServer(_ descriptor: Int32, within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) >= 0 else { return true }
            if poller.revents != 0 {
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if count <= 0 { return true }
            }
        }
        return false
    }

    static func send(_ descriptor: Int32, _ text: String) {
        _ = Array(text.utf8).withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    @Test("idle connections, unfinished heads and unfinished bodies are closed by their timeouts")
    func connectionTimeouts() async throws {
        try await F.withListeningServer({
            $0.idleTimeoutSeconds = 1
            $0.requestTimeoutSeconds = 1
        }) { port in
            var idle: Int32 = -1
            let start = ContinuousClock.now
            while idle < 0, ContinuousClock.now - start < .seconds(60) {
                idle = Self.connect(port: port)
                if idle < 0 { try await Task.sleep(for: .milliseconds(50)) }
            }
            let head = Self.connect(port: port)
            Self.send(head, "POST /v1/challenges HTTP/1.1\r\nHost: x\r\n")
            let body = Self.connect(port: port)
            Self.send(body, "POST /v1/challenges HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"purpose\"")
            #expect(idle >= 0 && head >= 0 && body >= 0)
            #expect(Self.closedByServer(idle, within: 15), "idle connection")
            #expect(Self.closedByServer(head, within: 15), "unfinished head")
            #expect(Self.closedByServer(body, within: 15), "unfinished body")
            for descriptor in [idle, head, body] { close(descriptor) }
            // The head alone in one read, then the body a byte every 0.4 s: never idle for the idle timeout, so only the
            // request's deadline, which runs from the head's read, can close it.
            let trickle = Self.connect(port: port)
            #expect(trickle >= 0)
            Self.send(trickle, "POST /v1/challenges HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            var closed = false
            for _ in 0..<12 where !closed {
                try await Task.sleep(for: .milliseconds(400))
                Self.send(trickle, "a")
                closed = Self.closedByServer(trickle, within: 0.05)
            }
            #expect(closed, "a body trickling in a byte at a time, never finished")
            close(trickle)
        }
    }

    @Test("with a soft limit of 256 open files and 300 idle connections, `appattest serve` still answers /health")
    func lowFileLimit() async throws {
        let directory = try F.directory()
        let configuration = try F.configuration(directory: directory)
        let port = Int.random(in: 20001...24999)  // below the ephemeral ports (32768–60999)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "ulimit -S -n 256 && exec \"$0\" serve", Self.appattest.path]
        var environment = ProcessInfo.processInfo.environment
        environment["APPATTEST_PORT"] = "\(port)"
        environment["APPATTEST_DATABASE"] = configuration.database
        environment["APPATTEST_APPS"] = F.appID.rawValue
        environment["APPATTEST_TOKENS"] = "orders:\(F.tokenA)"
        environment["APPATTEST_TESTING_ROOT"] = configuration.testingRootCertificate
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        #expect(await Self.health(port: port, attempts: 100))
        let idle = (0..<300).map { _ in Self.connect(port: port) }
        #expect(await Self.health(port: port, attempts: 20), "/health with 300 idle connections")
        for descriptor in idle where descriptor >= 0 { close(descriptor) }
        await ProcessWait.stop(process)
    }

    /// The `appattest` executable, built beside the test bundle.
    static let appattest: URL = {
        let bundle = Bundle.main.bundleURL.deletingLastPathComponent()
        let beside = bundle.appendingPathComponent("appattest")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(
            ".build/debug/appattest")
    }()

    /// Whether GET /health answers 200 within `attempts` tries a quarter of a second apart.
    static func health(port: Int, attempts: Int) async -> Bool {
        for _ in 0..<attempts {
            let descriptor = connect(port: port)
            if descriptor >= 0 {
                send(descriptor, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                var buffer = [UInt8](repeating: 0, count: 512)
                var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                if poll(&poller, 1, 2000) > 0 {
                    let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                    close(descriptor)
                    if count > 0, String(decoding: buffer.prefix(count), as: UTF8.self).hasPrefix("HTTP/1.1 200") {
                        return true
                    }
                } else {
                    close(descriptor)
                }
            }
            try? await Task.sleep(for: .milliseconds(250))
        }
        return false
    }

    // MARK: Callers

    static let verifyOnly = "token-of-the-gateway-verify-only"
    static let otherApp = "token-of-a-caller-for-another-app"

    func rawAssertion(_ device: SimulatedDevice, _ text: String) throws -> String {
        let raw = Array(text.utf8)
        return """
            {"keyId":"\(device.keyID.base64EncodedString)",\
            "assertion":"\(Data(try device.assert(clientData: raw)).base64EncodedString())",\
            "clientData":"\(Data(raw).base64EncodedString())"}
            """
    }

    @Test("each token carries permissions and App IDs: a verify-only caller cannot read, revoke or register keys")
    func callerScopes() async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let keyPath = "/v1/keys/" + RequestBindingLayout.base64URL(device.keyID.rawValue)
        let tests = ServerTests()
        try await F.withServer({ configuration in
            configuration.apps.append(.init(appId: "OTHER12345.com.example.other", environments: ["production"]))
            configuration.tokens += [
                .init(name: "gateway", token: Self.verifyOnly, permissions: [.verify], appIds: [F.appID.rawValue]),
                .init(name: "other", token: Self.otherApp, appIds: ["OTHER12345.com.example.other"]),
            ]
        }) { _, client in
            try await tests.register(client, device)

            // verify-only: assertions pass; reading, revoking, refreshing and registering are 403.
            var response = try await tests.post(
                client, "/v1/assertions/verify", try rawAssertion(device, "one"), token: Self.verifyOnly)
            #expect(response.status == .ok)
            response = try await client.execute(uri: keyPath, method: .get, headers: F.headers(Self.verifyOnly))
            #expect(response.status == .forbidden)
            for path in [keyPath + "/revoke", keyPath + "/receipt/refresh"] {
                response = try await tests.post(client, path, "", token: Self.verifyOnly)
                #expect(response.status == .forbidden, "\(path)")
            }
            response = try await tests.post(
                client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: Self.verifyOnly)
            #expect(response.status == .forbidden)

            // Another App ID's caller: the key does not exist for it, and its assertion changes nothing.
            response = try await client.execute(uri: keyPath, method: .get, headers: F.headers(Self.otherApp))
            #expect(response.status == .notFound)
            response = try await tests.post(client, keyPath + "/revoke", "", token: Self.otherApp)
            #expect(response.status == .notFound)
            response = try await tests.post(
                client, "/v1/assertions/verify", try rawAssertion(device, "two"), token: Self.otherApp)
            #expect(response.status == .notFound)
            // Nor can it register a key of an App ID it does not cover.
            let issued = try await tests.post(
                client, "/v1/challenges", #"{"purpose":"attestation"}"#, token: Self.otherApp)
            let challenge = try #require(F.json(issued)["challenge"] as? String)
            let newDevice = try SimulatedDevice(authority: F.authority, appID: F.appID)
            let object = try newDevice.attest(
                challenge: try #require(RequestBindingLayout.decodeBase64URL(challenge)))
            response = try await tests.post(
                client, "/v1/attestations",
                """
                {"keyId":"\(newDevice.keyID.base64EncodedString)",\
                "attestationObject":"\(Data(object).base64EncodedString())","challenge":"\(challenge)"}
                """, token: Self.otherApp)
            #expect(response.status == .forbidden)

            // The key is untouched: not revoked, counter 1.
            response = try await client.execute(uri: keyPath, method: .get, headers: F.headers())
            #expect(F.json(response)["counter"] as? Int == 1)
            #expect(F.json(response)["revokedAt"] == nil)
        }
    }

    @Test(
        "with the database unreachable, start-up fails within startupTimeoutSeconds with a message",
        .timeLimit(.minutes(1)))
    func unreachableDatabase() async throws {
        let directory = try F.directory()
        var configuration = try F.configuration(directory: directory)
        configuration.database = "postgres://postgres@127.0.0.1:1/appattest?sslmode=disable"
        configuration.startupTimeoutSeconds = 2
        let start = ContinuousClock.now
        do {
            let server = try await AppAttestServer.open(configuration: configuration)
            await server.close()
            Issue.record("the server opened on an unreachable database")
        } catch {
            #expect("\(error)".contains("did not answer"), "\(error)")
        }
        // Failing rather than retrying for ever is what this guards (without a start-up timeout the pool retries for
        // ever). Alone it fails in about 3 s; the bound is wide because with every suite running at once on two cores
        // the timer's wake-up waits for a free thread (14.2 s in one run).
        #expect(ContinuousClock.now - start < .seconds(45))
    }
}
#endif  // Service
