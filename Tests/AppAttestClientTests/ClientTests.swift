#if Service && Vapor
import AppAttest
import AppAttestHTTP
import AppAttestLifecycle
import AppAttestWire
@testable import AppAttestClient
import AppAttestStore
import AppAttestTesting
import Foundation
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The client's own behaviour against a scripted transport: what it sends, and how it recovers.
@Suite("AppAttestClient")
struct ClientTests {
    /// Answers the challenge and attestation routes like the adapters do, and protected requests with a script of
    /// the servers' own problem documents (AppAttestHTTP's, as every server writes them).
    final class ScriptedTransport: AppAttestClientTransport {
        enum Answer {
            case problem(AppAttestProblem)
            /// The route's own answer with this status (not an App Attest refusal).
            case route(Int)
        }
        struct State {
            var sent: [URLRequest] = []
            var attestationStatus: [Int] = []
            /// Refusals of the next attestations, as the servers write them.
            var attestationRefusals: [AppAttestProblem] = []
            /// The next attestations are delivered, and their answers lost.
            var lostAttestationAnswers = 0
            var protected: [Answer] = []
            var date: String?
            /// Refusals of every challenge request, when set.
            var challengeRefusal: AppAttestProblem?
            /// Refusals of the challenge requests for these keys (as a server answers for a key it no longer has).
            var keyChallengeRefusals: [String: AppAttestProblem] = [:]
            /// The refusal of every challenge request for a key, when set.
            var everyKeyChallengeRefusal: AppAttestProblem?
            /// Protected answers carry a next challenge.
            var nextChallenges = false
            /// A proxy's answer (not an App Attest problem document) to every challenge request, when set.
            var challengeProxyAnswer: (status: Int, fields: [String: String])?
        }
        let state = Mutex(State())

        var sent: [URLRequest] { state.withLock { $0.sent } }
        func protectedSent(_ path: String = "/api/x") -> Int { sent.filter { $0.url!.path == path }.count }

        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            let url = request.url!
            let lost = state.withLock { state -> Bool in
                guard url.path == "/appattest/attestation", state.lostAttestationAnswers > 0 else { return false }
                state.lostAttestationAnswers -= 1
                state.sent.append(request)
                return true
            }
            if lost { throw URLError(.networkConnectionLost) }
            return state.withLock { state in
                state.sent.append(request)
                func answer(_ status: Int, _ body: [UInt8], _ fields: [String: String] = [:])
                    -> (Data, HTTPURLResponse)
                {
                    var fields = fields
                    if fields["Content-Type"] == nil { fields["Content-Type"] = "application/json" }
                    if let date = state.date { fields["Date"] = date }
                    return (
                        Data(body),
                        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: fields)!
                    )
                }
                func problem(_ problem: AppAttestProblem) -> (Data, HTTPURLResponse) {
                    var fields: [String: String] = [:]
                    for field in problem.headerFields { fields[field.name.rawName] = field.value }
                    return answer(Int(problem.status.code), problem.document, fields)
                }
                switch url.path {
                case "/appattest/challenge":
                    if let refusal = state.challengeRefusal { return problem(refusal) }
                    if let body = request.httpBody,
                        let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                        let keyID = object["keyId"] as? String,
                        let refusal = state.keyChallengeRefusals[keyID] ?? state.everyKeyChallengeRefusal
                    {
                        return problem(refusal)
                    }
                    if let proxy = state.challengeProxyAnswer {
                        return answer(proxy.status, Array("<html>busy</html>".utf8), proxy.fields)
                    }
                    return answer(
                        200, Array(#"{"challenge":"\#(RequestBindingLayoutTesting.challenge)","expiresAt":"x"}"#.utf8))
                case "/appattest/attestation":
                    if !state.attestationRefusals.isEmpty { return problem(state.attestationRefusals.removeFirst()) }
                    let status = state.attestationStatus.isEmpty ? 200 : state.attestationStatus.removeFirst()
                    switch status {
                    case 200: return answer(200, Array("{}".utf8))
                    case 503: return problem(AppAttestProblem(AppAttestServiceError(.storeUnavailable, "scripted")))
                    // Not the App Attest layer's: the app's own authentication, a proxy.
                    default: return answer(status, Array(#"{"code":"keyRevoked","error":"unauthorized"}"#.utf8))
                    }
                default:
                    switch state.protected.isEmpty ? .route(200) : state.protected.removeFirst() {
                    case .route(let status):
                        var fields = ["Content-Type": "text/plain"]
                        if state.nextChallenges {
                            fields["App-Attest-Next-Challenge"] = RequestBindingLayoutTesting.challenge
                        }
                        return answer(status, Array("ok".utf8), fields)
                    case .problem(let refusal): return problem(refusal)
                    }
                }
            }
        }
    }

    /// The problem each server answers for a service refusal.
    static func refusal(_ code: AppAttestServiceError.Code) -> ScriptedTransport.Answer {
        .problem(AppAttestProblem(AppAttestServiceError(code, "scripted")))
    }
    static let counterNotIncreasing = ScriptedTransport.Answer.problem(
        AppAttestProblem(
            AppAttestServiceError(
                .verificationFailed, "scripted", verification: AppAttestError(.counterNotIncreasing, "scripted"))))

    enum RequestBindingLayoutTesting {
        static let challenge = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
    }

    static let base = URL(string: "https://api.example.com")!

    func client(
        _ provider: SimulatedKeyProvider, _ transport: ScriptedTransport,
        freshness: AppAttestClientFreshness = .challengePerRequest,
        storage: any AppAttestKeyStorage = MemoryKeyStorage(), now: @escaping @Sendable () -> Date = { Date() }
    ) -> AppAttestClient {
        var configuration = AppAttestClientConfiguration(baseURL: Self.base, freshness: freshness)
        configuration.initialRetryDelay = 0.001
        configuration.maximumRetryDelay = 0.004
        configuration.now = now
        return AppAttestClient(
            configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport)
    }

    static func provider() -> SimulatedKeyProvider { SimulatedKeyProvider(authority: E2E.authority, appID: E2E.appID) }

    @Test("the target is the URL as it travels: encoded path, trailing slash, query")
    func target() throws {
        let cases = [
            ("https://h.example/a%20b/c", "/a%20b/c"), ("https://h.example/a%2Fb", "/a%2Fb"),
            ("https://h.example/dir/", "/dir/"), ("https://h.example", "/"), ("https://h.example/?", "/?"),
            ("https://h.example/s?q=a%20b&x=%2F", "/s?q=a%20b&x=%2F"), ("https://h.example/p;v=1?x#frag", "/p;v=1?x"),
        ]
        for (text, expected) in cases {
            #expect(AppAttestClient.pathAndQuery(of: try #require(URL(string: text))) == expected, "\(text)")
        }
        #expect(AppAttestClient.pathAndQuery(of: try #require(URL(string: "/relative"))) == nil)
    }

    @Test("the client data is the server's canonical binding, byte for byte")
    func binding() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let client = client(provider, transport)
        var request = URLRequest(url: URL(string: "https://api.example.com/api/orders%2F7/?draft=1")!)
        request.httpMethod = "patch"
        request.httpBody = Data("{\"n\":1}".utf8)
        let (_, response) = try await client.data(for: request)
        #expect(response.statusCode == 200)
        let signed = try #require(transport.sent.last)
        let keyID = try #require(signed.value(forHTTPHeaderField: "App-Attest-Key-Id"))
        let assertionText = try #require(signed.value(forHTTPHeaderField: "App-Attest-Assertion"))
        let assertion = try #require(Data(base64Encoded: assertionText))
        let challengeText = try #require(signed.value(forHTTPHeaderField: "App-Attest-Challenge"))
        let challenge = try #require(RequestBindingLayout.decodeBase64URL(challengeText))
        // The server's side: its own layout and verifier, with the key the device holds.
        let device = try #require(await provider.device(keyID))
        let clientData = try AppAttestClientData.request(
            method: "PATCH", pathAndQuery: "/api/orders%2F7/?draft=1", body: Array("{\"n\":1}".utf8),
            challenge: challenge
        ).bytes
        let key = try AttestedPublicKey(x963Representation: device.publicKey)
        let verifier = try AppAttestVerifier(
            configuration: .init(appID: E2E.appID, environment: .production, trustAnchor: E2E.authority.trustAnchor))
        let verified = try verifier.verifyAssertion(
            Array(assertion), clientData: clientData,
            key: AttestedKey(publicKey: key, appID: E2E.appID, environment: .production, counter: 0))
        #expect(verified.counter == 1)
    }

