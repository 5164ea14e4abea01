#if AppleServerAPI && Hummingbird
import AppleDeviceAPI
import Crypto
import Foundation
import Synchronization
import Testing

/// A clock tests can move.
final class TestClock: Sendable {
    private let time: Mutex<Date>
    init(_ date: Date) { time = Mutex(date) }
    var now: Date { time.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
    var function: @Sendable () -> Date { { self.now } }
}

/// Expects `body` to fail with an ``AppleAPIError`` of `code` (and of `fault`, when given).
func expectError(
    _ code: AppleAPIError.Code, _ fault: AppleAPIError.Fault? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(code)", sourceLocation: sourceLocation)
    } catch let error as AppleAPIError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        if let fault { #expect(error.fault == fault, "\(error)", sourceLocation: sourceLocation) }
    } catch {
        Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
    }
}

func base64URLDecode(_ text: Substring) -> Data? {
    var value = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while value.count % 4 != 0 { value.append("=") }
    return Data(base64Encoded: value)
}

@Suite("Provider JWT")
struct ProviderTokenTests {
    static let key = P256.Signing.PrivateKey()
    static let credentials = try! ProviderCredentials(teamID: "TEAM123456", keyID: "KEY1234567", privateKey: key)

    @Test("ES256 with kid, iss and iat in whole seconds; raw r‖s signature, base64url without padding")
    func shape() async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_780_000_000.75))
        let token = try await ProviderTokenSource(credentials: Self.credentials, now: clock.function).token()
        let parts = token.split(separator: ".")
        #expect(parts.count == 3)
        #expect(!token.contains("="))
        let header = try JSONSerialization.jsonObject(with: base64URLDecode(parts[0])!) as! [String: Any]
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEY1234567")
        let claims = try JSONSerialization.jsonObject(with: base64URLDecode(parts[1])!) as! [String: Any]
        #expect(claims["iss"] as? String == "TEAM123456")
        #expect((claims["iat"] as? NSNumber)?.doubleValue == 1_780_000_000)
        #expect(String(decoding: base64URLDecode(parts[1])!, as: UTF8.self).contains("\"iat\":1780000000"))
        let signature = base64URLDecode(parts[2])!
        #expect(signature.count == 64)
        let signed = Data("\(parts[0]).\(parts[1])".utf8)
        #expect(
            Self.key.publicKey.isValidSignature(
                try P256.Signing.ECDSASignature(rawRepresentation: signature), for: signed))
    }

    @Test("one token is reused, renewed after 40 minutes, and never carries an iat in the future")
    func caching() async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_780_000_000))
        let source = ProviderTokenSource(credentials: Self.credentials, now: clock.function)
        let first = try await source.token()
        clock.advance(39 * 60)
        #expect(try await source.token() == first)
        clock.advance(2 * 60)
        let second = try await source.token()
        #expect(second != first)
        // The clock steps back before the cached token's iat: a new token, issued at the earlier time.
        clock.advance(-3600)
        let third = try await source.token()
        #expect(third != second)
        let claims =
            try JSONSerialization.jsonObject(with: base64URLDecode(third.split(separator: ".")[1])!) as! [String: Any]
        #expect((claims["iat"] as? NSNumber)!.doubleValue <= clock.now.timeIntervalSince1970)
        await source.invalidate()
        // ECDSA signatures are randomised: a token made anew differs even within the same second.
        #expect(try await source.token() != third)
    }

    @Test(".p8 keys load as Apple issues them, and with the mislabelled EC PRIVATE KEY header")
    func p8() throws {
        let key = P256.Signing.PrivateKey()
        let pkcs8 = key.pemRepresentation
        #expect(pkcs8.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let mislabelled = pkcs8.replacingOccurrences(of: "PRIVATE KEY", with: "EC PRIVATE KEY")
        for pem in [pkcs8, mislabelled, "\n  " + pkcs8.replacingOccurrences(of: "\n", with: "\r\n") + "\n"] {
            let loaded = try ProviderCredentials(teamID: "TEAM123456", keyID: "KEY1234567", p8: pem)
            #expect(loaded.privateKey.publicKey.rawRepresentation == key.publicKey.rawRepresentation)
        }
        for bad in [
            "", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----", String(repeating: "A", count: 20_000),
        ] {
            #expect(throws: AppleAPIError.self) {
                try ProviderCredentials(teamID: "TEAM123456", keyID: "KEY1234567", p8: bad)
            }
        }
        for (team, keyID) in [("TEAM12345", "KEY1234567"), ("TEAM123456", "key1234567"), ("TEAM12345!", "KEY1234567")] {
            do {
                _ = try ProviderCredentials(teamID: team, keyID: keyID, privateKey: key)
                Issue.record("accepted \(team) \(keyID)")
            } catch {
                #expect(error.code == .invalidCredentials && error.fault == .credentials)
            }
        }
    }
}
#endif  // AppleServerAPI && Hummingbird
