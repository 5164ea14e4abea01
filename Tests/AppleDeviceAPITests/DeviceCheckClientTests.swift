#if AppleServerAPI && Hummingbird
import AppAttest
import AppAttestTesting
import AppleDeviceAPI
import AppleDeviceAPITesting
import AsyncHTTPClient
import Crypto
import Foundation
import Testing

/// The DeviceCheck client against the stand-in over real HTTP on 127.0.0.1 (“DeviceCheck's two bits”).
@Suite("DeviceCheck client")
struct DeviceCheckClientTests {
    static let key = P256.Signing.PrivateKey()
    static let credentials = try! ProviderCredentials(teamID: "TEAM123456", keyID: "KEY1234567", privateKey: key)
    static let token = Data((0..<64).map { UInt8($0) }).base64EncodedString()

    /// Runs `body` with a started stand-in and a client pointed at it.
    func withStandIn(
        credentials: ProviderCredentials = credentials, clientClock: (@Sendable () -> Date)? = nil,
        retry: RetryPolicy = .init(maximumAttempts: 3, initialBackoff: 0.01, maximumBackoff: 0.05),
        _ body: (AppleServerStandIn, DeviceCheckClient, String) async throws -> Void
    ) async throws {
        let server = AppleServerStandIn(
            keys: [.init(teamID: "TEAM123456", keyID: "KEY1234567", publicKey: Self.key.publicKey)],
            receiptAuthority: try TestReceiptAuthority())
        let url = try await server.start()
        let tokens = ProviderTokenSource(credentials: credentials, now: clientClock ?? { Date() })
        let client = DeviceCheckClient(
            tokens: tokens, environment: .development, endpoint: try AppleEndpoint(baseURL: url), retry: retry,
            now: clientClock ?? { Date() })
        do {
            try await body(server, client, url)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test("a redirect is not followed: the device token goes to no other host")
    func noRedirect() async throws {
        let elsewhere = AppleServerStandIn(
            keys: [.init(teamID: "TEAM123456", keyID: "KEY1234567", publicKey: Self.key.publicKey)],
            receiptAuthority: try TestReceiptAuthority())
        let other = try await elsewhere.start()
        try await withStandIn(retry: .none) { server, client, _ in
            await server.enqueue(status: 307, body: "", headers: ["Location": "\(other)/v1/query_two_bits"])
            await #expect(throws: AppleAPIError.self) { try await client.queryTwoBits(deviceToken: Self.token) }
        }
        #expect(await elsewhere.requestCount == 0, "the request was sent again where the redirect pointed")
        await elsewhere.stop()
    }

    @Test("bits: not set, then set with the month; validation")
    func bits() async throws {
        try await withStandIn { server, client, _ in
            let initial = try await client.queryTwoBits(deviceToken: Self.token)
            #expect(initial == .notSet)
            try await client.updateTwoBits(deviceToken: Self.token, bit0: true, bit1: false)
            guard case .set(let bit0, let bit1, let month) = try await client.queryTwoBits(deviceToken: Self.token)
            else {
                Issue.record("bits not set")
                return
            }
            #expect(bit0 && !bit1)
            #expect(month != nil)
            #expect(await server.bits(for: Self.token)! == (true, false))
            try await client.updateTwoBits(deviceToken: Self.token, bit0: false, bit1: true)
            #expect(await server.bits(for: Self.token)! == (false, true))
            try await client.validateDeviceToken(Self.token)
        }
    }

    @Test("device token faults: refused locally when not Base64, and when Apple refuses it")
    func deviceTokens() async throws {
        try await withStandIn { server, client, _ in
            await expectError(.badDeviceToken, .deviceToken) {
                _ = try await client.queryTwoBits(deviceToken: "not base64!")
            }
            await expectError(.badDeviceToken, .deviceToken) { _ = try await client.queryTwoBits(deviceToken: "") }
            #expect(await server.requestCount == 0)
            await server.rejectDeviceToken(Self.token)
            await expectError(.badDeviceToken, .deviceToken) { try await client.validateDeviceToken(Self.token) }
        }
    }

    @Test("credential faults: an unknown key, an expired token, a skewed clock")
    func credentials() async throws {
        let other = try ProviderCredentials(
            teamID: "TEAM123456", keyID: "OTHERKEY12", privateKey: P256.Signing.PrivateKey())
        try await withStandIn(credentials: other) { _, client, _ in
            await expectError(.invalidAuthorizationToken, .credentials) {
                try await client.validateDeviceToken(Self.token)
            }
        }
        // Our clock two hours behind: the token is "expired" and the timestamp out of range; the token is checked
        // first.
        try await withStandIn(clientClock: { Date().addingTimeInterval(-7200) }) { _, client, _ in
            await expectError(.authorizationTokenExpired, .credentials) {
                try await client.validateDeviceToken(Self.token)
            }
        }
    }

    @Test(
        "every status of Apple's table is classified by whose fault it is",
        arguments: [
            (400, "Missing or incorrectly formatted device token payload", "badDeviceToken", "deviceToken"),
            (400, "Missing or incorrectly formatted bits", "badBits", "request"),
            (400, "Missing or incorrectly formatted time stamp", "badTimestamp", "clock"),
            (400, "Missing or badly formatted authorization token", "badAuthorizationToken", "credentials"),
            (400, "Missing or incorrectly formatted payload", "badPayload", "request"),
            (401, "Unable to verify authorization token", "invalidAuthorizationToken", "credentials"),
            (401, "Authorization Token Expired", "authorizationTokenExpired", "credentials"),
            (403, "Forbidden", "forbidden", "credentials"),
            (405, "Method Not Allowed", "methodNotAllowed", "request"),
            (418, "I'm a teapot", "unexpectedResponse", "apple"),
        ])
    func statuses(_ status: Int, _ body: String, _ code: String, _ fault: String) async throws {
        try await withStandIn { server, client, _ in
            await server.enqueue(status: status, body: body)
            do {
                try await client.validateDeviceToken(Self.token)
                Issue.record("expected \(code)")
            } catch let error as AppleAPIError {
                #expect(error.code.name == code && error.fault.rawValue == fault, "\(error)")
                #expect(error.status == status && error.host == "127.0.0.1")
                #expect(!error.isRetryable)
            }
            #expect(await server.requestCount == 1, "no retry for \(status)")
        }
    }

    @Test("429, 500 and 503 are retried with backoff; the last answer is reported when retries run out")
    func retries() async throws {
        try await withStandIn { server, client, _ in
            await server.enqueue(status: 429, body: "Too Many Requests")
            await server.enqueue(status: 503, body: "Service Unavailable")
            try await client.validateDeviceToken(Self.token)
            #expect(await server.requestCount == 3)
            for _ in 0..<3 { await server.enqueue(status: 500, body: "Server Error") }
            await expectError(.serverError, .apple) { try await client.validateDeviceToken(Self.token) }
            #expect(await server.requestCount == 6)
            for status in [503, 503, 429] { await server.enqueue(status: status, body: "x") }
            await expectError(.tooManyRequests, .apple) { try await client.validateDeviceToken(Self.token) }
            for _ in 0..<3 { await server.enqueue(status: 503, body: "Service Unavailable") }
            await expectError(.serviceUnavailable, .apple) { try await client.validateDeviceToken(Self.token) }
        }
    }

    @Test("a 200 that is neither bits nor the not-found text is an unexpected response, not 'no bits'")
    func strangeSuccess() async throws {
        try await withStandIn { server, client, _ in
            await server.enqueue(status: 200, body: "<html>captive portal</html>")
            await expectError(.unexpectedResponse, .apple) {
                _ = try await client.queryTwoBits(deviceToken: Self.token)
            }
            await server.enqueue(status: 200, body: "Bit State Not Found")
            let state = try await client.queryTwoBits(deviceToken: Self.token)
            #expect(state == .notSet)
        }
    }

    @Test("no server: a transport error, retried, with the host named")
    func transport() async throws {
        let tokens = ProviderTokenSource(credentials: Self.credentials)
        let client = DeviceCheckClient(
            tokens: tokens, environment: .production, endpoint: try AppleEndpoint(baseURL: "http://127.0.0.1:9"),
            timeout: 2, retry: .init(maximumAttempts: 2, initialBackoff: 0.01))
        await expectError(.transport, .network) { try await client.validateDeviceToken(Self.token) }
        #expect(DeviceCheckClient.endpoint(for: .production).baseURL == "https://api.devicecheck.apple.com")
        #expect(
            DeviceCheckClient.endpoint(for: .development).baseURL
                == "https://api.development.devicecheck.apple.com")
    }

    @Test("the stand-in answers GET with 405, and refuses numbers as bits")
    func standInStrictness() async throws {
        try await withStandIn { _, _, url in
            var request = HTTPClientRequest(url: url + "/v1/query_two_bits")
            request.method = .GET
            // Generous: the status is what this checks, and the whole suite shares two cores (5 s ran out once in CI).
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            #expect(response.status.code == 405)
        }
    }
}
#endif  // AppleServerAPI && Hummingbird