    @Test("featureUnsupported is a typed outcome, and nothing is sent")
    func unsupported() async throws {
        let provider = Self.provider()
        await provider.setSupported(false)
        let transport = ScriptedTransport()
        let client = client(provider, transport)
        #expect(await client.isSupported == false)
        await #expect(throws: AppAttestClientError.self) { try await client.register() }
        do {
            _ = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            Issue.record("no error")
        } catch {
            #expect(error.code == .featureUnsupported)
        }
        #expect(transport.sent.isEmpty)
    }

    @Test("serverUnavailable from Apple and 503 from the server are retried with backoff; the key is kept")
    func backoff() async throws {
        let provider = Self.provider()
        await provider.failNext(.serverUnavailable, times: 2)
        let transport = ScriptedTransport()
        transport.state.withLock { $0.attestationStatus = [503] }
        let storage = MemoryKeyStorage()
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.initialRetryDelay = 0.001
        configuration.maximumRetryDelay = 2  // the server's 503 asks for a second
        let client = AppAttestClient(
            configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport)
        let keyID = try await client.register()
        #expect(await provider.callCount("generateKey") == 1)
        // Two unavailable, then one attested: its object is posted again after the 503, never attested twice.
        #expect(await provider.callCount("attestKey") == 3)
        // Apple asks for the same clientDataHash after serverUnavailable: one challenge for the three attempts.
        #expect(transport.sent.filter { $0.url!.path == "/appattest/challenge" }.count == 1)
        #expect(await storage.load() == AppAttestStoredKey(keyID: keyID, registered: true))
    }

    @Test("registration gives up after the configured attempts, with the last error, then waits before the next")
    func givesUp() async throws {
        let provider = Self.provider()
        await provider.failNext(.serverUnavailable, times: 10)
        let transport = ScriptedTransport()
        let clock = Mutex(Date())
        let client = client(provider, transport, now: { clock.withLock { $0 } })
        func challenges() -> Int { transport.sent.filter { $0.url!.path == "/appattest/challenge" }.count }
        do {
            _ = try await client.register()
            Issue.record("no error")
        } catch {
            #expect(error.code == .keyProvider)
            #expect(error.providerCode == .serverUnavailable)
        }
        #expect(await provider.callCount("attestKey") == 5)
        // Called again at once (an app that retries its request): a deferral, not five more calls to a throttled
        // Apple and another attestation challenge from the server's budget.
        do {
            _ = try await client.register()
            Issue.record("no deferral")
        } catch {
            #expect(error.code == .deferred)
            #expect(error.retryAfter.map { $0.timeIntervalSince(clock.withLock { $0 }) > 30 } == true)
        }
        #expect(await provider.callCount("attestKey") == 5)
        // Once the wait is over, the same key again, with the challenge it was fetched for (Apple asks for the same
        // clientDataHash after serverUnavailable); the next wait is longer.
        clock.withLock { $0 += 61 }
        await #expect(throws: AppAttestClientError.self) { _ = try await client.register() }
        #expect(await provider.callCount("attestKey") == 10)
        #expect(await provider.callCount("generateKey") == 1)
        #expect(challenges() == 1)
        clock.withLock { $0 += 61 }
        do {
            _ = try await client.register()
            Issue.record("no deferral")
        } catch {
            #expect(error.code == .deferred)
        }
        // And once Apple answers, it registers.
        clock.withLock { $0 += 4 * 60 }
        _ = try await client.register()
        #expect(await provider.callCount("attestKey") == 11)
    }

    @Test("concurrent first requests share one registration")
    func oneRegistration() async throws {
        let provider = Self.provider()
        let client = client(provider, ScriptedTransport())
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<8 {
                group.addTask {
                    try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/\(index)"))).1
                        .statusCode
                }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(await provider.callCount("generateKey") == 1)
        #expect(await provider.callCount("attestKey") == 1)
    }

    @Test(
        "a key the challenge route refuses with reattest (or as revoked, when so configured) is replaced, not kept",
        arguments: [(AppAttestServiceError.Code.unknownKey, false), (.keySuperseded, false), (.keyRevoked, true)])
    func challengeRouteReplacesTheKey(code: AppAttestServiceError.Code, reattestsRevoked: Bool) async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.initialRetryDelay = 0.001
        configuration.maximumRetryDelay = 0.004
        configuration.reattestsRevokedKeys = reattestsRevoked
        let client = AppAttestClient(
            configuration: configuration, keyProvider: provider, keyStorage: MemoryKeyStorage(), transport: transport)
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        _ = try await client.data(for: request)
        let first = try #require(await client.registeredKeyID)
        // The server no longer has the key (a restored database) or revoked it: its challenges are refused.
        transport.state.withLock {
            $0.keyChallengeRefusals[first] = AppAttestProblem(AppAttestServiceError(code, "scripted"))
        }
        let (_, response) = try await client.data(for: request)
        #expect(response.statusCode == 200)
        let second = try #require(await client.registeredKeyID)
        #expect(second != first)
        #expect(await provider.callCount("generateKey") == 2)
        #expect(transport.protectedSent() == 2)
        // Once per request: when the new key is refused alike, the request fails rather than making key after key.
        transport.state.withLock {
            $0.everyKeyChallengeRefusal = AppAttestProblem(AppAttestServiceError(code, "scripted"))
        }
        await #expect(throws: AppAttestClientError.self) { _ = try await client.data(for: request) }
        #expect(await provider.callCount("generateKey") == 3)
        #expect(transport.protectedSent() == 2)
    }

