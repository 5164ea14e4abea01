import AppAttestHTTP
import AppAttestTesting
import Foundation
import Testing

/// The verification body's plain reader against Foundation's `JSONDecoder`: on every body the reader accepts, both give
/// the same value; every other body is left to the decoder.
@Suite struct PlainJSONTests {
    typealias Body = AppAttestAssertionInput.JSONBody

    static let usual: [String] = [
        #"{"keyId":"hCSL8fUuNyS9xGPmq0dp4IxLI5PT8dlYk6QXX4Olzxc=","assertion":"omlzaWduYXR1cmVY","clientData":"bG9hZA=="}"#,
        #"{"assertion":"b21s","keyId":"a2V5","clientData":"ZGF0YQ","challenge":"Y2hhbGxlbmdl","issueNextChallenge":true}"#,
        " \r\n\t{ \"keyId\" : \"a2V5\" ,\n \"assertion\":\"b21s\", \"issueNextChallenge\" : false } \n",
        #"{"keyId":"","assertion":"","clientData":" !#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}~"}"#,
    ]

    @Test("the usual bodies are read without the decoder, to the decoder's value", arguments: usual)
    func usualBodies(text: String) throws {
        let bytes = Array(text.utf8)
        let plain = try #require(Body(plain: bytes))
        #expect(plain == AppAttestHTTPOperations.decode(Body.self, bytes))
    }

    static let leftToTheDecoder: [String] = [
        #"{"keyId":"a\/2V5","assertion":"b21s"}"#,  // an escape
        #"{"keyId":"é","assertion":"b21s"}"#,  // not ASCII
        #"{"keyId":"a2V5","assertion":"b21s","clientData":null}"#,  // null
        #"{"keyId":"a2V5","assertion":"b21s","unknown":"x"}"#,  // a member the body does not have
        #"{"keyId":"a2V5","keyId":"b21s","assertion":"b21s"}"#,  // a member twice
        #"{"keyId":"a2V5","assertion":"b21s","request":{"method":"GET","pathAndQuery":"/","bodySha256":"AA=="}}"#,
        #"{"keyId":"a2V5","assertion":"b21s","issueNextChallenge":1}"#,  // a number
        #"{"keyId":"a2V5","assertion":"b21s"}x"#,  // trailing bytes
        #"{"keyId":"a2V5","assertion":"b21s",}"#,  // a trailing comma
        #"{"keyId":"a2V5"}"#,  // no assertion
        "{}", "", "[]", #""keyId""#,
        "\u{FEFF}{\"keyId\":\"a2V5\",\"assertion\":\"b21s\"}",  // a byte order mark
        "{\"keyId\":\"a2V5\u{7F}\",\"assertion\":\"b21s\"}",  // DEL
        "{\"keyId\":\"a2V5\u{1}\",\"assertion\":\"b21s\"}",  // a control character
        #"{"keyId":"a2V5","assertion":"b21s","issueNextChallenge":tru}"#,
        #"{"keyId":"a2V5","assertion":"b21s","issueNextChallenge":truex}"#,
        #"{"keyId":"a2V5","assertion":"b21s""#,  // not closed
    ]

    @Test("anything else is left to the decoder", arguments: leftToTheDecoder)
    func otherBodies(text: String) {
        #expect(Body(plain: Array(text.utf8)) == nil)
    }

    /// 40,000 damaged bodies: bytes replaced, inserted and removed, with JSON's own characters most of the time.
    @Test func damagedBodiesGetTheDecodersAnswer() {
        var random = SplitMix64(seed: 0x5EED_0F_7E57)
        let alphabet = Array(#"{}[]":,\ tfnrue01-.+eE/"#.utf8) + [0x00, 0x09, 0x0A, 0x7F, 0xC3, 0xA9, 0xFF, 0x41]
        var read = 0
        for round in 0..<40_000 {
            var bytes = Array(Self.usual[round % Self.usual.count].utf8)
            for _ in 0...(random.next() % 3) {
                let position = Int(random.next() % UInt64(bytes.count + 1))
                let byte = alphabet[Int(random.next() % UInt64(alphabet.count))]
                switch random.next() % 3 {
                case 0 where position < bytes.count: bytes[position] = byte
                case 1: bytes.insert(byte, at: position)
                default: if position < bytes.count { bytes.remove(at: position) }
                }
            }
            guard let plain = Body(plain: bytes) else { continue }
            read += 1
            let decoded = AppAttestHTTPOperations.decode(Body.self, bytes)
            #expect(plain == decoded, "\(String(decoding: bytes, as: UTF8.self))")
        }
        // Damage inside a string or its white space leaves a body the plain reader still reads.
        #expect(read > 1_000)
    }

    @Test func theVerificationInputReadsBothWays() throws {
        let key = "hCSL8fUuNyS9xGPmq0dp4IxLI5PT8dlYk6QXX4Olzxc"
        let plain = try AppAttestAssertionInput(
            json: Array(#"{"keyId":"\#(key)=","assertion":"b21s","clientData":"ZGF0YQ=="}"#.utf8))
        let escaped = try AppAttestAssertionInput(
            json: Array(#"{"keyId":"\#(key)\u003d","assertion":"b21s","clientData":"ZGF0YQ\u003d\u003d"}"#.utf8))
        #expect(plain == escaped)
    }
}
