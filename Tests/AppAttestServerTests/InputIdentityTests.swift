#if Service
import AppAttest
import AppAttestWire
import AppAttestServer
import AppAttestTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// What serve accepts as a user identifier and as opaque client data, and the command's own output posted to it.
@Suite("appattest serve: user identifiers, opaque client data, simulated requests")
struct InputIdentityTests {
    typealias F = Fixture

    func post(_ client: some TestClientProtocol, _ path: String, _ body: String) async throws -> TestResponse {
        try await client.execute(uri: path, method: .post, headers: F.headers(), body: ByteBuffer(string: body))
    }

    @Test(
        "a user identifier with NUL or another control character is refused 400 on every database",
        arguments: Database.available)
    func controlCharactersInUserID(database: Database) async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        try await F.withServer(database: database) { _, client in
            // JSON's \u0000 decodes to NUL: SQLite would keep "alice" of it.
            for hostile in [#"alice\u0000evil"#, #"alice\u001b[2J"#, #"bob\u0085"#, ""] {
                let issued = try await post(
                    client, "/v1/challenges", #"{"purpose":"attestation","userId":"\#(hostile)"}"#)
                #expect(issued.status == .badRequest, "\(hostile): \(String(buffer: issued.body))")
                #expect(F.json(issued)["code"] as? String == "invalidUserID")
            }
            // The attestation route refuses it too, before the challenge is consumed: a clean retry works.
            let issued = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
            let challenge = try #require(F.json(issued)["challenge"] as? String)
            let object = try device.attest(challenge: try #require(RequestBindingLayout.decodeBase64URL(challenge)))
            func body(_ user: String) -> String {
                """
                {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
                "challenge":"\(challenge)","userId":"\(user)"}
                """
            }
            let refused = try await post(client, "/v1/attestations", body(#"alice\u0000evil"#))
            #expect(refused.status == .badRequest)
            #expect(F.json(refused)["code"] as? String == "invalidUserID")
            let registered = try await post(client, "/v1/attestations", body("alice"))
            #expect(registered.status == .ok, "\(String(buffer: registered.body))")
        }
    }

    @Test(
        "an assertion made for a bound request cannot be redeemed as opaque client data", arguments: Database.available)
    func canonicalBindingAsOpaqueData(database: Database) async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        try await F.withServer(database: database) { _, client in
            try await ServerTests().register(client, device)
            let issued = try await post(
                client, "/v1/challenges", #"{"purpose":"assertion","keyId":"\#(device.keyID.base64EncodedString)"}"#)
            let challengeText = try #require(F.json(issued)["challenge"] as? String)
            let challenge = try #require(RequestBindingLayout.decodeBase64URL(challengeText))
            let requestBody = Array(#"{"amount":5}"#.utf8)
            let hash = AppAttestSHA256.hash(requestBody)
            // Both canonical layouts, signed by the device, then sent as opaque client data.
            let layouts = [
                try AppAttestClientData.request(
                    method: "POST", pathAndQuery: "/orders", bodySHA256: hash, challenge: challenge
                ).bytes,
                try AppAttestClientData.request(
                    method: "POST", pathAndQuery: "/orders", bodySHA256: hash, timestampMilliseconds: 1_000
                ).bytes,
            ]
            for clientData in layouts {
                let opaque = """
                    {"keyId":"\(device.keyID.base64EncodedString)",\
                    "assertion":"\(Data(try device.assert(clientData: clientData)).base64EncodedString())",\
                    "clientData":"\(Data(clientData).base64EncodedString())"}
                    """
                let response = try await post(client, "/v1/assertions/verify", opaque)
                #expect(response.status == .badRequest, "\(String(buffer: response.body))")
                #expect(F.json(response)["code"] as? String == "malformedBinding")
            }
            // The challenge was not used: the bound request itself still goes through with it.
            let clientData = layouts[0]
            let bound = """
                {"keyId":"\(device.keyID.base64EncodedString)",\
                "assertion":"\(Data(try device.assert(clientData: clientData)).base64EncodedString())",\
                "request":{"method":"POST","pathAndQuery":"/orders","bodySha256":"\(Data(hash).base64EncodedString())",\
                "challenge":"\(challengeText)"}}
                """
            let response = try await post(client, "/v1/assertions/verify", bound)
            #expect(response.status == .ok, "\(String(buffer: response.body))")
        }
    }

    @Test(
        "a caller scoped to another App ID cannot reserve challenges for a key, nor for an unknown one; one caller holds at most its share",
        arguments: Database.available)
    func challengeReservationsAndScope(database: Database) async throws {
        let device = try SimulatedDevice(authority: F.authority, appID: F.appID)
        let otherApp = "token-of-another-app-service-01"
        let keyBody = #"{"purpose":"assertion","keyId":"\#(device.keyID.base64EncodedString)"}"#
        // A caller of this test's own (what a caller holds is counted by its name, across servers on one database).
        let mine = "token-of-this-test-only-000001"
        let mineName = "reservations-\(UUID().uuidString)"
        try await F.withServer(
            database: database,
            { configuration in
                configuration.apps.append(.init(appId: "OTHER12345.com.example.other", environments: ["production"]))
                configuration.tokens.append(
                    .init(name: "other", token: otherApp, appIds: ["OTHER12345.com.example.other"]))
                configuration.tokens.append(.init(name: mineName, token: mine))
                configuration.challengesPerCaller = 20
            }
        ) { _, client in
            func asMine(_ body: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/v1/challenges", method: .post, headers: F.headers(mine), body: ByteBuffer(string: body))
            }
            // Before the key is registered: nobody can reserve challenges for it.
            var response = try await asMine(keyBody)
            #expect(response.status == .unauthorized, "\(String(buffer: response.body))")
            #expect(F.json(response)["code"] as? String == "unknownKey")
            try await ServerTests().register(client, device)
            // The other App ID's caller: the key does not exist for it.
            for _ in 0..<20 {
                response = try await client.execute(
                    uri: "/v1/challenges", method: .post, headers: F.headers(otherApp),
                    body: ByteBuffer(string: keyBody))
                #expect(response.status == .notFound)
            }
            // The key's own caller is served as many times as it asks, a new challenge replacing the oldest.
            for _ in 0..<17 {
                response = try await asMine(keyBody)
                #expect(response.status == .ok, "\(String(buffer: response.body))")
            }
            // A caller holds at most its share: 20 here, of which 16 are the key's and 4 more may be issued.
            for _ in 0..<4 {
                response = try await asMine(#"{"purpose":"attestation"}"#)
                #expect(response.status == .ok)
            }
            response = try await asMine(#"{"purpose":"attestation"}"#)
            #expect(response.status == .tooManyRequests)
            #expect(F.json(response)["code"] as? String == "tooManyChallenges")
            // Another caller is still served.
            response = try await client.execute(
                uri: "/v1/challenges", method: .post, headers: F.headers(otherApp),
                body: ByteBuffer(string: #"{"purpose":"attestation"}"#))
            #expect(response.status == .ok)
        }
    }

    /// The `appattest-dev` executable (the simulated device), built beside the test bundle.
    static let appattest: URL = {
        let beside = Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("appattest-dev")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(
            ".build/debug/appattest-dev")
    }()

    func run(_ arguments: [String]) async throws -> String {
        let process = Process()
        process.executableURL = Self.appattest
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = await ProcessWait.output(of: process, from: pipe)
        #expect(process.terminationStatus == 0, "appattest-dev \(arguments.first ?? "")")
        return String(decoding: data, as: UTF8.self)
    }

    @Test("the bodies `appattest-dev simulate attest` and `simulate assert --challenge` print are accepted by serve")
    func simulatedBodies() async throws {
        let directory = try F.directory()
        _ = try await run(["simulate", "authority", "--out", directory])
        try await F.withServer({ $0.testingRootCertificate = "\(directory)/root.pem" }) { _, client in
            let issued = try await post(client, "/v1/challenges", #"{"purpose":"attestation"}"#)
            let challenge = try #require(F.json(issued)["challenge"] as? String)
            let attestation = try await run([
                "simulate", "attest", "--dir", directory, "--app-id", F.appID.rawValue, "--challenge=\(challenge)",
            ])
            let registered = try await post(client, "/v1/attestations", attestation)
            #expect(registered.status == .ok, "\(String(buffer: registered.body))")
            let keyID = try #require(F.json(registered)["keyId"] as? String)

            let next = try await post(client, "/v1/challenges", #"{"purpose":"assertion","keyId":"\#(keyID)"}"#)
            let assertionChallenge = try #require(F.json(next)["challenge"] as? String)
            let assertion = try await run([
                "simulate", "assert", "--dir", directory, "--client-data", "order 17",
                "--challenge=\(assertionChallenge)",
            ])
            let verified = try await post(client, "/v1/assertions/verify", assertion)
            #expect(verified.status == .ok, "\(String(buffer: verified.body))")
            #expect(F.json(verified)["counter"] as? Int == 1)
        }
    }
}
#endif  // Service
