import App
import AppAttest
import AppAttestHTTP
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing
import VaporTesting

@Suite("The example app with a simulated device")
struct AppTests {
    let authority = try! TestCertificateAuthority()
    let appID = try! AppID("ABCDE12345.com.example.app")

    struct Challenge: Decodable { var challenge: String }

    func challenge(_ app: Application, _ json: String) async throws -> [UInt8] {
        let response = try await app.testing().sendRequest(
            .POST, "/appattest/challenge", headers: ["Content-Type": "application/json"], body: ByteBuffer(string: json)
        )
        let text = try JSONDecoder().decode(Challenge.self, from: Data(buffer: response.body)).challenge
        return Array(try #require(Data(base64Encoded: base64(fromBase64URL: text))))
    }

    @Test("register through the routes, call the protected route once; a replay and an unsigned request are refused")
    func registerAndCall() async throws {
        // The verifier trusts the test authority: only tests do this.
        let verifier = try AppAttestVerifier(
            configuration: .init(appID: appID, environment: .production, trustAnchor: authority.trustAnchor))
        let service = AppAttestService(verifier: verifier, store: MemoryAppAttestStore())
        let device = try SimulatedDevice(authority: authority, appID: appID)

        try await withApp { app in
            try OrdersApp.configure(app, service: service)

            // Registration.
            let attestChallenge = try await challenge(app, #"{"purpose":"attestation"}"#)
            let object = try device.attest(challenge: attestChallenge)
            let registration = """
                {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
                "challenge":"\(base64URL(attestChallenge))"}
                """
            let registered = try await app.testing().sendRequest(
                .POST, "/appattest/attestation", headers: ["Content-Type": "application/json"],
                body: ByteBuffer(string: registration))
            #expect(registered.status == .ok)

            // A protected request, signed as the app signs it.
            let body = #"{"item":"coffee"}"#
            let assertChallenge = try await challenge(
                app, #"{"purpose":"assertion","keyId":"\#(device.keyID.base64EncodedString)"}"#)
            let clientData = try AppAttestClientData.request(
                method: "POST", pathAndQuery: "/api/orders", body: Array(body.utf8), challenge: assertChallenge
            ).bytes
            let headers: HTTPHeaders = [
                AppAttestHTTPHeaders.keyID.rawName: device.keyID.base64EncodedString,
                AppAttestHTTPHeaders.assertion.rawName: Data(try device.assert(clientData: clientData))
                    .base64EncodedString(),
                AppAttestHTTPHeaders.challenge.rawName: base64URL(assertChallenge),
            ]
            let accepted = try await app.testing().sendRequest(
                .POST, "/api/orders", headers: headers, body: ByteBuffer(string: body))
            #expect(accepted.status == .ok)
            #expect(accepted.body.string.hasSuffix("(counter 1)"))

            // The same request again: the challenge was used and the counter did not move.
            let replayed = try await app.testing().sendRequest(
                .POST, "/api/orders", headers: headers, body: ByteBuffer(string: body))
            #expect(replayed.status == .conflict)

            // No assertion at all.
            let unsigned = try await app.testing().sendRequest(.POST, "/api/orders", body: ByteBuffer(string: body))
            #expect(unsigned.status == .unauthorized)
        }
    }

    func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    func base64(fromBase64URL text: String) -> String {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return base64
    }
}
