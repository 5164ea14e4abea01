import App
import AppAttest
import AppAttestHTTP
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@Suite("The example app with a simulated device")
struct AppTests {
    let authority = try! TestCertificateAuthority()
    let appID = try! AppID("ABCDE12345.com.example.app")

    struct Challenge: Decodable { var challenge: String }

    func challenge(_ client: some TestClientProtocol, _ json: String) async throws -> [UInt8] {
        try await client.execute(uri: "/appattest/challenge", method: .post, body: ByteBuffer(string: json)) {
            let text = try JSONDecoder().decode(Challenge.self, from: Data(buffer: $0.body)).challenge
            return Array(Data(base64Encoded: base64(fromBase64URL: text))!)
        }
    }

    @Test("register through the routes, call the protected route once; a replay and an unsigned request are refused")
    func registerAndCall() async throws {
        // The verifier trusts the test authority: only tests do this.
        let verifier = try AppAttestVerifier(
            configuration: .init(appID: appID, environment: .production, trustAnchor: authority.trustAnchor))
        let app = Application(
            router: OrdersApp.router(service: AppAttestService(verifier: verifier, store: MemoryAppAttestStore())))
        let device = try SimulatedDevice(authority: authority, appID: appID)

        try await app.test(.router) { client in
            // Registration.
            let attestChallenge = try await challenge(client, #"{"purpose":"attestation"}"#)
            let object = try device.attest(challenge: attestChallenge)
            let registration = """
                {"keyId":"\(device.keyID.base64EncodedString)","attestationObject":"\(Data(object).base64EncodedString())",\
                "challenge":"\(base64URL(attestChallenge))"}
                """
            try await client.execute(
                uri: "/appattest/attestation", method: .post, body: ByteBuffer(string: registration)
            ) {
                #expect($0.status == .ok)
            }

            // A protected request, signed as the app signs it.
            let body = #"{"item":"coffee"}"#
            let assertChallenge = try await challenge(
                client, #"{"purpose":"assertion","keyId":"\#(device.keyID.base64EncodedString)"}"#)
            let clientData = try AppAttestClientData.request(
                method: "POST", pathAndQuery: "/api/orders", body: Array(body.utf8), challenge: assertChallenge
            ).bytes
            var headers = HTTPFields()
            headers[AppAttestHTTPHeaders.keyID] = device.keyID.base64EncodedString
            headers[AppAttestHTTPHeaders.assertion] = Data(
                try device.assert(clientData: clientData)
            ).base64EncodedString()
            headers[AppAttestHTTPHeaders.challenge] = base64URL(assertChallenge)

            try await client.execute(
                uri: "/api/orders", method: .post, headers: headers, body: ByteBuffer(string: body)
            ) {
                #expect($0.status == .ok)
                #expect(String(buffer: $0.body).hasSuffix("(counter 1)"))
            }
            // The same request again: the challenge was used and the counter did not move.
            try await client.execute(
                uri: "/api/orders", method: .post, headers: headers, body: ByteBuffer(string: body)
            ) {
                #expect($0.status == .conflict)
            }
            // No assertion at all.
            try await client.execute(uri: "/api/orders", method: .post, body: ByteBuffer(string: body)) {
                #expect($0.status == .unauthorized)
            }
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