    @Test("a key the challenge route refuses as revoked is the request's refusal (requestRefused), as the docs say")
    func challengeRouteRefusesTheKey() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let client = client(provider, transport)
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        _ = try await client.data(for: request)
        let keyID = try #require(await client.registeredKeyID)
        transport.state.withLock {
            $0.keyChallengeRefusals[keyID] = AppAttestProblem(AppAttestServiceError(.keyRevoked, "scripted"))
        }
        do {
            _ = try await client.data(for: request)
            Issue.record("no error")
        } catch {
            #expect(error.code == .requestRefused && error.problemCode == "keyRevoked" && error.action == "none")
        }
        // Kept: revoking a key stops the device until the app decides.
        #expect(await client.registeredKeyID == keyID)
        #expect(await provider.callCount("generateKey") == 1)
    }

    @Test("refusals are handled as their action says, once each: a new key, a new challenge, a later counter")
    func repairs() async throws {
        for (name, answer) in [
            ("unknownKey", Self.refusal(.unknownKey)), ("challengeUnknown", Self.refusal(.challengeUnknown)),
            ("counterNotIncreasing", Self.counterNotIncreasing), ("challengeExpired", Self.refusal(.challengeExpired)),
        ] {
            let provider = Self.provider()
            let transport = ScriptedTransport()
            transport.state.withLock { $0.protected = [answer] }
            let client = client(provider, transport)
            let (_, response) = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            #expect(response.statusCode == 200, "\(name)")
            #expect(transport.protectedSent() == 2, "\(name)")
            #expect(await provider.callCount("generateKey") == (name == "unknownKey" ? 2 : 1), "\(name)")
        }
        // The same refusal twice is thrown, typed, not retried again.
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [Self.refusal(.challengeUnknown), Self.refusal(.challengeUnknown)] }
        do {
            _ = try await client(Self.provider(), transport).data(
                for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            Issue.record("no error")
        } catch {
            #expect(error.code == .requestRefused)
            #expect(
                error.problemCode == "challengeUnknown" && error.action == "refetchChallenge" && error.status == 409)
        }
        #expect(transport.protectedSent() == 2)
        // A route's own 401 is the app's business: returned, not retried.
        let plain = ScriptedTransport()
        plain.state.withLock { $0.protected = [.route(401)] }
        let (_, own) = try await client(Self.provider(), plain).data(
            for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
        #expect(own.statusCode == 401)
        #expect(plain.protectedSent() == 1)
    }

