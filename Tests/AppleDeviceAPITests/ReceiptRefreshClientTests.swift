#if AppleServerAPI && Hummingbird
import AppAttest
import AppAttestTesting
import AppleDeviceAPI
import AppleDeviceAPITesting
import Crypto
import Foundation
import Testing

/// The receipt refresh client against the stand-in (“Receipts and the risk metric”).
@Suite("Receipt refresh client")
struct ReceiptRefreshClientTests {
    static let key = P256.Signing.PrivateKey()
    static let credentials = try! ProviderCredentials(teamID: "TEAM123456", keyID: "KEY1234567", privateKey: key)
    static let receipts = try! TestReceiptAuthority()
    static let authority = try! TestCertificateAuthority()
    static let appID = try! AppID("TEAM123456.com.example.app")

    /// A verified attestation whose receipt the test receipt authority signed just now.
    func attestation(_ environment: AppAttestEnvironment = .production) throws -> VerifiedAttestation {
        let device = try SimulatedDevice(
            authority: Self.authority, appID: Self.appID, environment: environment, receiptAuthority: Self.receipts)
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Date()
        let verifier = try AppAttestVerifier(
            configuration: .init(
                apps: [Self.appID: [.production, .development]], trustAnchor: Self.authority.trustAnchor))
        return try verifier.verifyAttestation(
            try device.attest(challenge: [1], options), keyID: device.keyID, challenge: [1])
    }

    func withStandIn(
        environment: AppAttestEnvironment = .production, wantsBearer: Bool = false,
        style: ReceiptRefreshClient.AuthorizationStyle = .bareToken, signer: TestReceiptAuthority = receipts,
        _ body: (AppleServerStandIn, ReceiptRefreshClient) async throws -> Void
    ) async throws {
        let server = AppleServerStandIn(
            keys: [.init(teamID: "TEAM123456", keyID: "KEY1234567", publicKey: Self.key.publicKey)],
            receiptAuthority: signer,
            receiptEnvironment: environment, receiptEndpointWantsBearer: wantsBearer)
        let url = try await server.start()
        let client = ReceiptRefreshClient(
            tokens: ProviderTokenSource(credentials: Self.credentials), environment: .production,
            endpoint: try AppleEndpoint(baseURL: url),
            validator: try AppAttestReceiptValidator(configuration: .init(trustAnchor: Self.receipts.trustAnchor)),
            authorizationStyle: style, retry: .init(maximumAttempts: 2, initialBackoff: 0.01))
        do { try await body(server, client) } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test("200 gives a validated RECEIPT with the risk metric; 304 before its not-before; 404 when data expired")
    func refreshCycle() async throws {
        let attested = try attestation()
        try await withStandIn { server, client in
            await server.setRiskMetric(4, forKeyPoint: attested.key.publicKey.x963Representation)
            guard
                case .refreshed(let receipt) = try await client.refresh(
                    attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
            else {
                Issue.record("not refreshed")
                return
            }
            #expect(receipt.type == .receipt)
            #expect(receipt.riskMetric == 4)
            #expect(receipt.appID == Self.appID.rawValue)
            #expect(receipt.notBefore! > Date())
            // Refreshing the new receipt before its not-before: 304, keep it.
            let early = try await client.refresh(
                receipt.rawRepresentation, appID: Self.appID, publicKey: attested.key.publicKey)
            #expect(early == .notModified)
            await server.expireData(forKeyPoint: attested.key.publicKey.x963Representation)
            let expired = try await client.refresh(
                attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
            #expect(expired == .noData)
        }
    }

    @Test("error statuses: environment, payload, credentials, rate limits and Apple's failures")
    func errors() async throws {
        let attested = try attestation()
        try await withStandIn(environment: .development) { _, client in
            await expectError(.incorrectEnvironment) {
                _ = try await client.refresh(attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
            }
            await expectError(.badPayload) {
                _ = try await client.refresh(
                    [0x30, 0x03, 0x02, 0x01, 0x01], appID: Self.appID, publicKey: attested.key.publicKey)
            }
        }
        try await withStandIn { server, client in
            for (status, body, code) in [
                (401, "Unauthorized", AppleAPIError.Code.invalidAuthorizationToken),
                (429, "Too Many Requests", .tooManyRequests),
                (500, "Server Error", .serverError), (503, "Service Unavailable", .serviceUnavailable),
            ] {
                // The client tries twice where a retry can help (429, 5xx), once otherwise.
                for _ in 0..<(status == 401 ? 1 : 2) { await server.enqueue(status: status, body: body) }
                await expectError(code) {
                    _ = try await client.refresh(attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
                }
            }
            // A refreshed receipt with another key than ours is not accepted.
            let other = try attestation()
            await expectError(.invalidReceipt) {
                _ = try await client.refresh(attested.receipt, appID: Self.appID, publicKey: other.key.publicKey)
            }
        }
        // The server signs with an authority the validator does not trust: the new receipt is refused.
        try await withStandIn(signer: try TestReceiptAuthority()) { _, client in
            await expectError(.invalidReceipt) {
                _ = try await client.refresh(attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
            }
        }
    }

    @Test("the Authorization header form is a setting: bare token by default, Bearer on request")
    func authorizationStyle() async throws {
        let attested = try attestation()
        try await withStandIn(wantsBearer: true) { _, client in
            await expectError(.invalidAuthorizationToken) {
                _ = try await client.refresh(attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
            }
        }
        try await withStandIn(wantsBearer: true, style: .bearer) { _, client in
            guard
                case .refreshed = try await client.refresh(
                    attested.receipt, appID: Self.appID, publicKey: attested.key.publicKey)
            else {
                Issue.record("not refreshed")
                return
            }
        }
        #expect(ReceiptRefreshClient.endpoint(for: .production).baseURL == "https://data.appattest.apple.com")
        #expect(
            ReceiptRefreshClient.endpoint(for: .development).baseURL
                == "https://data-development.appattest.apple.com")
    }
}
#endif  // AppleServerAPI && Hummingbird
