#if HTTP
import AppAttest
import AppAttestHTTP
import AppAttestWire
import Foundation
import HTTPTypes
import Testing

/// One input type for an assertion: a protected request's header fields and `appattest serve`'s JSON describe the same
/// assertion as the same value, and whatever does not decode is refused before any verification work.
@Suite("HTTP layer: one input for an assertion, from header fields or JSON")
struct AssertionInputTests {
    static let keyID = try! KeyID(rawValue: (0..<32).map { UInt8($0) })
    static let assertion: [UInt8] = [0xA2, 1, 2, 3]
    static let challenge: [UInt8] = Array(repeating: 0xFB, count: 32)
    static let bodySHA256: [UInt8] = Array(repeating: 0x11, count: 32)

    static func request(_ fields: [(HTTPField.Name, String)], path: String = "/api/orders?x=%3B") -> HTTPRequest {
        var request = HTTPRequest(method: .post, scheme: "https", authority: "example.com", path: path)
        for (name, value) in fields { request.headerFields[name] = value }
        return request
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: object))
    }

    @Test("a request with a challenge: the header fields and the JSON give equal inputs")
    func challengeForms() throws {
        let fromHeaders = try AppAttestAssertionInput(
            request: Self.request([
                (AppAttestHTTPHeaders.keyID, Self.keyID.base64EncodedString),
                (AppAttestHTTPHeaders.assertion, Data(Self.assertion).base64EncodedString()),
                (AppAttestHTTPHeaders.challenge, RequestBindingLayout.base64URL(Self.challenge)),
            ]),
            bodySHA256: Self.bodySHA256, freshness: .challengePerRequest)
        let fromJSON = try AppAttestAssertionInput(
            json: Self.json([
                "keyId": Self.keyID.base64EncodedString,
                "assertion": Data(Self.assertion).base64EncodedString(),
                "request": [
                    "method": "POST", "pathAndQuery": "/api/orders?x=%3B",
                    "bodySha256": Data(Self.bodySHA256).base64EncodedString(),
                    "challenge": RequestBindingLayout.base64URL(Self.challenge),
                ],
            ]))
        #expect(fromHeaders == fromJSON)
        #expect(
            fromHeaders.binding
                == .request(
                    method: "POST", pathAndQuery: "/api/orders?x=%3B", bodySHA256: Self.bodySHA256,
                    proof: .challenge(Self.challenge)))
    }

    @Test("a request with a timestamp: both forms agree, and only digits are a timestamp")
    func timestampForms() throws {
        let fields: [(HTTPField.Name, String)] = [
            (AppAttestHTTPHeaders.keyID, Self.keyID.base64EncodedString),
            (AppAttestHTTPHeaders.assertion, Data(Self.assertion).base64EncodedString()),
        ]
        let fromHeaders = try AppAttestAssertionInput(
            request: Self.request(fields + [(AppAttestHTTPHeaders.timestamp, "1764000000000")]),
            bodySHA256: Self.bodySHA256, freshness: .timestamp())
        let fromJSON = try AppAttestAssertionInput(
            json: Self.json([
                "keyId": Self.keyID.base64EncodedString,
                "assertion": Data(Self.assertion).base64EncodedString(),
                "request": [
                    "method": "POST", "pathAndQuery": "/api/orders?x=%3B",
                    "bodySha256": Data(Self.bodySHA256).base64EncodedString(), "timestamp": 1_764_000_000_000,
                ],
            ]))
        #expect(fromHeaders == fromJSON)
        for bad in ["-1", "1e12", "1.5", "17640000000000000", "0x10"] {
            #expect(throws: AppAttestProblem.self, "\(bad)") {
                try AppAttestAssertionInput(
                    request: Self.request(fields + [(AppAttestHTTPHeaders.timestamp, bad)]),
                    bodySHA256: Self.bodySHA256, freshness: .timestamp())
            }
        }
    }

    @Test("missing fields are missingAssertion; fields that do not decode are malformed")
    func refusals() {
        func code(_ body: () throws -> AppAttestAssertionInput) -> String? {
            do {
                _ = try body()
                return nil
            } catch { return (error as? AppAttestProblem)?.code ?? "\(error)" }
        }
        let key = (AppAttestHTTPHeaders.keyID, Self.keyID.base64EncodedString)
        let assertion = (AppAttestHTTPHeaders.assertion, Data(Self.assertion).base64EncodedString())
        #expect(
            code {
                try AppAttestAssertionInput(
                    request: Self.request([key]), bodySHA256: Self.bodySHA256, freshness: .challengePerRequest)
            } == "missingAssertion")
        #expect(
            code {
                try AppAttestAssertionInput(
                    request: Self.request([key, assertion]), bodySHA256: Self.bodySHA256,
                    freshness: .challengePerRequest)
            } == "missingAssertion")
        #expect(
            code {
                try AppAttestAssertionInput(
                    request: Self.request([key, assertion, (AppAttestHTTPHeaders.challenge, "not*base64url")]),
                    bodySHA256: Self.bodySHA256, freshness: .challengePerRequest)
            } == "malformed")
        #expect(
            code {
                try AppAttestAssertionInput(
                    request: Self.request([(AppAttestHTTPHeaders.keyID, "AAAA"), assertion]),
                    bodySHA256: Self.bodySHA256, freshness: .timestamp())
            } == "malformed")
        for body in [
            "", "[]", "{}", #"{"keyId":"AAAA","assertion":"oQ=="}"#,
            #"{"keyId":"\#(Self.keyID.base64EncodedString)","assertion":"oQ==","clientData":"AA==","request":{"method":"GET","pathAndQuery":"/","bodySha256":"AA==","timestamp":1}}"#,
            #"{"keyId":"\#(Self.keyID.base64EncodedString)","assertion":"oQ==","request":{"method":"GET","pathAndQuery":"/","bodySha256":"AA=="}}"#,
        ] {
            #expect(code { try AppAttestAssertionInput(json: Array(body.utf8)) } == "malformed", "\(body)")
        }
    }
}
#endif  // HTTP