    @Test("a POST refused as a second delivery would be is not sent again: it may have run")
    func neverTwice() async throws {
        for answer in [Self.refusal(.challengeUnknown), Self.refusal(.counterReplayed), Self.counterNotIncreasing] {
            let transport = ScriptedTransport()
            transport.state.withLock { $0.protected = [answer] }
            var post = URLRequest(url: Self.base.appendingPathComponent("api/x"))
            post.httpMethod = "POST"
            do {
                _ = try await client(Self.provider(), transport).data(for: post)
                Issue.record("no error")
            } catch {
                #expect(error.code == .requestMayHaveRun)
            }
            #expect(transport.protectedSent() == 1)
            // A PUT the app marks as not idempotent is treated the same; a POST it marks idempotent is resent.
            transport.state.withLock { $0.protected = [answer] }
            var put = post
            put.httpMethod = "PUT"
            await #expect(throws: AppAttestClientError.self) {
                try await client(Self.provider(), transport).data(for: put, isIdempotent: false)
            }
            #expect(transport.protectedSent() == 2)
            transport.state.withLock { $0.protected = [answer] }
            #expect(
                try await client(Self.provider(), transport).data(for: post, isIdempotent: true).1.statusCode == 200)
            #expect(transport.protectedSent() == 4)
        }
        // A challenge that expired unused proves the request never ran: a POST is signed again.
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [Self.refusal(.challengeExpired)] }
        var post = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        post.httpMethod = "POST"
        #expect(try await client(Self.provider(), transport).data(for: post).1.statusCode == 200)
        #expect(transport.protectedSent() == 2)
    }

    @Test("a revoked key is not replaced unless configured; an App Attest refusal is typed, never a bare 401")
    func revoked() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [Self.refusal(.keyRevoked)] }
        do {
            _ = try await client(provider, transport).data(
                for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            Issue.record("no error")
        } catch {
            #expect(error.code == .requestRefused && error.problemCode == "keyRevoked" && error.action == "none")
        }
        #expect(await provider.callCount("generateKey") == 1)
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.reattestsRevokedKeys = true
        transport.state.withLock { $0.protected = [Self.refusal(.keyRevoked)] }
        let client = AppAttestClient(configuration: configuration, keyProvider: provider, transport: transport)
        #expect(
            try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x"))).1.statusCode == 200)
        #expect(await provider.callCount("generateKey") == 3)  // this client's first key, then its replacement
    }

    @Test("a key that fails on the device is replaced, once per request and within the day's limit")
    func noLockout() async throws {
        for code in [AppAttestKeyProviderError.Code.unknownSystemFailure, .invalidInput, .invalidKey] {
            let provider = Self.provider()
            let transport = ScriptedTransport()
            var configuration = AppAttestClientConfiguration(baseURL: Self.base)
            configuration.maximumKeyReplacementsPerDay = 1
            let client = AppAttestClient(configuration: configuration, keyProvider: provider, transport: transport)
            let first = try await client.register()
            // Every assertion of this key fails, as some keys do after a restore.
            await provider.fail(.generateAssertion, with: code, keyID: first, times: nil)
            let (_, response) = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            #expect(response.statusCode == 200, "\(code)")
            let second = try #require(await client.registeredKeyID)
            #expect(second != first)
            // The second key fails too: the day's replacement is spent, so the client defers instead of attesting.
            await provider.fail(.generateAssertion, with: code, keyID: second, times: nil)
            do {
                _ = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
                Issue.record("no error")
            } catch {
                #expect(error.code == .deferred, "\(code)")
                #expect((error.retryAfter?.timeIntervalSinceNow ?? 0) > 86_000)
            }
            #expect(await provider.callCount("attestKey") == 2)
        }
    }

    @Test(
        "apps told the same Retry-After come back spread over half as long again, never sooner; a spread wait past the limit is a deferral, never cut to it"
    )
    func retryAfterSpread() {
        func waits(_ wait: TimeInterval, within limit: TimeInterval) -> (
            sleeps: [TimeInterval], deferrals: [TimeInterval]
        ) {
            var sleeps: [TimeInterval] = [], deferrals: [TimeInterval] = []
            for _ in 0..<1_000 {
                switch AppAttestClient.retryWait(toldToWait: wait, within: limit) {
                case .sleep(let seconds): sleeps.append(seconds)
                case .deferral(let seconds): deferrals.append(seconds)
                }
            }
            return (sleeps, deferrals)
        }
        // Spread: a quarter of them in each half of the window at least (1 in 10^100 to fail by chance).
        func spread(_ delays: [TimeInterval], over window: ClosedRange<TimeInterval>) -> Bool {
            let middle = (window.lowerBound + window.upperBound) / 2
            return delays.allSatisfy { window.contains($0) } && delays.filter { $0 < middle }.count > 250
                && delays.filter { $0 >= middle }.count > 250
        }
        let short = waits(2, within: 60)
        #expect(short.deferrals.isEmpty && spread(short.sleeps, over: 2...3))
        // Told the limit itself: every app deferred, to times spread as widely (before, all slept exactly 60 s).
        let atLimit = waits(60, within: 60)
        #expect(atLimit.sleeps.allSatisfy { $0 == 60 } && atLimit.sleeps.count < 2)
        #expect(spread(atLimit.deferrals, over: 60...90))
        // Near it: within the limit when the share fits, deferred past it when not; never sooner than told.
        let near = waits(50, within: 60)
        #expect(near.sleeps.allSatisfy { (50...60).contains($0) } && near.deferrals.allSatisfy { $0 > 60 && $0 <= 75 })
        #expect(near.sleeps.count > 250 && near.deferrals.count > 250)
        #expect(AppAttestClient.retryWait(toldToWait: 0, within: 60) == .sleep(0))
        #expect(AppAttestClient.retryWait(toldToWait: -5, within: 60) == .sleep(0))
        // A wait beyond a day (a configured delay of `infinity`, a server's error) counts as a day.
        for wait in [TimeInterval.infinity, 1e300, .nan] {
            switch AppAttestClient.retryWait(toldToWait: wait, within: 60) {
            case .deferral(let seconds): #expect((86_400...129_600).contains(seconds), "\(wait)")
            case .sleep(let seconds): #expect(wait.isNaN && seconds == 0, "\(wait)")
            }
        }
    }

    @Test("Retry-After: at most a day whatever its digits, a date measured against the server's Date, nothing else")
    func retryAfterHeader() {
        func retryAfter(_ value: String, date: String? = nil) -> TimeInterval? {
            var fields = ["Retry-After": value]
            if let date { fields["Date"] = date }
            let response = HTTPURLResponse(
                url: Self.base, statusCode: 503, httpVersion: "HTTP/1.1", headerFields: fields)!
            return AppAttestClient.retryAfter(response)
        }
        #expect(retryAfter("120") == 120)
        #expect(retryAfter(" 7 ") == 7)
        // Before, `Int(wait)` of these trapped when the deferral's message was made.
        #expect(retryAfter("9223372036854775807") == 86_400)
        #expect(retryAfter("99999999999999999999999") == 86_400)
        #expect(retryAfter("-5") == nil && retryAfter("1e3") == nil && retryAfter("") == nil)
        // Against the answer's Date, whatever the device's clock says (here, years after both).
        let server = "Sat, 01 Jan 2000 12:00:00 GMT"
        #expect(retryAfter("Sat, 01 Jan 2000 12:00:30 GMT", date: server) == 30)
        #expect(retryAfter("Sat, 01 Jan 2000 11:59:00 GMT", date: server) == 0)
        // Without a Date, against the device's clock.
        #expect(retryAfter("Sat, 01 Jan 2000 12:00:30 GMT") == 0)
    }

    @Test("a challenge route that answers Retry-After: 0 is asked again with growing waits, a few times, then deferred")
    func challengeRetriesEnd() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock { $0.challengeRefusal = .rateLimited(retryAfter: 0) }
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.initialRetryDelay = 0.001
        let client = AppAttestClient(configuration: configuration, keyProvider: Self.provider(), transport: transport)
        // Before, each refusal was asked again at once, without end.
        let started = ContinuousClock.now
        await #expect {
            try await client.register()
        } throws: { error in
            (error as? AppAttestClientError)?.code == .deferred
        }
        let challenges = transport.sent.filter { $0.url!.path == "/appattest/challenge" }.count
        #expect(challenges == 1 + AppAttestClient.maximumChallengeRetries)
        // The waits grew from initialRetryDelay: 1 + 2 + 4 + 8 + 16 + 32 ms at least.
        #expect(ContinuousClock.now - started >= .milliseconds(63))
    }

    @Test("a busy challenge route's wait without a Retry-After is bounded by maximumRetryDelay, deferral included")
    func challengeBackoffBounded() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock { $0.challengeRefusal = .rateLimited(retryAfter: 0) }
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.initialRetryDelay = 100
        configuration.maximumRetryDelay = 0.05
        // The client's clock stands still, so that the deferral's time is its wait alone, however long the machine
        // takes to run the request.
        let asked = Date()
        configuration.now = { asked }
        let client = AppAttestClient(configuration: configuration, keyProvider: Self.provider(), transport: transport)
        var until: Date?
        do {
            _ = try await client.register()
            Issue.record("no error")
        } catch {
            #expect(error.code == .deferred)
            until = error.retryAfter
        }
        // The backoff's step is at most maximumRetryDelay, and the deferral at most half again: before, the step was
        // initialRetryDelay's 100 s whatever the limit, and the app was deferred for 100 to 150 s.
        let deferred = try #require(until).timeIntervalSince(asked)
        #expect(deferred <= 1, "deferred \(deferred) s")
    }

    @Test("a proxy's 503 with a long Retry-After defers that call alone; an App Attest refusal's deferral is kept")
    func proxyDeferral() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock { $0.challengeProxyAnswer = (503, ["Retry-After": "86400"]) }
        let client = client(Self.provider(), transport)
        for _ in 0..<2 {
            await #expect {
                try await client.register()
            } throws: { error in
                (error as? AppAttestClientError)?.code == .deferred
            }
        }
        // Each call asked: the proxy speaks for no App Attest server, so its wait holds nothing back.
        #expect(transport.sent.filter { $0.url!.path == "/appattest/challenge" }.count == 2)
        transport.state.withLock { $0.challengeProxyAnswer = nil }
        #expect(try await client.register().isEmpty == false)
    }

    @Test("after a deferral the client sends nothing until its time, then goes on")
    func deferralIsKept() async throws {
        let transport = ScriptedTransport()
        let clock = Mutex(Date())
        let client = client(Self.provider(), transport, now: { clock.withLock { $0 } })
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        #expect(try await client.data(for: request).1.statusCode == 200)
        transport.state.withLock { $0.protected = [.problem(.rateLimited(retryAfter: 120))] }
        var until: Date?
        do {
            _ = try await client.data(for: request)
            Issue.record("no error")
        } catch {
            #expect(error.code == .deferred)
            until = error.retryAfter
        }
        let deferredUntil = try #require(until)
        #expect((120...180).contains(deferredUntil.timeIntervalSince(clock.withLock { $0 })))
        let sent = transport.sent.count
        // An app that retries at once: refused by the client itself, with the same time, nothing sent.
        for _ in 0..<3 {
            do {
                _ = try await client.data(for: request)
                Issue.record("no error")
            } catch {
                #expect(error.code == .deferred && error.retryAfter == deferredUntil)
            }
        }
        #expect(transport.sent.count == sent)
        // A device clock set back a year holds it no longer than the wait the server gave.
        clock.withLock { $0 = $0.addingTimeInterval(-365 * 86_400) }
        do {
            _ = try await client.data(for: request)
            Issue.record("no error")
        } catch {
            let left = try #require(error.retryAfter).timeIntervalSince(clock.withLock { $0 })
            #expect(error.code == .deferred && left > 100 && left <= 180)
        }
        #expect(transport.sent.count == sent)
        clock.withLock { $0 = deferredUntil.addingTimeInterval(1) }
        #expect(try await client.data(for: request).1.statusCode == 200)
        // One `deferred` event for the deferral, however many calls it refused (up to the second answer).
        var kinds: [AppAttestClientEvent.Kind] = []
        for await event in client.events {
            kinds.append(event.kind)
            if kinds.filter({ $0 == .answered }).count == 2 { break }
        }
        #expect(kinds.filter { $0 == .deferred }.count == 1, "\(kinds.map(\.name))")
    }

    @Test("retry answers wait for Retry-After and are sent again; a longer wait is a deferral that says until when")
    func retryAfter() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [.problem(.rateLimited(retryAfter: 0))] }
        let client = client(Self.provider(), transport)
        #expect(
            try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x"))).1.statusCode == 200)
        #expect(transport.protectedSent() == 2)
        // A POST is sent again as it was signed (its first delivery did not run: the same assertion is accepted);
        // the GET above was signed again.
        transport.state.withLock { $0.protected = [.problem(.rateLimited(retryAfter: 0))] }
        var post = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        post.httpMethod = "POST"
        post.httpBody = Data("{}".utf8)
        #expect(try await client.data(for: post).1.statusCode == 200)
        let assertions = transport.sent.filter { $0.url!.path == "/api/x" }.map {
            $0.value(forHTTPHeaderField: "App-Attest-Assertion")
        }
        #expect(assertions.count == 4 && assertions[0] != assertions[1] && assertions[2] == assertions[3])
        // 503 asks for a second; this client waits at most 4 ms.
        transport.state.withLock { $0.protected = [Self.refusal(.storeUnavailable)] }
        do {
            _ = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
            Issue.record("no error")
        } catch {
            #expect(error.code == .deferred && error.problemCode == "storeUnavailable")
            #expect(error.retryAfter != nil)
        }
        #expect(transport.protectedSent() == 5)
    }

    @Test("the lifecycle as events: key generated and attested, repairs, a key reset, each answer, a deferral")
    func events() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let client = client(provider, transport)
        transport.state.withLock {
            $0.protected = [Self.refusal(.challengeExpired), Self.refusal(.unknownKey)]
        }
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        #expect(try await client.data(for: request).1.statusCode == 200)
        transport.state.withLock { $0.protected = [Self.refusal(.storeUnavailable)] }
        await #expect(throws: AppAttestClientError.self) { try await client.data(for: request) }
        var events: [AppAttestClientEvent] = []
        for await event in client.events {
            events.append(event)
            if events.count == 9 { break }
        }
        #expect(
            events.map(\.kind) == [
                .keyGenerated, .keyAttested, .repaired, .keyReset, .repaired, .keyGenerated, .keyAttested, .answered,
                .deferred,
            ])
        #expect(events[2].code == "challengeExpired" && events[3].code == "unknownKey")
        #expect(events[3].keyID == events[0].keyID && events[5].keyID != events[0].keyID)
        #expect(events[7].status == 200 && events[7].latency != nil)
        #expect(events[8].code == "storeUnavailable" && events[8].until != nil)
        #expect(!events[0].description.contains(events[0].keyID!), "the description leaves the keyId out")
    }

    /// A provider whose `attestKey` waits until the test opens its gate.
    actor GatedProvider: AppAttestKeyProvider {
        let inner: SimulatedKeyProvider
        private var gate: CheckedContinuation<Void, Never>?
        private var arrived: CheckedContinuation<Void, Never>?
        private var waiting = false
        init(_ inner: SimulatedKeyProvider) { self.inner = inner }

        var isSupported: Bool { true }
        func generateKey() async throws -> String { try await inner.generateKey() }
        func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data {
            try await inner.generateAssertion(keyID, clientDataHash: clientDataHash)
        }
        func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data {
            await withCheckedContinuation { continuation in
                gate = continuation
                waiting = true
                arrived?.resume()
                arrived = nil
            }
            return try await inner.attestKey(keyID, clientDataHash: clientDataHash)
        }
        /// Returns once an attestation waits at the gate.
        func untilWaiting() async {
            if waiting { return }
            await withCheckedContinuation { arrived = $0 }
        }
        func open() {
            gate?.resume()
            gate = nil
        }
    }

    @Test(
        "a caller cancelled while the key registers stops waiting; the registration goes on for the others",
        .timeLimit(.minutes(1)))
    func cancelledWhileRegistering() async throws {
        let provider = GatedProvider(Self.provider())
        let client = AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: Self.base), keyProvider: provider,
            transport: ScriptedTransport())
        let cancelled = Task { try await client.register() }
        await provider.untilWaiting()
        let other = Task { try await client.register() }
        cancelled.cancel()
        // Before the gate opens: the cancelled caller is not held by the registration.
        await #expect(throws: AppAttestClientError.self) { try await cancelled.value }
        await provider.open()
        let keyID = try await other.value
        #expect(await client.registeredKeyID == keyID)
    }

    /// A storage whose loads take a while, counted.
    actor SlowStorage: AppAttestKeyStorage {
        let inner: MemoryKeyStorage
        private(set) var loads = 0
        init(_ inner: MemoryKeyStorage) { self.inner = inner }
        func load() async throws -> AppAttestStoredKey? {
            loads += 1
            try await Task.sleep(for: .milliseconds(100))
            return await inner.load()
        }
        func save(_ key: AppAttestStoredKey) async throws { await inner.save(key) }
        func remove() async throws { await inner.remove() }
    }

    @Test("requests at launch share one load of the storage: none applies a late read over what another did since")
    func oneLoadAtLaunch() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let memory = MemoryKeyStorage()
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        _ = try await AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: Self.base), keyProvider: provider,
            keyStorage: memory, transport: transport
        ).data(for: request)
        let registered = try #require(await memory.load()?.keyID)
        // A relaunch after a restore: the stored key is gone from the device. Two requests at once.
        await provider.loseKeys()
        let storage = SlowStorage(memory)
        let client = AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: Self.base), keyProvider: provider,
            keyStorage: storage, transport: transport)
        async let first = client.data(for: request)
        async let second = client.data(for: request)
        #expect(try await first.1.statusCode == 200)
        #expect(try await second.1.statusCode == 200)
        #expect(await storage.loads == 1)
        // One new key, attested once, and stored.
        #expect(await provider.callCount("attestKey") == 2)
        let stored = try #require(await memory.load())
        let current = await client.registeredKeyID
        #expect(stored.keyID != registered && stored.keyID == current)
    }

    @Test("resetKey cancels a registration in flight: what it finishes afterwards is not saved")
    func resetDuringRegistration() async throws {
        let provider = GatedProvider(Self.provider())
        let storage = MemoryKeyStorage()
        let client = AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: Self.base), keyProvider: provider,
            keyStorage: storage, transport: ScriptedTransport())
        let registering = Task { try await client.register() }
        await provider.untilWaiting()
        try await client.resetKey()
        await provider.open()
        await #expect(throws: AppAttestClientError.self) { try await registering.value }
        #expect(await storage.load() == nil)
        #expect(await client.registeredKeyID == nil)
    }

    @Test("a refused attestation discards the key and waits, across relaunches, longer after each refusal")
    func refusedAttestation() async throws {
        let provider = Self.provider()
        let storage = MemoryKeyStorage()
        let transport = ScriptedTransport()
        let clock = Mutex(Date())
        func client() -> AppAttestClient {
            var configuration = AppAttestClientConfiguration(baseURL: Self.base)
            configuration.now = { clock.withLock { $0 } }
            return AppAttestClient(
                configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport)
        }
        let refusal = AppAttestProblem(AppAttestServiceError(.environmentNotAllowed, "scripted"))
        transport.state.withLock { $0.attestationRefusals = [refusal, refusal] }
        let first = client()
        do {
            _ = try await first.register()
            Issue.record("no error")
        } catch {
            #expect(error.code == .registrationRefused && error.problemCode == "environmentNotAllowed")
        }
        // At once, and after a relaunch: deferred for a minute, nothing generated, attested or sent.
        for client in [first, client()] {
            do {
                _ = try await client.register()
                Issue.record("no deferral")
            } catch {
                #expect(error.code == .deferred)
                #expect(abs((error.retryAfter ?? .distantPast).timeIntervalSince(clock.withLock { $0 }) - 60) < 1)
            }
        }
        // A reset while no key is current (the refused one was discarded) keeps the history: still deferred, after a
        // relaunch too.
        try await first.resetKey()
        for client in [first, client()] {
            await #expect(throws: AppAttestClientError.self, "deferred after a reset") { try await client.register() }
        }
        #expect(await storage.load()?.history?.notBefore != nil)
        #expect(await provider.callCount("generateKey") == 1)
        #expect(await provider.callCount("attestKey") == 1)
        // A minute later: a new key, refused again, and a four-minute wait.
        clock.withLock { $0 += 61 }
        await #expect(throws: AppAttestClientError.self) { try await client().register() }
        do {
            _ = try await client().register()
            Issue.record("no deferral")
        } catch {
            #expect(abs((error.retryAfter ?? .distantPast).timeIntervalSince(clock.withLock { $0 }) - 240) < 1)
        }
        // Four minutes later the server accepts it, and the history of refusals is cleared.
        clock.withLock { $0 += 241 }
        let relaunched = client()
        let keyID = try await relaunched.register()
        #expect(await provider.callCount("generateKey") == 3)
        #expect(await provider.callCount("attestKey") == 3)
        let stored = try #require(await storage.load())
        #expect(stored.keyID == keyID && stored.registered && stored.history?.refusedAttestations ?? 0 == 0)
        #expect(stored.history?.discards.count == 2)
    }

    @Test("a device clock set back after a refused attestation holds registration no longer than the refusal's wait")
    func refusedAttestationClockSetBack() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let clock = Mutex(Date())
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.now = { clock.withLock { $0 } }
        let client = AppAttestClient(configuration: configuration, keyProvider: provider, transport: transport)
        let refusal = AppAttestProblem(AppAttestServiceError(.environmentNotAllowed, "scripted"))
        transport.state.withLock { $0.attestationRefusals = [refusal] }
        await #expect(throws: AppAttestClientError.self) { try await client.register() }
        // A year back: the stored time is a year and a minute ahead, but the wait stays the one refusal's minute.
        clock.withLock { $0 -= 365 * 86_400 }
        do {
            _ = try await client.register()
            Issue.record("no deferral")
        } catch {
            #expect(error.code == .deferred)
            #expect((error.retryAfter ?? .distantFuture).timeIntervalSince(clock.withLock { $0 }) <= 60)
        }
        // A minute on, the client registers a new key (before, not until the clock caught up a year later).
        clock.withLock { $0 += 61 }
        #expect(try await client.register().isEmpty == false)
        #expect(await provider.callCount("attestKey") == 2)
    }

    @Test("the wait a clock set back shortened is stored as shortened: a relaunch does not start it again")
    func refusedAttestationClockSetBackRelaunch() async throws {
        let provider = Self.provider()
        let storage = MemoryKeyStorage()
        let transport = ScriptedTransport()
        let clock = Mutex(Date())
        let first = client(provider, transport, storage: storage, now: { clock.withLock { $0 } })
        let refusal = AppAttestProblem(AppAttestServiceError(.environmentNotAllowed, "scripted"))
        transport.state.withLock { $0.attestationRefusals = [refusal] }
        await #expect(throws: AppAttestClientError.self) { try await first.register() }
        clock.withLock { $0 -= 365 * 86_400 }
        var shortened: Date?
        do {
            _ = try await first.register()
            Issue.record("no deferral")
        } catch {
            #expect(error.code == .deferred)
            shortened = error.retryAfter
        }
        let until = try #require(shortened)
        // Relaunched half a minute later, on the same storage: the same time, not a minute from the relaunch.
        clock.withLock { $0 += 30 }
        let second = client(provider, transport, storage: storage, now: { clock.withLock { $0 } })
        do {
            _ = try await second.register()
            Issue.record("no deferral")
        } catch {
            #expect(error.code == .deferred)
            #expect((error.retryAfter ?? .distantFuture) <= until)
        }
        clock.withLock { $0 = until.addingTimeInterval(1) }
        #expect(try await second.register().isEmpty == false)
    }

    @Test("each wait of the attestation budget is published as one deferred event, however many calls it refuses")
    func budgetDeferralPublishedOnce() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        let clock = Mutex(Date())
        let client = client(provider, transport, now: { clock.withLock { $0 } })
        let refusal = AppAttestProblem(AppAttestServiceError(.environmentNotAllowed, "scripted"))
        transport.state.withLock { $0.attestationRefusals = [refusal, refusal] }
        /// An app that asks again at once, four times: four deferrals with one time, which it returns.
        func deferrals() async -> Set<Date> {
            var times: Set<Date> = []
            for _ in 0..<4 {
                do {
                    _ = try await client.register()
                    Issue.record("no deferral")
                } catch {
                    #expect(error.code == .deferred)
                    if let until = error.retryAfter { times.insert(until) }
                }
            }
            return times
        }
        await #expect(throws: AppAttestClientError.self) { try await client.register() }
        let first = await deferrals()
        #expect(first.count == 1)
        // A minute later the new key is refused too: a new wait, of four minutes, is published once more.
        clock.withLock { $0 += 61 }
        await #expect(throws: AppAttestClientError.self) { try await client.register() }
        let second = await deferrals()
        #expect(second.count == 1 && second != first)
        clock.withLock { $0 += 241 }
        _ = try await client.register()
        var kinds: [AppAttestClientEvent.Kind] = []
        for await event in client.events {
            kinds.append(event.kind)
            if event.kind == .keyAttested { break }
        }
        #expect(kinds.filter { $0 == .deferred }.count == 2, "\(kinds.map(\.name))")
    }

    @Test(
        "a 4xx that is not an App Attest problem leaves the key and its attestation alone; attestKey failures give a new key"
    )
    func notARefusal() async throws {
        let provider = Self.provider()
        let storage = MemoryKeyStorage()
        let transport = ScriptedTransport()
        transport.state.withLock { $0.attestationStatus = [401] }
        let client = AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: Self.base), keyProvider: provider,
            keyStorage: storage, transport: transport)
        do {
            _ = try await client.register()
            Issue.record("no error")
        } catch {
            #expect(error.code == .registrationRefused && error.status == 401 && error.problemCode == nil)
        }
        let stored = try #require(await storage.load())
        #expect(stored.pendingAttestation != nil && stored.history == nil, "kept, and no wait")
        // Once the app's authentication is fixed, the same attestation goes through.
        _ = try await client.register()
        #expect(await provider.callCount("generateKey") == 1)
        #expect(await provider.callCount("attestKey") == 1)

        // attestKey failing with a code other than serverUnavailable: the key is discarded, a new one attested.
        let failing = Self.provider()
        await failing.fail(.attestKey, with: .unknownSystemFailure)
        _ = try await AppAttestClient(
            configuration: AppAttestClientConfiguration(baseURL: Self.base), keyProvider: failing,
            transport: ScriptedTransport()
        ).register()
        #expect(await failing.callCount("generateKey") == 2)
    }

    @Test("an attestation whose answer was lost is posted again after a relaunch, never attested twice")
    func pendingAttestation() async throws {
        let provider = Self.provider()
        let storage = MemoryKeyStorage()
        let transport = ScriptedTransport()
        transport.state.withLock { $0.lostAttestationAnswers = 1 }
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.maximumRegistrationAttempts = 1
        await #expect(throws: AppAttestClientError.self) {
            try await AppAttestClient(
                configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport
            ).register()
        }
        let pending = try #require(await storage.load()?.pendingAttestation)
        let relaunched = AppAttestClient(
            configuration: configuration, keyProvider: provider, keyStorage: storage, transport: transport)
        _ = try await relaunched.register()
        #expect(await provider.callCount("attestKey") == 1)
        let posted = transport.sent.filter { $0.url!.path == "/appattest/attestation" }
        struct Posted: Decodable, Equatable {
            var keyId: String
            var attestationObject: String
            var challenge: String
        }
        let bodies = try posted.map { try JSONDecoder().decode(Posted.self, from: try #require($0.httpBody)) }
        #expect(bodies.count == 2 && bodies[0] == bodies[1], "the same key, object and challenge")
        #expect(bodies.last?.attestationObject == pending.object.base64EncodedString())
        #expect(await storage.load()?.pendingAttestation == nil)
    }

    @Test("the simulated device keeps Apple's rules: one attestation per key, no assertion before it")
    func simulatorRules() async throws {
        let provider = Self.provider()
        let keyID = try await provider.generateKey()
        await #expect(throws: AppAttestKeyProviderError.self) {
            try await provider.generateAssertion(keyID, clientDataHash: Data(count: 32))
        }
        await provider.fail(.attestKey, with: .serverUnavailable)
        await #expect(throws: AppAttestKeyProviderError.self) {
            try await provider.attestKey(keyID, clientDataHash: Data(count: 32))
        }
        #expect(await provider.isAttested(keyID) == false)
        _ = try await provider.attestKey(keyID, clientDataHash: Data(count: 32))
        do {
            _ = try await provider.attestKey(keyID, clientDataHash: Data(count: 32))
            Issue.record("attested twice")
        } catch {
            #expect((error as? AppAttestKeyProviderError)?.code == .invalidKey)
        }
        _ = try await provider.generateAssertion(keyID, clientDataHash: Data(count: 32))
    }

    /// A timestamp-mode client whose first protected request is refused `staleTimestamp` by a server whose clock
    /// (its `Date`) is 784,111,777 s after the epoch; and the timestamps the transport has sent, in order.
    func staleTimestampClient() -> (AppAttestClient, stamps: () -> [Int64]) {
        let transport = ScriptedTransport()
        transport.state.withLock {
            $0.protected = [.problem(.staleTimestamp)]
            $0.date = "Sun, 06 Nov 1994 08:49:37 GMT"
        }
        return (
            client(Self.provider(), transport, freshness: .timestamp),
            { transport.sent.compactMap { $0.value(forHTTPHeaderField: "App-Attest-Timestamp").flatMap { Int64($0) } } }
        )
    }

    @Test("a stale timestamp is retried once on the server's clock (its Date header)")
    func clockSkew() async throws {
        let (client, stamps) = staleTimestampClient()
        let (_, response) = try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x")))
        #expect(response.statusCode == 200)
        #expect(stamps().count == 2)
        #expect(abs(stamps()[1] - 784_111_777_000) < 5_000, "the retry uses the server's clock: \(stamps())")
    }

    @Test("a POST refused for a stale timestamp is not sent again, but the next request is on the server's clock")
    func clockSkewOnAPost() async throws {
        let (client, stamps) = staleTimestampClient()
        var post = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        post.httpMethod = "POST"
        post.httpBody = Data("order".utf8)
        await #expect(throws: AppAttestClientError.self) { _ = try await client.data(for: post) }
        // The next one, another POST, is signed on the server's clock: not refused again and again.
        let (_, response) = try await client.data(for: post)
        #expect(response.statusCode == 200)
        #expect(stamps().count == 2, "the refused POST was not sent again")
        #expect(abs(stamps()[1] - 784_111_777_000) < 5_000, "the next request uses the server's clock: \(stamps())")
    }

    @Test("the server's clock, learnt from a refused timestamp, is kept across a relaunch: the first POST is on it")
    func clockSkewAcrossLaunches() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock {
            $0.protected = [.problem(.staleTimestamp)]
            $0.date = "Sun, 06 Nov 1994 08:49:37 GMT"
        }
        let provider = Self.provider()
        let storage = MemoryKeyStorage()
        var post = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        post.httpMethod = "POST"
        post.httpBody = Data("order".utf8)
        let first = client(provider, transport, freshness: .timestamp, storage: storage)
        await #expect(throws: AppAttestClientError.self) { _ = try await first.data(for: post) }
        // Relaunched: the first POST is signed on the server's clock, not refused again.
        let relaunched = client(provider, transport, freshness: .timestamp, storage: storage)
        let (_, response) = try await relaunched.data(for: post)
        #expect(response.statusCode == 200)
        let stamps = transport.sent.compactMap {
            $0.value(forHTTPHeaderField: "App-Attest-Timestamp").flatMap { Int64($0) }
        }
        #expect(stamps.count == 2 && abs(stamps[1] - 784_111_777_000) < 5_000, "\(stamps)")
    }

    @Test("a next challenge kept longer than its lifetime is not used: the server may have purged it")
    func agedNextChallenge() async throws {
        // Fetches of assertion challenges after two requests, by a client that keeps next challenges for `lifetime`.
        func fetches(lifetime: TimeInterval) async throws -> Int {
            let transport = ScriptedTransport()
            transport.state.withLock { $0.nextChallenges = true }
            var configuration = AppAttestClientConfiguration(baseURL: Self.base, freshness: .nextChallengeInResponse)
            configuration.nextChallengeLifetime = lifetime
            let client = AppAttestClient(
                configuration: configuration, keyProvider: Self.provider(), keyStorage: MemoryKeyStorage(),
                transport: transport)
            let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
            _ = try await client.data(for: request)
            _ = try await client.data(for: request)
            return transport.sent.filter {
                $0.url!.path == "/appattest/challenge"
                    && String(decoding: $0.httpBody ?? Data(), as: UTF8.self).contains("\"assertion\"")
            }.count
        }
        // Within its lifetime (however slow the machine): the answer's next challenge is used.
        #expect(try await fetches(lifetime: 3_600) == 1)
        // Past it (a lifetime of 0 is past at once): a fresh one is fetched instead.
        #expect(try await fetches(lifetime: 0) == 2)
    }

    @Test("requests that cannot be signed are refused before anything is sent")
    func unsupportedRequests() async throws {
        let transport = ScriptedTransport()
        let client = client(Self.provider(), transport)
        var streamed = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        streamed.httpBodyStream = InputStream(data: Data([1, 2, 3]))
        var badMethod = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        badMethod.httpMethod = "GE T"
        var long = URLRequest(url: URL(string: "https://api.example.com/" + String(repeating: "a", count: 9000))!)
        long.httpMethod = "GET"
        for request in [streamed, badMethod, long] {
            do {
                _ = try await client.data(for: request)
                Issue.record("no error")
            } catch {
                #expect(error.code == .unsupportedRequest)
            }
        }
        #expect(transport.sent.isEmpty)
    }

    @Test("file storage survives a relaunch and is replaced atomically; a corrupt file is an error, not a new key")
    func fileStorage() async throws {
        let url = try E2E.directory().appendingPathComponent("key.json")
        let storage = FileKeyStorage(url: url)
        #expect(try storage.load() == nil)
        try storage.save(AppAttestStoredKey(keyID: "abc", registered: false))
        try storage.save(AppAttestStoredKey(keyID: "abc", registered: true))
        #expect(try FileKeyStorage(url: url).load() == AppAttestStoredKey(keyID: "abc", registered: true))
        // A key stored by an earlier version (keyId and registered only) reads as it was.
        try Data(#"{"keyID":"old","registered":true}"#.utf8).write(to: url)
        #expect(try storage.load() == AppAttestStoredKey(keyID: "old", registered: true))
        let full = AppAttestStoredKey(
            keyID: "abc", registered: false,
            pendingAttestation: .init(
                object: Data(repeating: 7, count: 6000), challenge: Data(repeating: 1, count: 32)),
            history: .init(discards: [Date(timeIntervalSince1970: 1_800_000_000)], refusedAttestations: 2))
        try storage.save(full)
        #expect(try storage.load() == full)
        try Data("not json".utf8).write(to: url)
        #expect(throws: (any Error).self) { try storage.load() }
        try Data(repeating: 0x20, count: 70_000).write(to: url)
        #expect(throws: (any Error).self) { try storage.load() }
        try storage.remove()
        #expect(try storage.load() == nil)
    }
}
#endif
