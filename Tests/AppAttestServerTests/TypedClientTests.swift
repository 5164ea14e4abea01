#if Service && ServiceClient
import AppAttest
import AppAttestWire
import AppAttestServer
import AppAttestServiceClient
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Crypto
import Foundation
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime
import ServiceLifecycle
import Testing

/// Every operation of openapi.yaml through the client generated from it, against a running service: a response that
/// does not match the document fails to decode here, so the document and the server cannot drift apart.
@Suite("The typed client (AppAttestServiceClient) against a running service")
struct TypedClientTests {
    typealias F = Fixture

    @Test("every operation, its answers decoded by the generated types", arguments: Database.available)
    func everyOperation(_ database: Database) async throws {
        let directory = try F.directory()
        var configuration = try F.configuration(directory: directory, database: database)
        configuration.port = TestPorts.free()
        configuration.counterReorderWindow = 8
        let server = try await AppAttestServer.open(configuration: configuration)
        let group = ServiceGroup(
            configuration: .init(services: server.makeServices().map { .init(service: $0) }, logger: server.logger))
        let running = Task { try await group.run() }
        let url = try #require(URL(string: "http://127.0.0.1:\(configuration.port)"))
        let client = Client(serverURL: url, token: F.tokenA)
        let anonymous = Client(serverURL: url, transport: AsyncHTTPClientTransport())
        do {
            // Wait until it answers.
            let start = ContinuousClock.now
            while ContinuousClock.now - start < .seconds(60) {
                if (try? await anonymous.ping()) != nil { break }
                try await Task.sleep(for: .milliseconds(25))
            }
            #expect(try await anonymous.ping().ok.body.plainText.collectString() == "pong")
            #expect(try await anonymous.getLiveness().ok.body.json.status == "ok")
            #expect(try await anonymous.getReadiness().ok.body.json.status == "ok")
            #expect(try await anonymous.getHealth().ok.body.json.status == "ok")
            #expect(try await anonymous.getOpenAPIDocument().ok.body.yaml.collectString().hasPrefix("openapi: 3.1"))

            // Without a token: a problem with its code.
            switch try await anonymous.issueChallenge(body: .json(.init(purpose: .attestation))) {
            case .default(let status, let problem):
                #expect(status == 401)
                #expect(try problem.body.applicationProblemJson.code == "unauthorized")
            default: Issue.record("a challenge without a token")
            }

            // Register a simulated device's key.
            let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
            let keyID = device.keyID.base64EncodedString
            let issued = try await client.issueChallenge(body: .json(.init(purpose: .attestation))).ok.body.json
            #expect(issued.expiresAt > Date())
            let challenge = try #require(RequestBindingLayout.decodeBase64URL(issued.challenge))
            let key = try await client.registerAttestation(
                body: .json(
                    .init(
                        keyId: keyID,
                        attestationObject: Data(try device.attest(challenge: challenge)).base64EncodedString(),
                        challenge: issued.challenge))
            ).ok.body.json
            #expect(key.keyId == keyID)
            #expect(key.environment == .production)
            #expect(key.counter == 0)

            // A bound request with a challenge reserved for the key, asking for the next one.
            let assertionChallenge = try await client.issueChallenge(
                body: .json(.init(purpose: .assertion, keyId: keyID))
            ).ok.body.json.challenge
            let body = Array("{\"order\":1}".utf8)
            let bodyHash = Array(SHA256.hash(data: body))
            let clientData = try AppAttestClientData.request(
                method: "POST", pathAndQuery: "/api/orders?x=1", bodySHA256: bodyHash,
                challenge: try #require(RequestBindingLayout.decodeBase64URL(assertionChallenge))
            ).bytes
            let request = Components.Schemas.AssertionRequest(
                keyId: keyID, assertion: Data(try device.assert(clientData: clientData)).base64EncodedString(),
                issueNextChallenge: true,
                request: .init(
                    method: "POST", pathAndQuery: "/api/orders?x=1", bodySha256: Data(bodyHash).base64EncodedString(),
                    challenge: assertionChallenge))
            guard case .Key(let verified) = try await client.verifyAssertion(body: .json(request)).ok.body.json else {
                Issue.record("a verified assertion answered a report")
                return
            }
            #expect(verified.counter == 1)
            let next = try #require(verified.nextChallenge)
            #expect(try #require(verified.nextChallengeExpiresAt) > Date())

            // Its replay: 409 with the store's reason.
            switch try await client.verifyAssertion(body: .json(request)) {
            case .default(let status, let problem):
                #expect(status == 409)
                #expect(["challengeUnknown", "counterReplayed"].contains(try problem.body.applicationProblemJson.code))
            default: Issue.record("a replay was accepted")
            }

            // The next challenge, with opaque client data that begins with it.
            let nextBytes = try #require(RequestBindingLayout.decodeBase64URL(next))
            let opaque = nextBytes + Array("payload".utf8)
            let second = try await client.verifyAssertion(
                body: .json(
                    .init(
                        keyId: keyID, assertion: Data(try device.assert(clientData: opaque)).base64EncodedString(),
                        clientData: Data(opaque).base64EncodedString(), challenge: next))
            ).ok.body.json
            guard case .Key(let secondKey) = second else {
                Issue.record("a verified assertion answered a report")
                return
            }
            #expect(secondKey.counter == 2)

            // Read, refresh (not configured: a problem), revoke, then read again.
            let keyPath = RequestBindingLayout.base64URL(device.keyID.rawValue)
            #expect(try await client.getKey(path: .init(keyId: keyPath)).ok.body.json.counter == 2)
            switch try await client.refreshReceipt(path: .init(keyId: keyPath)) {
            case .default(let status, let problem):
                #expect(status == 503)
                #expect(try problem.body.applicationProblemJson.code == "receiptRefreshNotConfigured")
            default: Issue.record("a refresh without Apple's configuration")
            }
            let revoked = try await client.revokeKey(
                path: .init(keyId: keyPath), body: .json(.init(reason: "typed client"))
            ).ok.body.json
            #expect(revoked.revoked == true)
            let events = try await client.getKeyEvents(path: .init(keyId: keyPath), query: .init(limit: 10)).ok.body
                .json.events
            #expect(events.map(\.kind) == ["attested", "revoked"] && events.last?.detail == "typed client")
            #expect(try await client.getKey(path: .init(keyId: keyPath)).ok.body.json.revokedAt != nil)
            // The metrics count what happened.
            #expect(try await anonymous.getMetrics().ok.body.plainText.collectString().contains("appattest_"))
            switch try await client.getKey(path: .init(keyId: "AAAA")) {
            case .default(let status, _): #expect(status == 404 || status == 400)
            default: Issue.record("an unknown key was found")
            }
        } catch {
            await group.triggerGracefulShutdown()
            try? await running.value
            await server.close()
            throw error
        }
        await group.triggerGracefulShutdown()
        try await running.value
        await server.close()
    }
}

extension HTTPBody {
    /// The body as text (at most 1 MiB).
    func collectString() async throws -> String { try await String(collecting: self, upTo: 1 << 20) }
}
#endif
